import resource
import time

import torch


def minflt():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def noop():
    return None


def nbytes_of(x):
    return x.nbytes


def make(n):
    return torch.ones(n // 4)


def times_one(x):
    return x * 1


def timed_times_one(x):
    f0 = minflt()
    t0 = time.perf_counter_ns()
    y = x * 1
    t1 = time.perf_counter_ns()
    f1 = minflt()
    return y, t1 - t0, f1 - f0


def threads(n):
    torch.set_num_threads(n)
    return torch.get_num_threads()


def import_comfy(comfy_dir):
    import sys

    sys.path.insert(0, comfy_dir)
    sys.argv = ["main.py", "--cpu"]
    import comfy.model_management  # noqa

    return "ok"


_PR = None


def prof_start():
    global _PR
    import cProfile

    _PR = cProfile.Profile()
    _PR.enable()


def prof_stop(n=18):
    import io
    import pstats

    _PR.disable()
    s = io.StringIO()
    pstats.Stats(_PR, stream=s).sort_stats("tottime").print_stats(n)
    return s.getvalue()


def disarm():
    """This worker's private mappings are no longer armed: private_pages walks them."""
    import types

    from comfy_airlock import _native, mappings

    mappings._native = types.SimpleNamespace(
        watch_private=lambda addr, nbytes: False, private_pages=_native.private_pages
    )
