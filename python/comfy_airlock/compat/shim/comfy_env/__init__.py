"""comfy-env's public API, answered by comfy-airlock (ADR 0025).

This module is found only where no real comfy-env is installed (its folder comes after
site-packages on ``sys.path``); see ``comfy_airlock.compat``. Each function does what its
comfy-env namesake does, the comfy-airlock way: ``register_nodes`` isolates each sub-folder
that has a ``comfy-env.toml`` in its own environment and worker, ``setup_env`` reports the
environments, ``install`` builds them, ``register_serializer`` adds a codec.
"""

import os

__version__ = "0.0.0+comfy-airlock"
__all__ = ["copy_files", "install", "register_nodes", "register_serializer", "setup_env"]


def _importing(nodes_package="nodes"):
    """``(module name, folder)`` of the pack being imported, or None. comfy-env reads its
    caller's frame for this; we read ``sys.modules`` (ADR 0033)."""
    from comfy_airlock.compat import importing

    def is_pack(folder):
        return os.path.isdir(os.path.join(folder, nodes_package)) or os.path.isfile(
            os.path.join(folder, "comfy-env.toml")
        )

    return importing.importing_pack(is_pack)


def register_nodes(nodes_package="nodes"):
    """``NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS = register_nodes()`` in a pack's
    ``__init__.py``: proxies for the nodes of each ``nodes/<sub>/comfy-env.toml`` (or of
    ``nodes/`` when it has the file), running in their own environments; folders without one
    imported here, as comfy-env does. In a worker: nothing (the worker imports the nodes)."""
    from comfy_airlock import comfy_env_api as host

    return host.register_nodes(_importing(nodes_package), nodes_package)


def setup_env():
    """``prestartup_script.py``: says whether each environment of the comfy-env packs in
    ComfyUI's ``custom_nodes`` folders is ready, once per process (a prestartup script is not
    a module ComfyUI keeps, so which pack asked is not known without reading a frame).
    Never raises."""
    from comfy_airlock import comfy_env_api as host

    host.setup_env()


def install(config=None, node_dir=None, log_callback=None, dry_run=False):
    """``install.py``: builds the environments of the pack in ``node_dir`` (default: the
    folder of the script Python runs, ``python install.py`` as ComfyUI-Manager runs it, else
    the working directory); ``dry_run``: plans them."""
    from comfy_airlock import comfy_env_api as host
    from comfy_airlock.compat import importing

    return host.install(node_dir or importing.script_dir() or os.getcwd(), log_callback, dry_run)


def copy_files(src, dst, pattern="*", overwrite=False):
    """Copies files matching ``pattern`` from ``src`` to ``dst``. A ``dst`` starting with
    ``input/``, ``output/``, ``temp/`` or ``user/`` is ComfyUI's own folder; other relative
    paths are from the folder of the pack being imported, else from the working directory
    (a prestartup script passes absolute paths, as comfy-env packs do). Existing files are
    kept unless ``overwrite``. Returns how many were copied."""
    from comfy_airlock import comfy_env_api as host

    found = _importing()
    return host.copy_files(found[1] if found else None, src, dst, pattern, overwrite)


def register_serializer(type_name, serialize, deserialize=None, tag=None):
    """A custom socket type: instances of a class named ``type_name`` (or a subclass) cross
    as ``serialize(obj, recurse)`` and are rebuilt by ``deserialize(payload, recurse)``."""
    from comfy_airlock import comfy_env_api as host

    host.register_serializer(type_name, serialize, deserialize, tag)
