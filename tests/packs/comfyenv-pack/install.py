from comfy_env import install

install()
