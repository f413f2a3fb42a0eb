"""The worker runtime: what runs inside a worker process (``python -m comfy_airlock.worker``)."""
