"""A member whose import fails: natively ComfyUI logs it and loads the other packs."""

import regional_broken_missing_module  # noqa: F401

NODE_CLASS_MAPPINGS = {}
