"""A module a pack imports without declaring the package that provides it (ADR 0049).

Natively a pack imports from ComfyUI's environment, which holds whatever the user and every
other pack installed, and real packs rely on it: ComfyUI-post-processing-nodes imports ``cv2``
and declares no dependency at all; Comfyroll imports ``matplotlib`` without a requirements
file. An isolated pack's environment holds what the pack declares (and ComfyUI's own
requirements), so the same import fails there, for a pack that works natively.

When a pack's import fails with ``No module named 'X'`` and ComfyUI's environment (the process
this runs in: the host, or ``airlock isolate`` run by ComfyUI's Python) provides ``X`` from an
installed distribution, that distribution, at the version found, is what the pack relied on.
``airlock isolate`` adds it to the ``airlock.toml`` it wrote and builds again; elsewhere (a
config the user or the author wrote, a node that imports it late) the error says what to add
and where. Nothing is ever imported to find out: the import system's finders and the installed
distributions' file lists answer.

:func:`missing_module` and :func:`hint` are pure rules; :func:`provider_here` reads this
process's environment.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_NO_MODULE = re.compile(r"No module named '([A-Za-z_][A-Za-z0-9_]*)'$")
_MODULE_NOT_FOUND = ("ModuleNotFoundError", "builtins.ModuleNotFoundError")


@dataclass(frozen=True)
class Provider:
    """Where ComfyUI's environment gets a module from."""

    module: str
    #: The installed distribution whose files hold the module, as pip names it; None when the
    #: module is found but no installed distribution owns it (another custom node's code, a
    #: folder on ``sys.path``).
    distribution: str | None
    version: str | None
    #: The file (or package folder) the import system would load.
    origin: str | None

    @property
    def requirement(self) -> str | None:
        """``name==version``: the very version the pack ran with natively."""
        if self.distribution is None:
            return None
        return f"{self.distribution}=={self.version}" if self.version else self.distribution


def missing_module(type_name: str | None, message: str | None) -> str | None:
    """The top-level module a ``ModuleNotFoundError`` says is missing; None for any other
    error, and for a missing submodule (``No module named 'a.b'``: ``a`` was found, so the
    environment has the package, in another shape or version, which adding it would not fix).
    ``message`` may carry more lines (a traceback): the first one is the error's."""
    if type_name not in _MODULE_NOT_FOUND or not message:
        return None
    found = _NO_MODULE.match(message.strip().splitlines()[0].strip())
    return found.group(1) if found else None


# A traceback's chained exceptions: the error raised while handling (or from) another.
_CHAINED = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)


def missing_module_in(traceback: str | None) -> str | None:
    """The top-level module whose ``ModuleNotFoundError`` a traceback shows as the cause of
    the error it ends with: rembg, missing onnxruntime, prints how to install it and raises
    ``SystemExit(1)`` from its ``except ImportError``, and a pack's import then fails with
    that. The last such link of the chain; None when no missing module led to the error."""
    if not traceback:
        return None
    lines = [line.strip() for line in traceback.splitlines()]
    found = None
    for i, line in enumerate(lines):
        if not line.startswith("ModuleNotFoundError: "):
            continue
        module = missing_module("ModuleNotFoundError", line.removeprefix("ModuleNotFoundError: "))
        after = next((x for x in lines[i + 1 :] if x), None)
        if module and after in _CHAINED:
            found = module
    return found


# The note a worker adds to a pack's failed import: the top-level modules the import looked for
# and found nowhere, though it went on (a ``try: import x / except ImportError`` that swallowed
# it) and failed later, elsewhere: Comfyroll's graphics nodes catch the ImportError of
# ``matplotlib`` and the pack fails at ``NameError: CR_HalftoneGrid``.
_LOOKED_FOR = (
    "comfy-airlock: while it was imported, the pack looked for modules its environment "
    "does not have: "
)
# Never added to an environment: a pack that imports pip installs packages into its
# environment at run time; an environment is what its lock says.
NEVER_ADDED = frozenset({"pip"})


def looked_for_note(modules: list[str]) -> str:
    """The note a worker adds to the error of a pack's failed import."""
    return _LOOKED_FOR + ", ".join(modules)


def looked_for_in(traceback: str | None) -> list[str]:
    """The modules a worker's note (:func:`looked_for_note`) names in a traceback."""
    for line in reversed((traceback or "").splitlines()):
        if line.startswith(_LOOKED_FOR):
            names = (n.strip() for n in line.removeprefix(_LOOKED_FOR).split(","))
            return [n for n in names if n.isidentifier()]
    return []


def looked_for_of(e: BaseException) -> list[str]:
    """:func:`looked_for_in` of an exception re-created from a worker's."""
    return looked_for_in(getattr(e, "remote_traceback", None))


def missing_module_of(e: BaseException) -> str | None:
    """:func:`missing_module` of an exception, local or re-created from a worker's, else the
    missing module its worker's traceback shows as its cause (:func:`missing_module_in`)."""
    name = getattr(e, "remote_type", None) or type(e).__name__
    direct = missing_module(name, str(e.args[0]) if e.args else str(e))
    return direct or missing_module_in(getattr(e, "remote_traceback", None))


def missing_module_of_failure(failure: dict[str, Any]) -> str | None:
    """The same, of a scan failure as the scan cache records it (``type``, ``error``,
    ``traceback``)."""
    direct = missing_module(failure.get("type"), failure.get("error"))
    return direct or missing_module_in(failure.get("traceback"))


def provider_here(module: str) -> Provider | None:
    """Where this process's environment finds the top-level ``module``; None when it does
    not find it, or when it is part of Python itself."""
    if module in sys.stdlib_module_names or module in sys.builtin_module_names:
        return None
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    origin = spec.origin if spec.origin not in (None, "built-in", "frozen") else None
    if origin is None and spec.submodule_search_locations:
        origin = next(iter(spec.submodule_search_locations), None)
    if origin is None:
        return Provider(module, None, None, None)
    dist = _owner(module, Path(origin))
    if dist is None:
        return Provider(module, None, None, origin)
    return Provider(module, dist.metadata["Name"], dist.version, origin)


def _owner(module: str, origin: Path) -> importlib.metadata.Distribution | None:
    """The installed distribution whose file list holds ``origin`` (two distributions can say
    they provide one name, as opencv-python and opencv-contrib-python both give ``cv2``: the
    one whose file the import system would load is the one the pack ran with)."""
    try:
        target = origin.resolve()
    except OSError:
        return None
    for name in importlib.metadata.packages_distributions().get(module, []):
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        for f in dist.files or ():
            top = f.parts[0] if f.parts else ""
            if top != module and not top.startswith(f"{module}."):  # a package, a module file
                continue
            try:
                path = Path(dist.locate_file(f)).resolve()
            except OSError:
                continue
            # A namespace package has no file of its own: its folder is the origin.
            if target in (path, path.parent):
                return dist
    return None


def hint_here(module: str, config: str) -> str:
    """:func:`hint`, the provider read from this process's environment."""
    return hint(module, provider_here(module), config)


def _addable(providers: dict[str, Provider | None]) -> dict[str, Provider]:
    """The modules of ``providers`` that ComfyUI's environment has from an installed
    distribution, so a requirement can name them (never pip)."""
    return {m: p for m, p in providers.items() if p and p.requirement and m not in NEVER_ADDED}


def looked_for_hint(providers: dict[str, Provider | None], config: str) -> str | None:
    """What to do about a pack whose failed import looked for the modules ``providers`` names
    (each with where ComfyUI's environment has it, or None): the ones ComfyUI has, at its
    versions, are what the pack would have found natively; else the ones ComfyUI lacks too.
    None when there are neither."""
    found = _addable(providers)
    if not found:
        lacking = [m for m, p in providers.items() if p is None]
        if not lacking:
            return None
        return (
            f"While it was imported, the pack looked for {', '.join(lacking)}, which neither "
            "its environment nor ComfyUI's has: if it needs one, add the package that provides "
            f"it to `dependencies` in {config}."
        )
    pins = ", ".join(f'"{p.requirement}"' for p in found.values())
    return (
        f"While it was imported, the pack looked for {', '.join(found)} without declaring it, "
        "and its environment does not have it; natively it comes from ComfyUI's environment. "
        f"If the pack needs it, add {pins} to `dependencies` in {config}."
    )


def went_without_note(pack: str, providers: dict[str, Provider | None], config: str) -> str | None:
    """What to say of a pack whose import succeeded but went on without the modules
    ``providers`` names, which its own files imported (each with where ComfyUI's environment
    has it, or None): only the ones ComfyUI has, which the pack had natively (ADR 0057). None
    when there are none."""
    found = _addable(providers)
    if not found:
        return None
    have = ", ".join(f"{m} ({p.distribution} {p.version})" for m, p in found.items())
    pins = ", ".join(f'"{p.requirement}"' for p in found.values())
    return (
        f"{pack}'s import went on without {', '.join(found)}, which its own code imports and "
        f"ComfyUI's environment has: {have}. Natively the pack has them; if nodes it has "
        f"natively are missing here, add {pins} to `dependencies` in {config} and restart "
        "ComfyUI."
    )


def looked_for_hint_here(modules: list[str], config: str) -> str | None:
    """:func:`looked_for_hint`, the providers read from this process's environment."""
    return looked_for_hint({m: provider_here(m) for m in modules}, config)


def hint_of(e: BaseException, config: str) -> str | None:
    """What to add, and where, for a pack whose import failed with ``e`` (local or re-created
    from a worker's): the module its error names (ADR 0049), else the modules its import looked
    for and found nowhere (ADR 0050); None when it shows neither."""
    return _hint_for(missing_module_of(e), looked_for_of(e), config)


def hint_of_failure(failure: dict[str, Any], config: str) -> str | None:
    """:func:`hint_of`, of a scan failure as the scan cache records it."""
    looked_for = looked_for_in(failure.get("traceback"))
    return _hint_for(missing_module_of_failure(failure), looked_for, config)


def _hint_for(module: str | None, looked_for: list[str], config: str) -> str | None:
    if module:
        return hint_here(module, config)
    return looked_for_hint_here(looked_for, config)


def hint(module: str, provider: Provider | None, config: str) -> str:
    """What to do about a pack that imports ``module`` without declaring it, its environment
    configured by the file ``config``."""
    if provider is None:
        return (
            f"The pack imports {module} without declaring it, and ComfyUI's environment does "
            f"not have it either: add the package that provides {module} to `dependencies` in "
            f"{config}."
        )
    if provider.requirement is None:
        where = f" at {provider.origin}" if provider.origin else ""
        return (
            f"The pack imports {module} without declaring it; ComfyUI's Python finds it{where}, "
            "which no installed package provides (another custom node's code?): packs that "
            "import each other's code belong in one environment: a group (`packs` in airlock.toml)."
        )
    return (
        f"The pack imports {module} without declaring it; natively it comes from ComfyUI's "
        f"environment ({provider.distribution} {provider.version}). Add "
        f'"{provider.requirement}" to `dependencies` in {config}: the environment is built '
        "again at the next start."
    )
