from . import by_name, in_function, module_level

NODE_CLASS_MAPPINGS = {
    **module_level.NODE_CLASS_MAPPINGS,
    **by_name.NODE_CLASS_MAPPINGS,
    **in_function.NODE_CLASS_MAPPINGS,
}
NODE_DISPLAY_NAME_MAPPINGS = {k: k.replace("Airlock", "Airlock ") for k in NODE_CLASS_MAPPINGS}
