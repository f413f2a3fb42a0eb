"""comfy-airlock against comfy-env 0.4.46 and pyisolate 0.10.2, and the native floors, in one run.

Run by ``make bench`` (``make bench-quick``: ``--quick``) with the bench venv's interpreter,
``.envs/bench/bin/python bench/compare.py``; bench/setup.sh makes that venv. bench/systems.py
says how each system is driven.

The run is a number of rounds. Every round runs one batch of every case; within a case, every
system (and the case's floor) runs its batch in turn. Both orders rotate from round to round,
so drift on a shared machine hits every system alike. A row's figure is the median of its
per-round medians, its spread the lowest and highest per-round median; latency rows also give
percentiles of all samples pooled.

Fresh inputs: every call sends a tensor made for it (outside the timed region), as nodes hand
on new outputs; re-sending one tensor would let pyisolate skip its copy after the first call
(``share_memory_`` moves a tensor's storage into shared memory for good).

After the rounds: each system once more, alone, with TMPDIR pointed at an empty directory, for
what it leaves behind after stop. Output: bench/out/compare.json, compare.md, compare.png.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import compare_report  # noqa: E402
import run as base  # noqa: E402  (floors, placement, machine description)
import systems as sysmod  # noqa: E402

OUT = BENCH / "out"
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
ECHO_SIZES = (MiB, 64 * MiB, 512 * MiB, GiB)
IMAGE_SHAPE = (1, 1024, 1024, 3)
SMALL_N, SMALL_BYTES = 64, 16 * KiB
log = base.log


@dataclass
class Plan:
    rounds: int
    noop_iters: int
    noop_warmup: int
    floor_iters: int
    reps: dict[str, int]  # case key -> calls per system per round
    cold: int = 1  # cold starts per system per round
    floor_warmup: int = 300  # untimed native ping-pongs before each floor batch


FULL = Plan(
    rounds=5,
    noop_iters=2000,
    noop_warmup=200,
    floor_iters=4000,
    reps={
        "node_image": 8,
        f"echo_{MiB}": 20,
        f"echo_{64 * MiB}": 5,
        f"echo_{512 * MiB}": 2,
        f"echo_{GiB}": 2,
        f"numpy_{MiB}": 10,
        f"numpy_{64 * MiB}": 4,
        "small_dict": 10,
        "passon_64": 8,
    },
)
QUICK = Plan(
    rounds=2,
    noop_iters=600,
    noop_warmup=100,
    floor_iters=1500,
    reps={
        "node_image": 3,
        f"echo_{MiB}": 6,
        f"echo_{64 * MiB}": 2,
        f"echo_{512 * MiB}": 1,
        f"echo_{GiB}": 1,
        f"numpy_{MiB}": 3,
        f"numpy_{64 * MiB}": 1,
        "small_dict": 3,
        "passon_64": 3,
    },
)


@dataclass
class Case:
    key: str
    label: str
    kind: str  # latency (us) | transfer (ms) | cold (ms)
    floor_label: str | None
    floor: Callable[[], list[int]] | None
    run: Callable[[sysmod.System], list[int]]
    nbytes: int = 0
    skip: dict[str, str] = field(default_factory=dict)  # system -> why it is not measured
    samples: dict[str, list[list[int]]] = field(default_factory=dict)


# --- helpers --------------------------------------------------------------------------------


def rss_tree(pids: list[int]) -> dict[str, float]:
    """RSS and PSS (MiB) of the processes and all their descendants."""
    import psutil

    procs = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            procs += [p, *p.children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    rss = pss = 0
    for p in procs:
        try:
            m = p.memory_full_info()
            rss += m.rss
            pss += getattr(m, "pss", 0)
        except psutil.NoSuchProcess:
            pass
    return {"rss_mib": rss / MiB, "pss_mib": pss / MiB, "processes": len(procs)}


def bare_import() -> tuple[int, dict[str, float]]:
    """``import torch`` in a fresh interpreter of this venv: time to done, and its RSS."""
    code = "import torch, sys; sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.read()"
    t0 = time.perf_counter_ns()
    p = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert p.stdout.readline().strip() == "ready"
    dt = time.perf_counter_ns() - t0
    mem = rss_tree([p.pid])
    p.stdin.close()
    p.wait()
    return dt, mem


def pairs(ns: list[int]) -> list[int]:
    """Consecutive copies summed in twos: 'two memcpys' per sample."""
    return [ns[i] + ns[i + 1] for i in range(0, len(ns) - 1, 2)]


# --- the run --------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a short run")
    ap.add_argument("--rounds", type=int, help="override the number of rounds")
    ap.add_argument(
        "--systems", default="airlock,comfy_env,pyisolate", help="comma-separated subset"
    )
    ap.add_argument("--out", type=Path, help="default: bench/out/compare[-quick].json")
    args = ap.parse_args()
    plan = QUICK if args.quick else FULL
    if args.rounds:
        plan.rounds = args.rounds
    keys = [k for k in args.systems.split(",") if k]
    if args.out is None:
        args.out = OUT / ("compare-quick.json" if args.quick else "compare.json")
    started = time.perf_counter()

    base.build_floor()
    memcpy = base.MemcpyServer(GiB)
    loadavg = [Path("/proc/loadavg").read_text().split()[0]]

    import numpy as np
    import torch

    if "airlock" in keys:
        import comfy_airlock  # noqa: F401  (fail early if the extension is not built)

    meta = (
        base.machine(torch, np)
        if "airlock" in keys
        else {"date_utc": "", "cpu": "", "nproc": os.cpu_count()}
    )
    meta["python_executable"] = sys.executable
    meta["versions"] = versions()
    log(f"systems: {', '.join(keys)}; starting warm workers ...")
    warm: dict[str, sysmod.System] = {}
    for k in keys:
        s = sysmod.SYSTEMS[k]()
        t0 = time.perf_counter()
        s.start()
        s.call("import_torch")
        warm[k] = s
        log(f"  {s.label}: started, torch imported ({time.perf_counter() - t0:.1f} s)")
    memcpy.wait_ready()

    gen = torch.Generator().manual_seed(0)
    src = {n: torch.rand(n // 4, generator=gen) for n in ECHO_SIZES}
    image = torch.rand(IMAGE_SHAPE, generator=gen)
    np_src = {n: src[n].numpy() for n in (MiB, 64 * MiB)}
    small = {f"t{i}": torch.rand(SMALL_BYTES // 4, generator=gen) for i in range(SMALL_N)}

    # Untimed: one round trip of each size per system first, so pools and caches have grown
    # (a first 1 GiB call maps and faults in new shared memory); the times are kept.
    first_calls: dict[str, dict[str, float]] = {}
    for k, s in warm.items():
        for n in ECHO_SIZES:
            t0 = time.perf_counter()
            s.call("echo", src[n].clone())
            first_calls.setdefault(k, {})[base.size_name(n)] = time.perf_counter() - t0
        log(f"  {s.label}: first round trips (s) " + json.dumps(first_calls[k]))
    correct = check(warm, src, image, np_src, small, np, torch)
    rss_warm = {k: rss_tree(s.pids()) for k, s in warm.items()}
    log("checked one call of each case per system; " + json.dumps(correct))

    # --- cases ---

    def latency(placement: str) -> Case:
        cpus = base.PLACEMENTS[placement]

        def floor() -> list[int]:
            with base.Placed(placement, []):
                return base.native_pingpong(
                    plan.floor_iters, plan.floor_warmup, None if cpus is None else cpus[1]
                )

        def run(s: sysmod.System) -> list[int]:
            with base.Placed(placement, s.pids()):
                return s.timed("noop", None, plan.noop_iters, plan.noop_warmup)

        return Case(
            f"noop_{placement}",
            f"warm no-op call [{base.PLACEMENT_LABELS[placement]}]",
            "latency",
            "socketpair round trip 64 B (Rust)",
            floor,
            run,
        )

    def echo_case(n: int) -> Case:
        reps = plan.reps[f"echo_{n}"]
        return Case(
            f"echo_{n}",
            f"torch tensor round trip {base.size_name(n)}",
            "transfer",
            "two memcpys, pre-faulted",
            lambda: pairs(memcpy_n(memcpy, 2 * reps, n)),
            lambda s: s.timed("echo", lambda: (src[n].clone(),), reps),
            n,
        )

    def numpy_case(n: int) -> Case:
        reps = plan.reps[f"numpy_{n}"]
        skip = {}
        if n > MiB:
            skip["pyisolate"] = "numpy arrays cross as JSON lists (returns a list, not an array)"
        return Case(
            f"numpy_{n}",
            f"numpy array round trip {base.size_name(n)}",
            "transfer",
            "two memcpys, pre-faulted",
            lambda: pairs(memcpy_n(memcpy, 2 * reps, n)),
            lambda s: s.timed("echo", lambda: (np_src[n].copy(),), reps),
            n,
            skip,
        )

    def node_floor() -> list[int]:
        import bench_targets

        out = []
        for _ in range(plan.reps["node_image"]):
            x = image.clone()
            t0 = time.perf_counter_ns()
            y = bench_targets.run_node("ImageInvert", {"image": x})
            out.append(time.perf_counter_ns() - t0)
            del y, x
        return out

    def small_floor() -> list[int]:
        ns = memcpy_n(memcpy, 2 * SMALL_N * plan.reps["small_dict"], SMALL_BYTES)
        k = 2 * SMALL_N
        return [sum(ns[i : i + k]) for i in range(0, len(ns), k)]

    def passon(s: sysmod.System) -> list[int]:
        out = []
        for _ in range(plan.reps["passon_64"]):
            y = s.call("make", 64 * MiB)  # the worker's output, untimed
            out += s.timed("nbytes_of", lambda y=y: (y,), 1)
            del y
        return out

    rss_cold: dict[str, list[dict]] = {k: [] for k in [*keys, "bare"]}

    def cold(s_key: str) -> list[int]:
        out = []
        for _ in range(plan.cold):
            s = sysmod.SYSTEMS[s_key]()
            t0 = time.perf_counter_ns()
            s.start()
            s.call("import_torch")
            out.append(time.perf_counter_ns() - t0)
            time.sleep(0.5)  # idle
            rss_cold[s_key].append(rss_tree(s.pids()))
            s.stop()
        return out

    def cold_floor() -> list[int]:
        out = []
        for _ in range(plan.cold):
            dt, mem = bare_import()
            out.append(dt)
            rss_cold["bare"].append(mem)
        return out

    cases = [
        latency("sched"),
        latency("same"),
        Case(
            "node_image",
            "node call, IMAGE 1x1024x1024x3 float32 in and out (ImageInvert)",
            "transfer",
            "the node in-process (no isolation)",
            node_floor,
            lambda s: s.timed_node(
                "ImageInvert", lambda: {"image": image.clone()}, plan.reps["node_image"]
            ),
            image.numel() * 4,
        ),
        *(echo_case(n) for n in ECHO_SIZES),
        *(numpy_case(n) for n in (MiB, 64 * MiB)),
        Case(
            "small_dict",
            f"dict of {SMALL_N} tensors x {SMALL_BYTES // KiB} KiB, round trip",
            "transfer",
            f"two memcpys of each of the {SMALL_N} tensors",
            small_floor,
            lambda s: s.timed(
                "echo", lambda: ({k: v.clone() for k, v in small.items()},), plan.reps["small_dict"]
            ),
            SMALL_N * SMALL_BYTES,
        ),
        Case(
            "passon_64",
            "worker's output tensor passed on, 64 MiB (target: no copy, <= 1 ms)",
            "transfer",
            None,
            None,
            passon,
            64 * MiB,
        ),
        Case(
            "cold",
            "cold start to first call (the call imports torch)",
            "cold",
            "bare `import torch` in a fresh interpreter, same venv",
            cold_floor,
            lambda s: cold(s.key),
        ),
    ]

    try:
        for r in range(plan.rounds):
            t_round = time.perf_counter()
            k = r % len(cases)
            for case in cases[k:] + cases[:k]:
                units: list[tuple[str, Callable[[], list[int]]]] = []
                if case.floor is not None:
                    units.append(("floor", case.floor))
                units += [
                    (key, (lambda s=s, c=case: c.run(s)))
                    for key, s in warm.items()
                    if key not in case.skip
                ]
                j = r % len(units)
                for who, fn in units[j:] + units[:j]:
                    gc.collect()
                    case.samples.setdefault(who, []).append(fn())
            load = Path("/proc/loadavg").read_text().split()[0]
            loadavg.append(load)
            log(f"round {r + 1}/{plan.rounds}: {time.perf_counter() - t_round:.1f} s, load {load}")
        rss_after = {k: rss_tree(s.pids()) for k, s in warm.items()}
    finally:
        memcpy.close()
        for s in warm.values():
            s.stop()
        log("closed the warm workers")

    leftovers = {k: leftover_check(k, src, image, small, np_src) for k in keys}
    loadavg.append(Path("/proc/loadavg").read_text().split()[0])
    meta["loadavg_1min"] = loadavg
    if "native" in meta and base.native_build() != meta["native"]:
        meta["native_rebuilt_during_run"] = base.native_build()
        log("WARNING: comfy_airlock._native was rebuilt during the run; figures are mixed")

    results = compare_report.summarize(
        cases,
        keys,
        meta=meta,
        plan=asdict(plan),
        quick=plan is QUICK,
        elapsed=time.perf_counter() - started,
        correct=correct,
        first_calls_s=first_calls,
        memory={"warm_after_checks": rss_warm, "warm_after_rounds": rss_after, "cold": rss_cold},
        leftovers=leftovers,
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    md = compare_report.markdown(results)
    args.out.with_suffix(".md").write_text(md)
    compare_report.chart(results, args.out.with_suffix(".png"))
    print(md)
    log(f"wrote {args.out}, .md and .png")
    return 0 if all(v is True or isinstance(v, str) for v in correct.values()) else 1


def memcpy_n(memcpy, reps: int, nbytes: int) -> list[int]:
    memcpy.p.stdin.write(f"{reps} {nbytes}\n")
    memcpy.p.stdin.flush()
    return json.loads(memcpy.p.stdout.readline())["ns"]


def versions() -> dict[str, str]:
    from importlib.metadata import version

    out = {}
    for d in ("comfy-env", "pyisolate", "torch", "numpy"):
        try:
            out[d] = version(d)
        except Exception as e:
            out[d] = f"not installed ({e})"
    return out


def check(warm, src, image, np_src, small, np, torch) -> dict[str, object]:
    """One call of each case per system, checked; True, or what came back instead."""
    out: dict[str, object] = {}
    for k, s in warm.items():
        x = src[64 * MiB].clone()
        y = s.call("echo", x)
        out[f"{k} echo 64 MiB"] = bool(torch.equal(x, y))
        (inv,) = s.node("ImageInvert", {"image": image.clone()})
        out[f"{k} node"] = bool(torch.allclose(inv, 1.0 - image))
        a = np_src[MiB].copy()
        b = s.call("echo", a)
        out[f"{k} numpy 1 MiB"] = (
            bool(np.array_equal(a, b)) if isinstance(b, np.ndarray) else f"got {type(b).__name__}"
        )
        d = s.call("echo", {n: t.clone() for n, t in small.items()})
        out[f"{k} dict"] = all(torch.equal(d[n], small[n]) for n in small)
        y = s.call("make", 64 * MiB)
        out[f"{k} pass-on"] = s.call("nbytes_of", y) == 64 * MiB
        del x, y, a, b, d, inv
    return out


# --- leftovers ------------------------------------------------------------------------------


def shm_entries() -> dict[str, int]:
    out = {}
    for e in os.scandir("/dev/shm"):
        with contextlib.suppress(OSError):
            out[e.name] = e.stat(follow_symlinks=False).st_blocks * 512
    return out


def leftover_check(key: str, src, image, small, np_src) -> dict:
    """Starts the system alone with TMPDIR at an empty directory, runs a few calls of each
    kind, stops it, waits 6 s (pyisolate's TensorKeeper holds sent tensors for 5 s), and reports what remains: new /dev/shm entries (allocated
    bytes), processes of its worker tree still alive, and files under TMPDIR."""
    import psutil

    tmp = Path(tempfile.mkdtemp(prefix=f"leftovers-{key}-", dir=OUT))
    old_env, old_tempdir = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"], tempfile.tempdir = str(tmp), str(tmp)
    shm0 = shm_entries()
    me = os.getpid()
    kids0 = {p.pid for p in psutil.Process(me).children(recursive=True)}
    s = sysmod.SYSTEMS[key]()
    tree: set[int] = set()
    try:
        s.start()
        s.call("import_torch")
        for _ in range(3):
            s.call("echo", src[64 * MiB].clone())
            s.node("ImageInvert", {"image": image.clone()})
            s.call("nbytes_of", s.call("make", 64 * MiB))
        s.call("echo", {n: t.clone() for n, t in small.items()})
        s.call("echo", np_src[MiB].copy())
        tree = {p.pid for p in psutil.Process(me).children(recursive=True)} - kids0
    finally:
        s.stop()
        os.environ.pop("TMPDIR") if old_env is None else os.environ.__setitem__("TMPDIR", old_env)
        tempfile.tempdir = old_tempdir
    gc.collect()
    time.sleep(6.0)
    gc.collect()
    shm1 = shm_entries()
    new = {n: b for n, b in shm1.items() if n not in shm0}
    alive = []
    for pid in sorted(tree):
        try:
            p = psutil.Process(pid)
            if p.status() != psutil.STATUS_ZOMBIE:
                alive.append(" ".join(p.cmdline())[:160])
        except psutil.NoSuchProcess:
            pass
    files = [str(p.relative_to(tmp)) for p in tmp.rglob("*")]
    log(
        f"leftovers {key}: /dev/shm {sum(new.values()) / MiB:.1f} MiB in {len(new)} entries, "
        f"{len(alive)} processes, {len(files)} TMPDIR entries"
    )
    return {
        "shm_bytes": sum(new.values()),
        "shm_entries": sorted(new)[:20],
        "shm_count": len(new),
        "processes": alive,
        "tmpdir_entries": files[:20],
        "tmpdir_count": len(files),
        "tmpdir": str(tmp.relative_to(BENCH.parent)),
    }


if __name__ == "__main__":
    sys.exit(main())
