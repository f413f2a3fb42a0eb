from pathlib import Path

from comfy_env import copy_files, setup_env

setup_env()

SCRIPT_DIR = Path(__file__).resolve().parent

# Example inputs, as comfy-env packs ship them.
copy_files(SCRIPT_DIR / "assets", "input/comfyenv-pack", "*.txt")
