"""Pickle, only for the types a pack names in its ``airlock.toml`` (``pickle = [...]``).

Nothing crosses the boundary as pickle unless the pack opts in, because unpickling runs code
chosen by whoever wrote the bytes: a compromised worker could otherwise take over ComfyUI with
one reply. When a pack lists types, both sides enforce the list:

- **Sending**: an object goes as pickle only if its exact type is listed, and the pickler
  refuses any class or function inside it that is not listed either (so a listed type holding
  an unlisted one fails on the sender, with a message naming it).
- **Receiving**: a restricted unpickler whose ``find_class`` resolves only the listed names
  (plus a few inert builtins), and the result must be of the type the sender declared. Any
  other global (``os.system``, ``builtins.eval``, an unlisted class) is refused before it is
  looked up.
- **No import on the peer's behalf in the host**: the host resolves a listed name only from a
  module it has already imported; it never imports one because a worker sent it (the host
  never runs a pack's code). A worker, which runs its pack's code anyway, may import the
  module of a listed name.

Listed names are checked when the policy is made: a ``module.QualName`` shape, and none from
modules whose classes run code or touch files when constructed (:data:`DENIED_MODULES`, the
same list the config parser refuses). A listed class still receives constructor arguments
chosen by the peer, so list plain data types only.
"""

from __future__ import annotations

import builtins
import contextlib
import contextvars
import importlib
import inspect
import io
import pickle
import re
import sys
import types
from collections.abc import Iterable, Iterator
from typing import Any

from comfy_airlock import _native, settings

#: The codec name under which pickled values travel (reserved: no codec may take it).
CODEC = "airlock.pickle"
PROTOCOL = 5

#: Modules ``pickle = [...]`` may never name: the same list the config check uses
#: (``PICKLE_DENIED_MODULES`` in ``crates/airlock-env/src/worker_policy.rs``).
DENIED_MODULES = frozenset(_native.pickle_denied_modules())

# Builtins a pickle of plain data may need, whose construction has no effect.
_INERT = {
    f"builtins.{n}": getattr(builtins, n)
    for n in ("complex", "set", "frozenset", "bytearray", "slice", "range")
}
_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")


class PickleRefused(TypeError):
    """A value was not sent or not accepted as pickle: its type, or a type inside it, is not
    in the pack's ``pickle`` list, or the bytes name something else."""


def type_name(t: type) -> str:
    return f"{t.__module__}.{t.__qualname__}"


class PicklePolicy:
    """The types one pack may send with pickle. ``may_import``: whether a listed name whose
    module is not loaded yet may be imported (workers only)."""

    def __init__(self, names: Iterable[str], *, owner: str, may_import: bool) -> None:
        self.owner = owner
        self.may_import = may_import
        checked = set()
        for n in names:
            n = n.strip()
            if not _NAME.match(n):
                raise ValueError(f"pack {owner!r}: pickle entry {n!r} is not a module.QualName")
            if n.split(".")[0] in DENIED_MODULES:
                raise ValueError(
                    f"pack {owner!r}: pickle entry {n!r}: types of this module run code or "
                    "touch files when unpickled; send them with a codec instead"
                )
            checked.add(n)
        self.names = frozenset(checked)

    def __bool__(self) -> bool:
        return bool(self.names)

    def __repr__(self) -> str:
        return f"PicklePolicy({sorted(self.names)!r}, owner={self.owner!r})"

    def allows(self, t: type) -> bool:
        return type_name(t) in self.names

    # --- sending ---------------------------------------------------------------------------

    def dumps(self, obj: Any) -> tuple[str, bytes]:
        name = type_name(type(obj))
        if name not in self.names:
            raise PickleRefused(self._unlisted(name, "send"))
        buf = io.BytesIO()
        _CheckingPickler(buf, self).dump(obj)
        return name, buf.getvalue()

    # --- receiving -------------------------------------------------------------------------

    def loads(self, name: str, data: bytes) -> Any:
        if name not in self.names:
            raise PickleRefused(self._unlisted(name, "receive"))
        if not isinstance(data, bytes):
            raise PickleRefused(f"pack {self.owner!r}: a pickled {name} without its bytes")
        obj = _RestrictedUnpickler(io.BytesIO(data), self).load()
        got = type_name(type(obj))
        if got != name:
            raise PickleRefused(
                f"pack {self.owner!r}: a pickle declared as {name} held a {got}: refused"
            )
        return obj

    def resolve(self, module: str, qualname: str) -> Any:
        """The class a pickle names, if the policy allows it; never a function."""
        full = f"{module}.{qualname}"
        if full in _INERT:
            return _INERT[full]
        if full not in self.names:
            raise PickleRefused(self._unlisted(full, "receive"))
        mod = sys.modules.get(module)
        if mod is None:
            if not self.may_import:
                raise PickleRefused(
                    f"pack {self.owner!r}: a pickled {full} arrived, but module {module!r} is "
                    "not imported in this process, and comfy-airlock never imports a module "
                    "because a worker named it"
                )
            try:
                mod = importlib.import_module(module)
            except ImportError as e:
                raise PickleRefused(f"pack {self.owner!r}: cannot import {module!r}: {e}") from e
        obj: Any = mod
        # Where nothing may be imported, read namespaces only: a module's __getattr__ (torch's,
        # numpy's) imports submodules on first access.
        get = getattr if self.may_import else inspect.getattr_static
        for part in qualname.split("."):
            obj = get(obj, part, None)
        if not isinstance(obj, type):
            raise PickleRefused(f"pack {self.owner!r}: {full} is not a class here")
        return obj

    def _unlisted(self, name: str, verb: str) -> str:
        listed = ", ".join(sorted(self.names)) or "nothing"
        return (
            f"pack {self.owner!r}: cannot {verb} a {name} as pickle: its airlock.toml "
            f"`pickle` list does not name it (it lists {listed})"
        )


class _CheckingPickler(pickle.Pickler):
    """Refuses every class and function by reference that the policy does not list."""

    def __init__(self, file: io.BytesIO, policy: PicklePolicy) -> None:
        super().__init__(file, protocol=PROTOCOL)
        self._policy = policy

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, type | types.FunctionType | types.BuiltinFunctionType):
            name = f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', '?')}"
            if name not in self._policy.names and name not in _INERT:
                raise PickleRefused(
                    f"pack {self._policy.owner!r}: the value holds a {name}, which its "
                    "airlock.toml `pickle` list does not name"
                )
        return NotImplemented


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, policy: PicklePolicy) -> None:
        super().__init__(file)
        self._policy = policy

    def find_class(self, module: str, name: str) -> Any:
        return self._policy.resolve(module, name)

    def persistent_load(self, pid: Any) -> Any:
        raise PickleRefused("persistent ids are not accepted")


# --- which policy applies ---------------------------------------------------------------------

# In the host: the policy of the pack whose worker is being called (set around each call). In a
# worker: its pack's policy, for the whole process.
_CALL: contextvars.ContextVar[PicklePolicy | None] = contextvars.ContextVar(
    "airlock_pickle", default=None
)
_PROCESS: PicklePolicy | None = None

ENV = settings.ENV["pickle"]


def current() -> PicklePolicy | None:
    return _CALL.get() or _PROCESS


def in_force() -> bool:
    """Whether a policy applies to this thread's values now."""
    return _CALL.get() is not None


@contextlib.contextmanager
def applying(policy: PicklePolicy | None) -> Iterator[None]:
    """Makes ``policy`` the one for values sent and received on this thread meanwhile."""
    token = _CALL.set(policy)
    try:
        yield
    finally:
        _CALL.reset(token)


def install_from_env() -> None:
    """In a worker: the pack's list, as the host passed it (comma-separated)."""
    global _PROCESS
    names = list(settings.get().pickle)
    owner = settings.get().name
    _PROCESS = PicklePolicy(names, owner=owner, may_import=True) if names else None
