"""Values that cross the process boundary, and how to add more.

Builtins (None, bool, int, float, str, bytes, list, tuple, dict) are encoded by the Rust core.
This module handles the rest:

- **torch tensors and numpy arrays** are copied once into a shared-memory region of the
  sender's pool and arrive as zero-copy views of that region. Dense layouts (contiguous,
  channels-last, any permutation) keep their strides; other views (slices with gaps,
  broadcasts) arrive contiguous with the same values. The region is released back to the
  sender when the last view of it dies.
- **CUDA tensors** cross by CUDA IPC where they can: the receiver copies the sender's memory on
  the card (:mod:`comfy_airlock.cuda_ipc`); else through host memory like the rest.
- A worker without torch receives tensors as numpy arrays. numpy has no bfloat16 or float8:
  those arrive as ``ml_dtypes`` arrays when ``ml_dtypes`` is installed, else as raw ``uint16`` /
  ``uint8`` bit patterns (a warning says so once).
- **Codecs** (:func:`register_codec`) turn other types into encodable values. Both sides must
  register the same codec name.
- **Pickle** is used only for the exact types a pack lists in its ``airlock.toml``
  (``pickle = [...]``), checked on both sides (see :mod:`comfy_airlock.pickling`); nothing
  else is ever pickled or unpickled.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import importlib
import logging
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from comfy_airlock import _native, cuda_ipc, kept, pickling
from comfy_airlock.mappings import region_buffer as _region_buffer
from comfy_airlock.mappings import written_privately as _written_privately
from comfy_airlock.remote import log_line, make_exception

log = logging.getLogger("comfy_airlock")


@dataclass(frozen=True)
class Codec:
    """Turns instances of ``type`` into an encodable value and back."""

    name: str
    type: type
    encode: Callable[[Any], Any]
    decode: Callable[[Any], Any]
    # Whether this instance crosses whole; None: every instance does. One that does not (an
    # attribute nothing can send) stays in a pack's worker as any other value of the pack's.
    fits: Callable[[Any], bool] | None = None


_BY_TYPE: dict[type, Codec] = {}
_BY_NAME: dict[str, Codec] = {}
# comfy-env's serializers match a class by its __name__ along the MRO (comfy_env_api.py).
_BY_CLASS_NAME: dict[str, tuple[str, Callable[[Any], Any], Callable[[Any], Any]]] = {}


#: Names of values comfy-airlock itself sends as ext values: a pack's codec may not take one.
# A torch.Size (a tuple subclass) crosses as itself, not as the plain tuple it would become.
SIZE_CODEC = "torch.Size"
RESERVED = (pickling.CODEC, cuda_ipc.CODEC, SIZE_CODEC)


def _check_name(name: str) -> None:
    if name in RESERVED:
        raise ValueError(f"codec name {name!r} is reserved")


def register_codec(
    name: str,
    type_: type,
    encode: Callable[[Any], Any],
    decode: Callable[[Any], Any],
    *,
    fits: Callable[[Any], bool] | None = None,
) -> Codec:
    """Registers a codec for exactly ``type_`` (not subclasses). ``encode(obj)`` returns any
    value that can cross (builtins, tensors, other codecs' types); ``decode(value)`` rebuilds
    the object on the other side, where a codec of the same ``name`` must be registered.
    ``fits(obj)``, if given, says whether an instance can cross at all; one that cannot is
    kept in a pack's worker like a value without a codec."""
    _check_name(name)
    codec = Codec(name, type_, encode, decode, fits)
    _BY_TYPE[type_] = codec
    _BY_NAME[name] = codec
    return codec


def register_codec_by_class_name(
    name: str, class_name: str, encode: Callable[[Any], Any], decode: Callable[[Any], Any]
) -> None:
    """A codec for any class named ``class_name`` or deriving from one (comfy-env's
    ``register_serializer``); exact-type codecs are looked up first."""
    _check_name(name)
    _BY_CLASS_NAME[class_name] = (name, encode, decode)
    _BY_NAME[name] = Codec(name, object, encode, decode)


# Codecs for types whose module may not be imported yet, and is costly to import for nothing
# (ComfyUI's video types import PyAV): registered the first time a value of the type is sent
# (its module is imported then, or the value could not exist) or the codec's name is received.
# (module, qualname) -> register(); codec name -> register().
_LATE: dict[tuple[str, str], Callable[[], None]] = {}
_LATE_BY_NAME: dict[str, Callable[[], None]] = {}
# Types seen with no late codec (a tensor's, on every send): one set lookup next time.
_NOT_LATE: set[type] = set()


def register_late_codec(
    names: tuple[str, ...], types: tuple[tuple[str, str], ...], register: Callable[[], None]
) -> None:
    """``register()`` registers codecs ``names`` for the types ``(module, qualname)`` (with
    :func:`register_codec`); it is called once, when one of them is first needed."""
    for name in names:
        _check_name(name)
        _LATE_BY_NAME[name] = register
    for key in types:
        _LATE[key] = register
    _NOT_LATE.clear()


def _register_late(register: Callable[[], None] | None) -> None:
    if register is None:
        return
    register()  # raises (its module cannot be imported here): asked again next time
    for table in (_LATE, _LATE_BY_NAME):
        for key in [k for k, v in table.items() if v is register]:
            del table[key]


def _late_codec(t: type) -> Codec | None:
    if t in _NOT_LATE:
        return None
    register = _LATE.get((t.__module__, t.__qualname__))
    if register is None:
        _NOT_LATE.add(t)
        return None
    _register_late(register)
    return _BY_TYPE.get(t)


def name_codec_count() -> int:
    return len(_BY_CLASS_NAME)


def _codec_by_class_name(t: type) -> Codec | None:
    for cls in t.__mro__:
        found = _BY_CLASS_NAME.get(cls.__name__)
        if found is not None:
            codec = Codec(found[0], t, found[1], found[2])
            _BY_TYPE[t] = codec
            return codec
    return None


# --- dtypes ---------------------------------------------------------------------------------

_TORCH_NAMES = [
    "bool",
    "uint8",
    "int8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "float8_e4m3fn",
    "float8_e5m2",
]

_NUMPY_NAMES = {
    "bool": "bool",
    "uint8": "uint8",
    "int8": "int8",
    "int16": "int16",
    "uint16": "uint16",
    "int32": "int32",
    "uint32": "uint32",
    "int64": "int64",
    "uint64": "uint64",
    "float16": "float16",
    "float32": "float32",
    "float64": "float64",
    "complex64": "complex64",
    "complex128": "complex128",
}
# Types numpy lacks: ml_dtypes' name, and the raw type of the same width.
_NUMPY_EXOTIC = {
    "bfloat16": ("bfloat16", "uint16"),
    "float8_e4m3fn": ("float8_e4m3fn", "uint8"),
    "float8_e5m2": ("float8_e5m2", "uint8"),
}
_warned_raw: set[str] = set()


_HOST = 0  # ``lane.side`` of the host (the core's ``Side::Host``)
_WORKER = 1


def _optional(name: str):
    """The module if it is installed here (imported on first need), else None."""
    module = sys.modules.get(name)
    if module is None:
        try:
            module = importlib.import_module(name)
        except ImportError:
            return None
    return module


def _finder(lane) -> Callable[[str], Any]:
    """How a received value may find torch, numpy or ml_dtypes: in a worker, importing them
    (it runs its pack's code anyway). In the host, torch and ml_dtypes only if it has imported
    them, so a torch tensor reaches a torch-less host as a numpy array; numpy, the one array
    type we choose ourselves, is imported if need be, never a module because the peer named
    it."""
    if lane.side != _HOST:
        return _optional
    return lambda name: _optional(name) if name == "numpy" else sys.modules.get(name)


def _numpy_dtype(np, name: str, find: Callable[[str], Any] = _optional):
    if name in _NUMPY_NAMES:
        return np.dtype(_NUMPY_NAMES[name])
    ml_name, raw = _NUMPY_EXOTIC[name]
    try:
        ml_dtypes = find("ml_dtypes")
        if ml_dtypes is None:
            raise ImportError("ml_dtypes")
        return np.dtype(getattr(ml_dtypes, ml_name))
    except (ImportError, AttributeError):
        if name not in _warned_raw:
            _warned_raw.add(name)
            log.warning(
                "numpy has no %s and ml_dtypes is not installed (or, in the host, not imported): "
                "%s tensors arrive as raw %s bit patterns",
                name,
                name,
                raw,
            )
        return np.dtype(raw)


def _numpy_name(dtype) -> str:
    if dtype.kind in "biufc" and dtype.name in _NUMPY_NAMES:
        return dtype.name
    if dtype.name in _NUMPY_EXOTIC:  # ml_dtypes types carry their own names
        return dtype.name
    raise TypeError(f"numpy arrays of dtype {dtype} cannot cross the boundary")


# torch.dtype -> its name in _TORCH_NAMES, as each is first sent (a lookup, not a str() per
# tensor).
_TORCH_DTYPES: dict[Any, str] = {}

# --- layout ---------------------------------------------------------------------------------


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


def _is_dense(shape, strides) -> bool:
    """True when the elements exactly fill a block of memory in some dimension order (any
    permutation of a contiguous layout, e.g. channels-last)."""
    expected = 1
    for stride, n in sorted((s, n) for n, s in zip(shape, strides, strict=True) if n != 1):
        if stride != expected:
            return False
        expected *= n
    return True


def _span(shape, strides) -> int:
    return 1 + sum((n - 1) * s for n, s in zip(shape, strides, strict=True))


def _layout(shape, strides) -> tuple[int, bool]:
    """``(_span(shape, strides), strides == _contiguous_strides(shape))`` in one pass (every
    received tensor asks both)."""
    if len(shape) == 1:  # the most common shape of all, without the loop
        n, s = shape[0], strides[0]
        return 1 + (n - 1) * s, s == 1
    span, acc, contiguous = 1, 1, True
    for n, s in zip(reversed(shape), reversed(strides), strict=True):
        span += (n - 1) * s
        if s != acc:
            contiguous = False
        if n > 1:
            acc *= n
    return span, contiguous


# --- passing on without a copy ---------------------------------------------------------------
#
# A tensor that arrived from the peer is a view of the peer's region. Sent back to the same
# peer unchanged (a worker's output going into its next node, a worker returning its input),
# it travels as a reference to that region: the owner takes a hold of its own for the view it
# makes (the core checks the region is one it leased to us), and nothing is copied. A tensor
# that came back to us that way is a view of our own region, and is sent again with one more
# hold. Only whole regions, from offset 0, dense, on the same lane; anything else is copied.

_RECEIVED_KEY = "received"


# The weak references whose callbacks give received regions back, kept alive until they run
# (a weak reference that dies first never calls back): id -> reference.
_WATCHING: dict[int, weakref.ref] = {}


def _remember(lane, buf: ctypes.Array, region) -> None:
    """Records ``buf`` as a live view of the peer's ``region`` until it dies, and gives the
    region back then (one callback for both: this runs for every tensor received)."""
    # Several live buffers can share an address (a region handed back and forth): the entry
    # goes when the last of them does.
    received = lane.mappings.setdefault(_RECEIVED_KEY, {})
    addr = ctypes.addressof(buf)
    entry = received.get(addr)
    if entry is None or entry[0] != region:
        entry = received[addr] = [region, 0]
    entry[1] += 1

    # A weak reference with a callback, not weakref.finalize: about half the cost, on every
    # tensor received (finalize also registers for the interpreter's exit, where a region
    # given back no longer matters: the peer's pool frees all of ours when we are gone).
    # The callback holds what it needs itself: it may run while the interpreter tears down
    # this module's globals.
    def gone(ref: weakref.ref, watching=_WATCHING, released=_released) -> None:
        watching.pop(id(ref), None)
        released(lane, received, addr, entry)

    ref = weakref.ref(buf, gone)
    _WATCHING[id(ref)] = ref


def _released(lane, received: dict, addr: int, entry: list) -> None:
    region = entry[0]
    entry[1] -= 1
    if entry[1] <= 0 and received.get(addr) is entry:
        del received[addr]
    lane.release(*region)


def _received(lane, addr: int, nbytes: int):
    entry = lane.mappings.get(_RECEIVED_KEY, {}).get(addr)
    region = entry[0] if entry is not None else None
    if region is None or nbytes > region[3]:
        return None
    if _written_privately(lane, region, addr, nbytes):
        return None  # written through its private mapping: those bytes exist only here
    if region[0] == lane.side:
        lane.hold_own(*region)  # ours again: one more hold, for the peer to release
    else:
        lane.pin_returned(*region)
    return region


# --- encoding -------------------------------------------------------------------------------


def by_codec(obj: Any) -> bool:
    """Whether ``obj`` crosses through a codec or as pickle the pack allows."""
    codec = _BY_TYPE.get(type(obj))
    if codec is None and _LATE:
        codec = _late_codec(type(obj))
    if codec is not None:
        return codec.fits is None or codec.fits(obj)
    policy = pickling.current()
    return policy is not None and policy.allows(type(obj))


def crosses(obj: Any) -> bool:
    """Whether ``obj`` itself can be sent (by :func:`encode_other`'s rules; the items of a
    container are not looked at)."""
    if by_codec(obj):
        return True
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        return True
    np = sys.modules.get("numpy")
    if np is not None and isinstance(obj, (np.ndarray, np.generic)):
        return True
    return isinstance(obj, (int, float, str, bytes, list, tuple, dict)) or obj is None


def encode_other(lane, obj):
    """Called by the core for any value that is not an exact builtin."""
    codec = _BY_TYPE.get(type(obj))
    if codec is None and _LATE:
        codec = _late_codec(type(obj))
    if codec is None and _BY_CLASS_NAME:
        codec = _codec_by_class_name(type(obj))
    if codec is not None:
        return ("x", codec.name, codec.encode(obj))
    policy = pickling.current()
    if policy is not None and policy.allows(type(obj)):
        return ("x", pickling.CODEC, policy.dumps(obj))
    torch = sys.modules.get("torch")
    if torch is not None:
        if isinstance(obj, torch.Tensor):
            return _encode_torch(lane, torch, obj)
        if type(obj) is torch.Size:  # a tensor's shape kept as a value (CLIP vision's sizes)
            return ("x", SIZE_CODEC, tuple(obj))
    np = sys.modules.get("numpy")
    if np is not None:
        if isinstance(obj, np.ndarray):
            return _encode_numpy(lane, np, obj)
        if isinstance(obj, np.generic):
            return ("p", obj.item())
    for base in (int, float, str, bytes):
        if isinstance(obj, base):
            # Its value, not its own __str__ (a str Enum's is "Cls.member").
            return ("p", str.__str__(obj) if base is str else base(obj))
    for base in (list, tuple, dict):
        if isinstance(obj, base):
            return ("p", base(obj))
    stand_in = _STAND_IN.get()
    if stand_in is not None:
        return encode_other(lane, stand_in(obj))
    t = type(obj)
    raise TypeError(
        f"cannot send a {t.__module__}.{t.__qualname__} across the process boundary: "
        "no codec is registered for it (comfy_airlock.register_codec), and the pack's "
        "airlock.toml does not list it in `pickle`"
    )


# While set (on the thread sending a node's inputs, host_values.py): what to send in place of
# an object nothing else can send, instead of failing (ADR 0064).
_STAND_IN: contextvars.ContextVar[Callable[[Any], Any] | None] = contextvars.ContextVar(
    "airlock_stand_in", default=None
)


@contextlib.contextmanager
def sending_stand_ins(stand_in: Callable[[Any], Any]) -> Any:
    """Values sent on this thread meanwhile send ``stand_in(obj)`` for an object that cannot
    cross (it must return a value with a codec)."""
    token = _STAND_IN.set(stand_in)
    try:
        yield
    finally:
        _STAND_IN.reset(token)


def _encode_torch(lane, torch, t):
    src = t  # what the caller holds: a kept copy lives as long as it does
    if t.requires_grad:
        t = t.detach()
    # Lazy conjugate/negative views hold unmodified bytes plus a flag: resolve them, since
    # the bytes are what cross.
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    if t.layout != torch.strided:
        raise TypeError(f"tensors with layout {t.layout} cannot cross the boundary")
    device = t.device
    on_cpu = device.type == "cpu"
    device = "cpu" if on_cpu else str(device)
    if not on_cpu:
        payload = cuda_ipc.share(torch, t)
        if payload is not None:  # opened and copied on the card by the peer (ADR 0041)
            return ("x", cuda_ipc.CODEC, payload)
        # Else through host memory: copied from the card straight into the region below (not
        # into fresh host memory first), and by the peer from there onto its card.
    dtype = _TORCH_DTYPES.get(t.dtype)
    if dtype is None:
        dtype = str(t.dtype).removeprefix("torch.")
        if dtype not in _TORCH_NAMES:
            raise TypeError(f"tensors of dtype {t.dtype} cannot cross the boundary")
        _TORCH_DTYPES[t.dtype] = dtype
    shape = tuple(t.shape)
    if t.numel() == 0:
        return ("t", "torch", dtype, shape, _contiguous_strides(shape), None, device)
    strides = tuple(t.stride())
    if t.is_contiguous():
        # The common case, without the general rule's sort: its elements fill a block in order.
        span, dense = t.numel(), True
    else:
        if not _is_dense(shape, strides):
            strides = _contiguous_strides(shape)
        span = _span(shape, strides)
        dense = strides == tuple(t.stride())
    nbytes = span * t.element_size()
    side = lane.side
    if on_cpu and dense and t.storage_offset() == 0:
        back = _received(lane, t.untyped_storage().data_ptr(), nbytes)
        if back is not None:
            return ("t", "torch", dtype, shape, strides, back, device)
    if on_cpu and dense and side == _HOST and t.data_ptr() == src.data_ptr():
        # Inference tensors (ComfyUI runs nodes under inference_mode) keep no version
        # counter: the write watch alone decides for them.
        version = 0 if t.is_inference() else t._version
        region = kept.region_for(lane, src, t.data_ptr(), nbytes, version)
        if region is not None:
            return ("t", "torch", dtype, shape, strides, region, device)
    if on_cpu and dense and side == _WORKER and t.storage_offset() == 0:
        # Written by the node's kernel straight into our pool (ADR 0044): sent as it is.
        region = lane.born(t.data_ptr(), nbytes)
        if region is not None:
            return ("t", "torch", dtype, shape, strides, region, device)
    region = lane.alloc(nbytes)
    try:
        if dense and on_cpu:
            # Dense: its bytes are one block from data_ptr; the core copies it.
            lane.write(region, t.data_ptr(), nbytes)
        else:
            dst = torch.frombuffer(_region_buffer(lane, region), dtype=t.dtype, count=span)
            dst.as_strided(shape, strides).copy_(t)
    except BaseException:
        lane.unalloc(*region)
        raise
    return ("t", "torch", dtype, shape, strides, region, device)


def _encode_numpy(lane, np, a):
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    dtype = _numpy_name(a.dtype)
    shape = tuple(a.shape)
    if a.size == 0:
        return ("t", "numpy", dtype, shape, _contiguous_strides(shape), None, "cpu")
    item = a.dtype.itemsize
    strides = tuple(s // item for s in a.strides) if all(s % item == 0 for s in a.strides) else ()
    if not strides or any(s < 0 for s in strides) or not _is_dense(shape, strides):
        strides = _contiguous_strides(shape)
    span = _span(shape, strides)
    dense = a.strides == tuple(s * item for s in strides)
    if dense:
        back = _received(lane, a.ctypes.data, span * item)
        if back is None and lane.side == _HOST:
            back = kept.region_for(lane, a, a.ctypes.data, span * item, 0)
        elif back is None:  # made by the node straight into our pool (ADR 0045): as it is
            back = lane.born(a.ctypes.data, span * item)
        if back is not None:
            return ("t", "numpy", dtype, shape, strides, back, "cpu")
    region = lane.alloc(span * item)
    try:
        if dense:
            lane.write(region, a.ctypes.data, span * item)
            return ("t", "numpy", dtype, shape, strides, region, "cpu")
        flat = np.frombuffer(_region_buffer(lane, region), dtype=a.dtype, count=span)
        dst = np.lib.stride_tricks.as_strided(
            flat, shape, tuple(s * item for s in strides), writeable=True
        )
        np.copyto(dst, a, casting="no")
    except BaseException:
        lane.unalloc(*region)
        raise
    return ("t", "numpy", dtype, shape, strides, region, "cpu")


# --- decoding -------------------------------------------------------------------------------


def decode_tensor(lane, kind, dtype, shape, strides, region, device):
    """Called by the core for each received tensor: a zero-copy view of the peer's region."""
    find = _finder(lane)
    torch = find("torch") if kind == "torch" else None
    np = None if torch is not None else find("numpy")
    if torch is None and np is None:
        torch = find("torch")
        if torch is None:
            if region is not None:
                lane.release(*region)
            if lane.side == _HOST:
                why = "this host has not imported torch, and numpy is not installed"
            else:
                why = "neither torch nor numpy is installed here"
            raise TypeError(f"received a tensor, but {why}")
    if region is None:
        if torch is not None:
            out = torch.empty(shape, dtype=getattr(torch, dtype))
            if device != "cpu" and _device_available(torch, device):
                out = out.to(device)  # an empty tensor arrives where it was sent from
            return out
        return np.empty(shape, dtype=_numpy_dtype(np, dtype, find))
    try:
        buf = _region_buffer(lane, region)
    except BaseException:
        lane.release(*region)
        raise
    # The buffer lives exactly as long as the last view of the region (torch storages and
    # numpy bases both keep it), so its death is the moment to give the region back.
    _remember(lane, buf, region)
    span, contiguous = _layout(shape, strides)
    if torch is not None:
        flat = torch.frombuffer(buf, dtype=getattr(torch, dtype), count=span)
        if contiguous:  # a 1-d tensor is ``flat`` itself (a view costs microseconds)
            out = flat if len(shape) == 1 else flat.view(shape)
        else:
            out = flat.as_strided(shape, strides)
        if device != "cpu" and _device_available(torch, device):
            out = out.to(device)
        return out
    ndt = _numpy_dtype(np, dtype, find)
    flat = np.frombuffer(buf, dtype=ndt, count=span)
    if contiguous:
        return flat.reshape(shape)
    item = ndt.itemsize
    return np.lib.stride_tricks.as_strided(flat, shape, tuple(s * item for s in strides))


def _device_available(torch, device: str) -> bool:
    try:
        d = torch.device(device)
        if d.type == "cuda":
            return torch.cuda.is_available() and (d.index or 0) < torch.cuda.device_count()
        return d.type == "cpu"
    except (RuntimeError, ValueError):
        return False


def decode_ext(name, payload):
    if name == pickling.CODEC:
        policy = pickling.current()
        if policy is None:
            raise pickling.PickleRefused(
                "received a pickled value, but no `pickle` types are allowed here: refused"
            )
        if not (isinstance(payload, tuple) and len(payload) == 2 and isinstance(payload[0], str)):
            raise pickling.PickleRefused("a pickled value of the wrong shape: refused")
        return policy.loads(payload[0], payload[1])
    if name == cuda_ipc.CODEC:
        return cuda_ipc.receive(payload)
    if name == SIZE_CODEC:
        # A side that has not imported torch uses the tuple it is (equal to the Size).
        torch = sys.modules.get("torch")
        return torch.Size(payload) if torch is not None else tuple(payload)
    codec = _BY_NAME.get(name)
    if codec is None and name in _LATE_BY_NAME:
        _register_late(_LATE_BY_NAME[name])
        codec = _BY_NAME.get(name)
    if codec is None:
        raise TypeError(f"received a value of codec {name!r}, which is not registered here")
    return codec.decode(payload)


_native.install_hooks(encode_other, decode_tensor, decode_ext, make_exception, log_line)
