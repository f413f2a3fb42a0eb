from comfy_airlock.worker.runtime import main

main()
