"""Call targets for bench/run.py and bench/compare.py, imported inside the workers of every
system measured (bench/ is put on their path).

Must import nothing heavy at module level: the cold-start rows time a worker whose first call
imports torch, and the py310-numpy1 worker has no torch at all.
"""

from __future__ import annotations


def noop() -> None:
    return None


def echo(x):
    """Identity: each system sends back what it received, by its own means (airlock copies it
    into the worker's pool for the reply; pyisolate re-shares the storage it was handed)."""
    return x


def import_torch() -> str:
    import torch

    return torch.__version__


def set_threads(n: int) -> int:
    """Sets torch's intra-op thread count in the worker; returns the previous one."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(n)
    return old


def make(nbytes: int):
    """A new float32 tensor of ``nbytes`` made in the worker: a node's fresh output."""
    import torch

    return torch.ones(nbytes // 4, dtype=torch.float32)


def nbytes_of(x) -> int:
    """Reads the tensor's size only (no pass over its data): what a node does with an input
    that it hands on costs nothing here, so the row is the transport's cost."""
    return int(x.numel() * x.element_size())


class ImageInvert:
    """ComfyUI's own ImageInvert node (nodes.py), verbatim in behaviour: IMAGE in, IMAGE out."""

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"image": ("IMAGE",)}}

    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "invert"
    CATEGORY = "image"

    def invert(self, image):
        s = 1.0 - image
        return (s,)


NODES = {"ImageInvert": ImageInvert}


def run_node(class_name: str, kwargs: dict):
    """Instantiates a node class and calls its FUNCTION, as a node runner does."""
    cls = NODES[class_name]
    return getattr(cls(), cls.FUNCTION)(**kwargs)


def times_one(x):
    """A fresh output of the input's size: ``x * 1``, as a node's computation returns."""
    return x * 1


def times_one_timed(x):
    """:func:`times_one`, and how long ``x * 1`` took inside the worker, in ns."""
    import time

    t0 = time.perf_counter_ns()
    y = x * 1
    return y, time.perf_counter_ns() - t0


def numpy_half(x):
    """An image node in the shape most packs write: the work done in numpy (as PIL and OpenCV
    give pictures), a fresh float32 array wrapped with ``torch.from_numpy``."""
    import numpy as np
    import torch

    return torch.from_numpy(np.multiply(x.numpy(), np.float32(0.5)))


def numpy_chain(x):
    """A node that works in numpy in several steps, each making a new array of the image's
    size (a temporary of 256 KiB or more on the call's thread is born too, ADR 0045)."""
    import numpy as np
    import torch

    a = x.numpy()
    for _ in range(8):
        a = a * np.float32(1.01) + np.float32(0.5)
    return torch.from_numpy(a)


def add_one_in_place(x) -> None:
    """A node writing into its input (bench/gpu/gpu_checks.py: the sender's tensor must not
    change)."""
    x.add_(1)


def tail_view(x):
    """A view into the input, at an offset into its storage."""
    return x[1:]


def empty_like(x):
    """A fresh output of the input's size without computing it (bench/fresh_parts.py)."""
    import torch

    return torch.empty_like(x)


def times_one_kept(x) -> None:
    """``x * 1`` computed and dropped: the computation without its output's crossing."""
    y = x * 1
    del y


def compute_loop(nbytes: int, reps: int) -> float:
    """Seconds for ``reps`` elementwise ops on a tensor of ``nbytes`` inside the worker (many
    small parallel regions: what an OpenMP wait policy costs compute)."""
    import time

    import torch

    x = torch.rand(nbytes // 4)
    t0 = time.perf_counter()
    for _ in range(reps):
        x = x * 1.0001
    return time.perf_counter() - t0


def matmul_loop(n: int, reps: int) -> float:
    """Seconds for ``reps`` n x n float32 matmuls inside the worker (one big parallel op)."""
    import time

    import torch

    a = torch.rand(n, n)
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ a
    return time.perf_counter() - t0


def import_comfy(comfy_dir: str, cpu: bool = True) -> str:
    """What a pack's worker loads before its first node: torch and ComfyUI's core modules
    (``comfy.model_management``, ``comfy.utils``, ``folder_paths``) from the ComfyUI tree at
    ``comfy_dir``, started as ``main.py --cpu`` when ``cpu``. With them imported, every call
    goes through the worker's model bookkeeping."""
    import sys

    if comfy_dir not in sys.path:
        sys.path.insert(0, comfy_dir)
    import comfy.options

    comfy.options.enable_args_parsing()
    sys.argv = ["main.py", *(["--cpu"] if cpu else [])]
    import comfy.model_management
    import comfy.utils
    import folder_paths  # noqa: F401
    import torch

    return torch.__version__


def import_comfy_timed(comfy_dir: str, cpu: bool = True) -> tuple[float, float]:
    """:func:`import_comfy`, returning when it began and ended (CLOCK_BOOTTIME seconds)."""
    import time

    t0 = time.clock_gettime(time.CLOCK_BOOTTIME)
    import_comfy(comfy_dir, cpu)
    return t0, time.clock_gettime(time.CLOCK_BOOTTIME)


def profile_wrapper(n: int) -> str:
    """cProfile of ``n`` calls of the runtime's per-call wrapper around ``noop`` (diagnosis)."""
    import cProfile
    import io
    import pstats

    from comfy_airlock.worker import runtime

    call = runtime._resolve("bench_targets:noop")
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(n):
        call()
    pr.disable()
    out = io.StringIO()
    pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(15)
    return out.getvalue()


def start_marks() -> dict:
    """The worker's start timeline (CLOCK_BOOTTIME seconds) and now."""
    import time

    from comfy_airlock.worker import runtime

    return {**runtime.START_MARKS, "now": time.clock_gettime(time.CLOCK_BOOTTIME)}


def module_names() -> list:
    """The modules imported in this process (diagnosis of a worker's start)."""
    import sys

    return sorted(sys.modules)


def wrapper_cost(n: int) -> dict:
    """Nanoseconds per call of the runtime's per-call wrapper around ``noop``, and of ``noop``
    itself, in this worker (diagnosis of the no-op row)."""
    import time

    from comfy_airlock.worker import floor, models, ram, runtime

    call = runtime._resolve("bench_targets:noop")
    out = {}
    parts = (
        ("wrapped", call),
        ("bare", noop),
        ("active", models.active),
        ("begin_call", models.begin_call),
        ("end_call", models.end_call),
        ("signature", models._signature),
        ("enter_leave", lambda: (ram.enter(), ram.leave())),
        ("floor_due", lambda: floor.due(False)),
    )
    for name, f in parts:
        t0 = time.perf_counter_ns()
        for _ in range(n):
            f()
        out[name] = (time.perf_counter_ns() - t0) / n
    return out
