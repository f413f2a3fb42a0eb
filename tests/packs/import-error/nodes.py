"""Its nodes module imports a package its environment does not have."""

import airlock_no_such_dependency  # noqa: F401


class NeverRegistered:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {}}

    RETURN_TYPES = ()
    FUNCTION = "run"


NODE_CLASS_MAPPINGS = {"AirlockNeverRegistered": NeverRegistered}
