"""A pack left in custom_nodes/ with an airlock.toml: ComfyUI imports it in-process."""

NODE_CLASS_MAPPINGS = {}
