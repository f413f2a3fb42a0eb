"""comfy-env's public API, answered by comfy-airlock (ADR 0025).

This module is found only where no real comfy-env is installed (its folder comes after
site-packages on ``sys.path``); see ``comfy_airlock.compat``. Each function does what its
comfy-env namesake does, the comfy-airlock way: ``register_nodes`` isolates each sub-folder
that has a ``comfy-env.toml`` in its own environment and worker, ``setup_env`` reports the
environments, ``install`` builds them, ``register_serializer`` adds a codec.
"""

import os
import sys

__version__ = "0.0.0+comfy-airlock"
__all__ = ["copy_files", "install", "register_nodes", "register_serializer", "setup_env"]


def _caller(depth: int = 2):
    g = sys._getframe(depth).f_globals
    return g.get("__file__"), g.get("__name__")


def register_nodes(nodes_package="nodes"):
    """``NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS = register_nodes()`` in a pack's
    ``__init__.py``: proxies for the nodes of each ``nodes/<sub>/comfy-env.toml`` (or of
    ``nodes/`` when it has the file), running in their own environments; folders without one
    imported here, as comfy-env does. In a worker: nothing (the worker imports the nodes)."""
    from comfy_airlock import comfy_env_api as host

    file, module = _caller()
    return host.register_nodes(file, module, nodes_package)


def setup_env():
    """``prestartup_script.py``: says whether each of the calling pack's environments is
    ready. Never raises."""
    from comfy_airlock import comfy_env_api as host

    file, _ = _caller()
    host.setup_env(file)


def install(config=None, node_dir=None, log_callback=None, dry_run=False):
    """``install.py``: builds the calling pack's environments (``dry_run``: plans them)."""
    from comfy_airlock import comfy_env_api as host

    file, _ = _caller()
    return host.install(
        node_dir or (os.path.dirname(file) if file else None), log_callback, dry_run
    )


def copy_files(src, dst, pattern="*", overwrite=False):
    """Copies files matching ``pattern`` from ``src`` to ``dst`` (relative paths: from the
    calling script's folder; ``input/``, ``output/``, ``temp/``, ``user/``: ComfyUI's own
    folders). Existing files are kept unless ``overwrite``. Returns how many were copied."""
    from comfy_airlock import comfy_env_api as host

    file, _ = _caller()
    return host.copy_files(file, src, dst, pattern, overwrite)


def register_serializer(type_name, serialize, deserialize=None, tag=None):
    """A custom socket type: instances of a class named ``type_name`` (or a subclass) cross
    as ``serialize(obj, recurse)`` and are rebuilt by ``deserialize(payload, recurse)``."""
    from comfy_airlock import comfy_env_api as host

    host.register_serializer(type_name, serialize, deserialize, tag)
