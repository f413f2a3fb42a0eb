# ComfyUI runs this in its own process (it runs every custom_nodes/*/prestartup_script.py);
# the pack's worker runs it too, before the pack's nodes load. The environment variable is not
# one a worker inherits from the host, so the node seeing it proves the worker ran it.
import os

os.environ["OPTIN_PRESTARTUP"] = "ran"
