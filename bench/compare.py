"""comfy-airlock against comfy-env 0.4.46, pyisolate 0.10.2 and a plain pickle worker, and the
native floors, in one run.

Run by ``make bench`` (``make bench-quick``: ``--quick``) with the bench venv's interpreter,
``.envs/bench/bin/python bench/compare.py``; bench/setup.sh makes that venv. bench/systems.py
says how each system is driven, bench/compare_cases.py what each case runs.

The run is a number of rounds. Every round runs one batch of every case; within a case, every
system (and the case's floor) runs its batch in turn. Both orders rotate from round to round,
so drift on a shared machine hits every system alike. A row's figure is the median of its
per-round medians, its spread the lowest and highest per-round median; latency rows also give
percentiles of all samples pooled. The 1-minute load average is read after every batch and
reported with each row.

Every worker is ComfyUI-shaped (its first call imports torch and ComfyUI's core). Fresh
inputs: every call sends a tensor made for it (outside the timed region), as nodes hand on new
outputs; the re-send row sends one tensor again and again, as one IMAGE feeds several nodes.

After the rounds: every warm worker's RSS, then again after 10 s without a call; then each
system once more, alone, with TMPDIR pointed at an empty directory, for what it leaves behind
after stop. Output: bench/out/compare.json, compare.md, compare.png.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import compare_cases as cc  # noqa: E402
import compare_report  # noqa: E402
import run as base  # noqa: E402  (floors, placement, machine description)
import systems as sysmod  # noqa: E402

OUT = BENCH / "out"
MiB, GiB = cc.MiB, cc.GiB
COMFY = BENCH.parent / ".cache" / "comfyui" / "0.30.0" / "ComfyUI"
log = base.log


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


def load1() -> float:
    return os.getloadavg()[0]


# --- the run --------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a short run")
    ap.add_argument("--rounds", type=int, help="override the number of rounds")
    ap.add_argument(
        "--systems",
        default="airlock,comfy_env,pyisolate,pickle",
        help="comma-separated subset",
    )
    ap.add_argument("--cases", default="", help="comma-separated case keys (default: all)")
    ap.add_argument("--comfy", default=str(COMFY), help="the ComfyUI tree workers import")
    ap.add_argument("--out", type=Path, help="default: bench/out/compare[-quick].json")
    args = ap.parse_args()
    plan = cc.QUICK if args.quick else cc.FULL
    if args.rounds:
        plan.rounds = args.rounds
    keys = [k for k in args.systems.split(",") if k]
    if args.out is None:
        args.out = OUT / ("compare-quick.json" if args.quick else "compare.json")
    started = time.perf_counter()

    base.build_floor()
    memcpy = base.MemcpyServer(GiB)
    loadavg = [load1()]

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
    meta["comfyui"] = args.comfy
    log(f"systems: {', '.join(keys)}; starting warm workers ...")
    warm: dict[str, sysmod.System] = {}
    for k in keys:
        s = sysmod.SYSTEMS[k]()
        t0 = time.perf_counter()
        s.start()
        s.call("import_comfy", args.comfy, True)
        warm[k] = s
        log(f"  {s.label}: started, torch and ComfyUI imported ({time.perf_counter() - t0:.1f} s)")
    memcpy.wait_ready()

    gen = torch.Generator().manual_seed(0)
    ctx = SimpleNamespace(
        memcpy=memcpy,
        comfy=args.comfy,
        rss_tree=rss_tree,
        src={n: torch.rand(n // 4, generator=gen) for n in cc.SIZES},
        image=torch.rand(cc.IMAGE_SHAPE, generator=gen),
        # One per system: pyisolate moves a tensor it sends into shared memory for good.
        same={k: torch.rand(16 * MiB, generator=gen) for k in keys},
        small={f"t{i}": torch.rand(cc.SMALL_BYTES // 4, generator=gen) for i in range(cc.SMALL_N)},
        rss_cold={k: [] for k in [*keys, "bare"]},
    )
    ctx.np_src = {n: ctx.src[n].numpy() for n in (MiB, 64 * MiB)}

    # Untimed: one round trip of each size per system first, so pools and caches have grown
    # (a first 512 MiB call maps and faults in new shared memory); the times are kept.
    first_calls: dict[str, dict[str, float]] = {}
    for k, s in warm.items():
        for n in cc.SIZES:
            for fn in ("echo", "times_one"):
                t0 = time.perf_counter()
                s.call(fn, ctx.src[n].clone())
                first_calls.setdefault(k, {})[f"{fn} {base.size_name(n)}"] = (
                    time.perf_counter() - t0
                )
        log(f"  {s.label}: first calls (s) " + json.dumps(first_calls[k]))
    correct = check(warm, ctx, np, torch)
    rss_warm = {k: rss_tree(s.pids()) for k, s in warm.items()}
    log("checked one call of each case per system; " + json.dumps(correct))

    cases = cc.make_cases(plan, ctx)
    if args.cases:
        wanted = set(args.cases.split(","))
        cases = [c for c in cases if c.key in wanted]
    try:
        for r in range(plan.rounds):
            t_round = time.perf_counter()
            k = r % len(cases)
            for case in cases[k:] + cases[:k]:
                units = []
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
                case.loads.append(load1())
            loadavg.append(load1())
            log(
                f"round {r + 1}/{plan.rounds}: {time.perf_counter() - t_round:.1f} s, load {loadavg[-1]}"
            )
        rss_after = {k: rss_tree(s.pids()) for k, s in warm.items()}
        log(f"idle {plan.idle_s:.0f} s for the idle-RSS reading ...")
        idle = cc.rss_idle(warm, plan.idle_s, rss_tree)
        log(
            "RSS (MiB) after the rows / after idling: "
            + json.dumps(
                {k: [round(rss_after[k]["rss_mib"]), round(idle[k]["rss_mib"])] for k in warm}
            )
        )
    finally:
        memcpy.close()
        for s in warm.values():
            s.stop()
        log("closed the warm workers")

    leftovers = {k: leftover_check(k, ctx) for k in keys}
    loadavg.append(load1())
    meta["loadavg_1min"] = loadavg
    if "native" in meta and base.native_build() != meta["native"]:
        meta["native_rebuilt_during_run"] = base.native_build()
        log("WARNING: comfy_airlock._native was rebuilt during the run; figures are mixed")

    results = compare_report.summarize(
        cases,
        keys,
        meta=meta,
        plan=asdict(plan),
        quick=plan is cc.QUICK,
        elapsed=time.perf_counter() - started,
        correct=correct,
        first_calls_s=first_calls,
        memory={
            "warm_after_checks": rss_warm,
            "warm_after_rounds": rss_after,
            "warm_idle": idle,
            "cold": ctx.rss_cold,
        },
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


def versions() -> dict[str, str]:
    from importlib.metadata import version

    out = {}
    for d in ("comfy-env", "pyisolate", "torch", "numpy"):
        try:
            out[d] = version(d)
        except Exception as e:
            out[d] = f"not installed ({e})"
    return out


def check(warm, ctx, np, torch) -> dict[str, object]:
    """One call of each case per system, checked; True, or what came back instead."""
    out: dict[str, object] = {}
    for k, s in warm.items():
        x = ctx.src[64 * MiB].clone()
        y = s.call("echo", x)
        out[f"{k} echo 64 MiB"] = bool(torch.equal(x, y))
        y = s.call("times_one", x)
        out[f"{k} fresh output 64 MiB"] = bool(torch.equal(x, y)) and y.data_ptr() != x.data_ptr()
        (inv,) = s.node("ImageInvert", {"image": ctx.image.clone()})
        out[f"{k} node"] = bool(torch.allclose(inv, 1.0 - ctx.image))
        a = ctx.np_src[MiB].copy()
        b = s.call("echo", a)
        out[f"{k} numpy 1 MiB"] = (
            bool(np.array_equal(a, b)) if isinstance(b, np.ndarray) else f"got {type(b).__name__}"
        )
        d = s.call("echo", {n: t.clone() for n, t in ctx.small.items()})
        out[f"{k} dict"] = all(torch.equal(d[n], ctx.small[n]) for n in ctx.small)
        y = s.call("make", 64 * MiB)
        out[f"{k} pass-on"] = s.call("nbytes_of", y) == 64 * MiB
        out[f"{k} re-send"] = s.call("nbytes_of", ctx.same[k]) == 64 * MiB
        del x, y, a, b, d, inv
    return out


# --- leftovers ------------------------------------------------------------------------------


def shm_entries() -> dict[str, int]:
    out = {}
    for e in os.scandir("/dev/shm"):
        with contextlib.suppress(OSError):
            out[e.name] = e.stat(follow_symlinks=False).st_blocks * 512
    return out


def leftover_check(key: str, ctx) -> dict:
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
            s.call("echo", ctx.src[64 * MiB].clone())
            s.call("times_one", ctx.src[64 * MiB].clone())
            s.node("ImageInvert", {"image": ctx.image.clone()})
            s.call("nbytes_of", s.call("make", 64 * MiB))
            s.call("nbytes_of", ctx.same[key])
        s.call("echo", {n: t.clone() for n, t in ctx.small.items()})
        s.call("echo", ctx.np_src[MiB].copy())
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
