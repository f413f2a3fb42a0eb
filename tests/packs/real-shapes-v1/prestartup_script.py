# As packs with an LLM loader do: register the models/llm folder before any node module loads
# (ComfyUI runs custom_nodes/*/prestartup_script.py first; the nodes then index it at import).
import os

import folder_paths

folder_paths.add_model_folder_path("llm", os.path.join(folder_paths.models_dir, "llm"))
folder_paths.folder_names_and_paths["llm"][1].update({".gguf", ".safetensors"})
