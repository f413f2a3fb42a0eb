"""GPU checks for docs/benchmarks.md, run by bench/gpu/run.sh; stdlib + ctypes on the driver.

1. NVML read: ``nvmlDeviceGetMemoryInfo`` latency (the arbiter's device-truth read), and
   whether ``nvmlDeviceGetComputeRunningProcesses`` lists a process holding a context.
2. D2D floor: ``cuMemcpyDtoD`` of 1 GiB within one process (GB/s).
3. D2D hand-off between processes by CUDA IPC: the parent allocates 1 GiB, sends the
   ``cuIpcGetMemHandle`` handle over a pipe; a child opens it (first open, and re-open after
   close), copies it D2D into its own buffer, and acknowledges. Times: handle -> ack for the
   open alone and for open + copy.
4. If torch imports: torch's CUDA IPC hand-off (``reduce_tensor`` / rebuild in a child) of a
   1 GiB tensor, and ``copy_`` D2D.
5. If comfy_airlock imports: ``comfy_airlock.device.nvml_memory`` latency, and a CUDA tensor
   round trip through a ``Worker`` (by CUDA IPC; through host memory with
   ``AIRLOCK_CUDA_IPC=off``), 64 MiB and 1 GiB: an echo and a fresh output (``x * 1``), beside
   two same-run floors: ``x * 1`` in this process, and ``x.to("cpu").to("cuda")`` (a crossing
   through host memory without a second process); then the checks that a crossing keeps its
   meaning (``airlock_cuda_checks``).

The memory bridge on the card is card_scenario.py, which run.sh runs after this.

Output: one JSON file (argv[1]). Each section records its error instead of stopping the run.
"""

from __future__ import annotations

import ctypes
import json
import os
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

GiB, MiB = 1 << 30, 1 << 20
ROOT = Path(__file__).resolve().parents[2]


def pstats(ns: list[int]) -> dict:
    s = sorted(ns)
    return {
        "n": len(s),
        "p50_us": statistics.median(s) / 1e3,
        "p99_us": s[min(len(s) - 1, int(0.99 * len(s)))] / 1e3,
        "min_us": s[0] / 1e3,
    }


# --- CUDA driver --------------------------------------------------------------------------


class IpcHandle(ctypes.Structure):
    """``CUipcMemHandle``: 64 opaque bytes."""

    _fields_ = [("reserved", ctypes.c_char * 64)]


class Cuda:
    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.check(self.lib.cuInit(0), "cuInit")
        dev = ctypes.c_int()
        self.check(self.lib.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
        self.ctx = ctypes.c_void_p()
        t0 = time.perf_counter_ns()
        self.check(
            self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), dev),
            "cuDevicePrimaryCtxRetain",
        )
        self.check(self.lib.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")
        self.ctx_ns = time.perf_counter_ns() - t0

    @staticmethod
    def check(rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{what} failed: CUresult {rc}")

    def alloc(self, n: int) -> int:
        p = ctypes.c_uint64()
        self.check(self.lib.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n)), "cuMemAlloc")
        return p.value

    def free(self, p: int) -> None:
        self.check(self.lib.cuMemFree_v2(ctypes.c_uint64(p)), "cuMemFree")

    def d2d(self, dst: int, src: int, n: int) -> None:
        self.check(
            self.lib.cuMemcpyDtoD_v2(
                ctypes.c_uint64(dst), ctypes.c_uint64(src), ctypes.c_size_t(n)
            ),
            "cuMemcpyDtoD",
        )
        self.sync()

    def sync(self) -> None:
        self.check(self.lib.cuCtxSynchronize(), "cuCtxSynchronize")

    def ipc_handle(self, p: int) -> bytes:
        h = (ctypes.c_char * 64)()
        self.check(self.lib.cuIpcGetMemHandle(h, ctypes.c_uint64(p)), "cuIpcGetMemHandle")
        return bytes(h)

    def ipc_open(self, handle: bytes) -> int:
        p = ctypes.c_uint64()
        h = IpcHandle.from_buffer_copy(handle)
        # CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1. The handle is passed by value: a Structure
        # (a bare ctypes array in argtypes would be passed as a pointer).
        self.lib.cuIpcOpenMemHandle_v2.argtypes = [
            ctypes.POINTER(ctypes.c_uint64),
            IpcHandle,
            ctypes.c_uint,
        ]
        self.check(self.lib.cuIpcOpenMemHandle_v2(ctypes.byref(p), h, 1), "cuIpcOpenMemHandle")
        return p.value

    def ipc_close(self, p: int) -> None:
        self.check(self.lib.cuIpcCloseMemHandle(ctypes.c_uint64(p)), "cuIpcCloseMemHandle")


def child() -> None:
    """IPC child: for each handle line (hex), open it, copy it D2D, close, answer with times."""
    cu = Cuda()
    n = int(sys.stdin.readline())
    mine = cu.alloc(n)
    print("ready", flush=True)
    for line in sys.stdin:
        h = bytes.fromhex(line.strip())
        t0 = time.perf_counter_ns()
        p = cu.ipc_open(h)
        t1 = time.perf_counter_ns()
        cu.d2d(mine, p, n)
        t2 = time.perf_counter_ns()
        cu.ipc_close(p)
        print(json.dumps({"open_ns": t1 - t0, "copy_ns": t2 - t1}), flush=True)


def d2d_sections(res: dict) -> None:
    cu = Cuda()
    res["cuda_context_ns"] = cu.ctx_ns
    a, b = cu.alloc(GiB), cu.alloc(GiB)
    cu.d2d(b, a, GiB)  # warm
    ns = []
    for _ in range(20):
        t0 = time.perf_counter_ns()
        cu.d2d(b, a, GiB)
        ns.append(time.perf_counter_ns() - t0)
    res["d2d_1gib"] = {**pstats(ns), "gb_per_s": GiB / statistics.median(ns)}
    handle = cu.ipc_handle(a)
    p = subprocess.Popen(
        [sys.executable, __file__, "--child"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    p.stdin.write(f"{GiB}\n")
    p.stdin.flush()
    assert p.stdout.readline().strip() == "ready"
    rows = []
    for _ in range(20):
        t0 = time.perf_counter_ns()
        p.stdin.write(handle.hex() + "\n")
        p.stdin.flush()
        r = json.loads(p.stdout.readline())
        r["handoff_ns"] = time.perf_counter_ns() - t0
        rows.append(r)
    p.stdin.close()
    p.wait()
    res["ipc_handoff_1gib"] = {
        "first_open_us": rows[0]["open_ns"] / 1e3,
        "open": pstats([r["open_ns"] for r in rows[1:]]),
        "copy_d2d": pstats([r["copy_ns"] for r in rows[1:]]),
        "handle_to_ack_incl_open_and_copy": pstats([r["handoff_ns"] for r in rows[1:]]),
    }
    cu.free(a)
    cu.free(b)


# --- NVML ---------------------------------------------------------------------------------


class NvmlMemory(ctypes.Structure):
    _fields_ = [
        ("total", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    ]


class NvmlProc(ctypes.Structure):
    _fields_ = [
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]


def nvml_section(res: dict) -> None:
    nv = ctypes.CDLL("libnvidia-ml.so.1")
    assert nv.nvmlInit_v2() == 0
    dev = ctypes.c_void_p()
    assert nv.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev)) == 0
    mem = NvmlMemory()
    ns = []
    for _ in range(10000):
        t0 = time.perf_counter_ns()
        nv.nvmlDeviceGetMemoryInfo(dev, ctypes.byref(mem))
        ns.append(time.perf_counter_ns() - t0)
    res["nvml_memory_info_ctypes"] = pstats(ns)
    Cuda()  # hold a context, so this process should be listed
    count = ctypes.c_uint(64)
    procs = (NvmlProc * 64)()
    fn = getattr(
        nv, "nvmlDeviceGetComputeRunningProcesses_v3", nv.nvmlDeviceGetComputeRunningProcesses
    )
    rc = fn(dev, ctypes.byref(count), procs)
    pids = [procs[i].pid for i in range(count.value)] if rc == 0 else []
    res["nvml_lists_own_pid"] = {"rc": rc, "pids": pids, "listed": os.getpid() in pids}


# --- torch and comfy_airlock (optional) ---------------------------------------------------

_TORCH_CHILD = """
import sys, time, torch
from torch.multiprocessing.reductions import rebuild_cuda_tensor
import pickle
for line in sys.stdin.buffer:
    args = pickle.loads(bytes.fromhex(line.decode().strip()))
    t0 = time.perf_counter_ns()
    t = rebuild_cuda_tensor(*args)
    torch.cuda.synchronize()
    print(time.perf_counter_ns() - t0, flush=True)
    del t
"""


def torch_section(res: dict) -> None:
    import pickle

    import torch
    from torch.multiprocessing.reductions import reduce_tensor

    x = torch.ones(GiB // 4, device="cuda")
    y = torch.empty_like(x)
    y.copy_(x)
    torch.cuda.synchronize()
    ns = []
    for _ in range(20):
        t0 = time.perf_counter_ns()
        y.copy_(x)
        torch.cuda.synchronize()
        ns.append(time.perf_counter_ns() - t0)
    res["torch_copy_d2d_1gib"] = {**pstats(ns), "gb_per_s": GiB / statistics.median(ns)}
    p = subprocess.Popen(
        [sys.executable, "-c", _TORCH_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    rows = []
    for _ in range(10):
        _fn, args = reduce_tensor(x)
        t0 = time.perf_counter_ns()
        p.stdin.write(pickle.dumps(args).hex().encode() + b"\n")
        p.stdin.flush()
        child_ns = int(p.stdout.readline())
        rows.append((time.perf_counter_ns() - t0, child_ns))
    p.stdin.close()
    p.wait()
    res["torch_cuda_ipc_1gib"] = {
        "first_rebuild_us": rows[0][1] / 1e3,
        "rebuild": pstats([c for _, c in rows[1:]]),
        "send_to_ack": pstats([h for h, _ in rows[1:]]),
    }


def airlock_section(res: dict) -> None:
    import torch

    import comfy_airlock
    from comfy_airlock import device

    uuid = device.cuda_uuid(0)
    ns = []
    for _ in range(200):
        t0 = time.perf_counter_ns()
        device.nvml_memory(uuid)
        ns.append(time.perf_counter_ns() - t0)
    res["airlock_nvml_memory_one_shot"] = pstats(ns)
    w = comfy_airlock.Worker(sys.executable, sys_path=[str(ROOT / "bench")], name="gpu-bench")
    try:
        w.call("bench_targets:import_torch")
        for n in (64 * MiB, GiB):
            x = torch.ones(n // 4, device="cuda")
            # echo: the worker returns its input; times_one: a fresh CUDA output (x * 1), as
            # real nodes return; floor: the same x * 1 in this process.
            for target in ("echo", "times_one"):
                y = w.call(f"bench_targets:{target}", x)
                ok = bool(torch.equal(x, y.to(x.device)))
                ns = []
                for _ in range(5):
                    t0 = time.perf_counter_ns()
                    y = w.call(f"bench_targets:{target}", x)
                    torch.cuda.synchronize()
                    ns.append(time.perf_counter_ns() - t0)
                    del y
                res[f"airlock_cuda_{target}_{n // MiB}mib"] = {**pstats(ns), "equal": ok}
            ns = []
            for _ in range(5):
                t0 = time.perf_counter_ns()
                y = x * 1
                torch.cuda.synchronize()
                ns.append(time.perf_counter_ns() - t0)
                del y
            res[f"in_process_cuda_times_one_{n // MiB}mib"] = pstats(ns)
            # The floor of a crossing through host memory, in this process: the tensor to
            # pageable host memory and back (the round trip makes four such copies).
            ns = []
            for _ in range(5):
                t0 = time.perf_counter_ns()
                y = x.to("cpu").to(x.device)
                torch.cuda.synchronize()
                ns.append(time.perf_counter_ns() - t0)
                del y
            res[f"in_process_d2h_h2d_{n // MiB}mib"] = pstats(ns)
        # What a crossing must keep, whichever way CUDA tensors go (ADR 0041): the sender's
        # tensor unchanged by a node writing into its input; views at an offset and
        # transposed ones arrive equal; an empty one stays on the card; an output outlives
        # the worker that made it.
        x = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
        before = x.clone()
        w.call("bench_targets:add_one_in_place", x)
        checks = {"input_unchanged_by_in_place_write": bool(torch.equal(x, before))}
        y = w.call("bench_targets:tail_view", x)
        checks["offset_view_equal"] = bool(torch.equal(y, x[1:]))
        m = torch.arange(1 << 20, dtype=torch.float16, device="cuda").view(1024, 1024).t()
        y = w.call("bench_targets:echo", m)
        checks["transposed_equal"] = bool(torch.equal(y, m)) and y.device.type == "cuda"
        y = w.call("bench_targets:echo", torch.empty(0, 3, device="cuda"))
        checks["empty_stays_on_the_card"] = y.device.type == "cuda" and tuple(y.shape) == (0, 3)
        kept = w.call("bench_targets:times_one", x)
        w.close()
        checks["output_outlives_worker"] = bool(torch.equal(kept, x))
        res["airlock_cuda_checks"] = checks
    finally:
        w.close()


def main(out: str) -> int:
    res: dict = {"date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    for name, fn in (
        ("nvml", nvml_section),
        ("cuda_driver", d2d_sections),
        ("torch", torch_section),
        ("airlock", airlock_section),
    ):
        t0 = time.perf_counter()
        try:
            fn(res)
            res[f"{name}_status"] = f"ok ({time.perf_counter() - t0:.1f} s)"
        except Exception as e:
            res[f"{name}_status"] = f"failed: {type(e).__name__}: {e}"
            res[f"{name}_traceback"] = traceback.format_exc()[-2000:]
        print(f"{name}: {res[f'{name}_status']}", file=sys.stderr, flush=True)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res, indent=1))
    return 0 if res.get("cuda_driver_status", "").startswith("ok") else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child()
    else:
        sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "bench/out/gpu/gpu.json")))
