# Run before any pack imports, as ComfyUI runs every pack's prestartup_script.py: in a group,
# each member's, in the worker.
import os

os.environ["REGIONAL_CORE_PRESTARTUP"] = "ran"
