"""numpy-shaped node functions for the born-output tests (ADR 0045), without torch: they run
in the numpy 1.x worker too (``.envs/py310-numpy1``)."""

import threading


def numpy_array(n, value):
    """A node returning a numpy array of ``n`` float32 values itself."""
    import numpy as np

    return np.full((n,), value, dtype=np.float32)


def numpy_allocator():
    """numpy's data allocator on this (the calling) thread and on a thread of the pack's own,
    and that of an array made in each."""
    import numpy as np

    try:
        from numpy._core.multiarray import get_handler_name
    except ImportError:  # numpy 1.x
        from numpy.core.multiarray import get_handler_name
    other = {}

    def pack_thread():
        other["handler"] = get_handler_name()
        other["array"] = get_handler_name(np.empty(1 << 18, dtype=np.float32))

    th = threading.Thread(target=pack_thread)
    th.start()
    th.join()
    return {
        "handler": get_handler_name(),
        "array": get_handler_name(np.empty(1 << 18, dtype=np.float32)),
        "small": get_handler_name(np.empty(4, dtype=np.float32)),
        "other_thread": other,
    }


def numpy_in_place(n):
    """numpy's other allocations of a born-sized array on the call thread: zeroed (calloc),
    grown and shrunk (realloc of a born block) and freed; whether each kept its bytes."""
    import numpy as np

    z = np.zeros(n, dtype=np.float32)
    a = np.arange(n, dtype=np.float32)
    a.resize(2 * n, refcheck=False)
    b = np.arange(2 * n, dtype=np.float32)
    b.resize(n // 2, refcheck=False)
    return {
        "zeroed": not z.any(),
        "grown": bool((a[:n] == np.arange(n, dtype=np.float32)).all() and not a[n:].any()),
        "shrunk": bool((b == np.arange(n // 2, dtype=np.float32)).all()),
    }


def born():
    """The worker's births (``_native.born_stats``)."""
    from comfy_airlock import _native

    return _native.born_stats()
