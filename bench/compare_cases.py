"""The cases of bench/compare.py: what each system runs per batch, and each case's floor.

Every worker is ComfyUI-shaped: its first call imports torch and ComfyUI's core
(``bench_targets.import_comfy``), as a pack's worker does before its first node. Every transfer
batch starts with one untimed call of its own (each system alike): a worker idle while the
others ran their batches may have given its idle memory back (comfy-airlock does after 5 s,
ADR 0028), and a batch measures calls made in a row.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import run as base
import systems as sysmod

BENCH = Path(__file__).resolve().parent
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
SIZES = (MiB, 64 * MiB, 512 * MiB)
IMAGE_SHAPE = (1, 1024, 1024, 3)
SMALL_N, SMALL_BYTES = 64, 16 * KiB


@dataclass
class Plan:
    rounds: int
    noop_iters: int
    noop_warmup: int
    floor_iters: int
    reps: dict[str, int]  # case key -> calls per system per round
    cold: int = 1  # cold starts per system per round
    floor_warmup: int = 300  # untimed native ping-pongs before each floor batch
    idle_s: float = 10.0  # quiet time before the idle-RSS reading


FULL = Plan(
    rounds=5,
    noop_iters=2000,
    noop_warmup=200,
    floor_iters=4000,
    reps={
        "node_image": 8,
        f"fresh_{MiB}": 20,
        f"fresh_{64 * MiB}": 5,
        f"fresh_{512 * MiB}": 2,
        f"echo_{MiB}": 20,
        f"echo_{64 * MiB}": 5,
        f"echo_{512 * MiB}": 2,
        f"numpy_{MiB}": 10,
        f"numpy_{64 * MiB}": 4,
        "small_dict": 10,
        "passon_64": 8,
        "resend_64": 8,
    },
)
QUICK = Plan(
    rounds=2,
    noop_iters=600,
    noop_warmup=100,
    floor_iters=1500,
    reps={
        "node_image": 3,
        f"fresh_{MiB}": 6,
        f"fresh_{64 * MiB}": 2,
        f"fresh_{512 * MiB}": 1,
        f"echo_{MiB}": 6,
        f"echo_{64 * MiB}": 2,
        f"echo_{512 * MiB}": 1,
        f"numpy_{MiB}": 3,
        f"numpy_{64 * MiB}": 1,
        "small_dict": 3,
        "passon_64": 3,
        "resend_64": 3,
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
    loads: list[float] = field(default_factory=list)  # 1-min load average after each batch


def memcpy_n(memcpy, reps: int, nbytes: int) -> list[int]:
    memcpy.p.stdin.write(f"{reps} {nbytes}\n")
    memcpy.p.stdin.flush()
    return json.loads(memcpy.p.stdout.readline())["ns"]


def pairs(ns: list[int]) -> list[int]:
    """Consecutive copies summed in twos: 'two memcpys' per sample."""
    return [ns[i] + ns[i + 1] for i in range(0, len(ns) - 1, 2)]


BARE = """
import resource, sys, time
sys.path.insert(0, {bench!r})
import bench_targets
bench_targets.import_comfy({comfy!r})
sys.stdout.write("ready\\n"); sys.stdout.flush(); sys.stdin.read()
"""


def bare_import(comfy: str, rss_tree: Callable[[list[int]], dict]) -> tuple[int, dict]:
    """A fresh interpreter of this venv importing what a worker's first call imports: time to
    done, and its RSS (the 'bare import')."""
    t0 = time.perf_counter_ns()
    p = subprocess.Popen(
        [sys.executable, "-c", BARE.format(bench=str(BENCH), comfy=comfy)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout.readline().strip() == "ready"
    dt = time.perf_counter_ns() - t0
    time.sleep(0.5)  # idle, as the systems' workers are before their reading
    mem = rss_tree([p.pid])
    p.stdin.close()
    p.wait()
    return dt, mem


def make_cases(plan: Plan, ctx: Any) -> list[Case]:
    """``ctx``: memcpy (the Rust floor server), src (fresh tensors by size), image, np_src,
    small, same (by system: the tensor the re-send row sends every time), comfy (the tree),
    rss_tree, rss_cold (filled by the cold row)."""
    import bench_targets

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
            f"warm no-op call, ComfyUI-shaped worker [{base.PLACEMENT_LABELS[placement]}]",
            "latency",
            "socketpair round trip 64 B (Rust)",
            floor,
            run,
        )

    def small_in() -> Case:
        # One small tensor per call (a mask, a small latent): what a chain of light nodes
        # sends. Its floor pairs each round trip with one memcpy of the tensor.
        n = SMALL_BYTES

        def floor() -> list[int]:
            copies = memcpy_n(ctx.memcpy, plan.noop_iters, n)
            with base.Placed("sched", []):
                trips = base.native_pingpong(plan.noop_iters, plan.floor_warmup, None)
            return [t + c for t, c in zip(trips, copies, strict=True)]

        def run(s: sysmod.System) -> list[int]:
            x = ctx.small["t0"]
            with base.Placed("sched", s.pids()):
                return s.timed("nbytes_of", lambda: (x.clone(),), plan.noop_iters, plan.noop_warmup)

        return Case(
            "small_in",
            f"call with a fresh {n // KiB} KiB tensor, its size back "
            f"[{base.PLACEMENT_LABELS['sched']}]",
            "latency",
            f"socketpair round trip 64 B (Rust) + one memcpy of {n // KiB} KiB",
            floor,
            run,
            n,
        )

    def fresh(n: int) -> Case:
        reps = plan.reps[f"fresh_{n}"]

        def floor() -> list[int]:
            # The node in-process, then the one copy its output needs to reach another
            # process at best: measured in the same batch, paired sample by sample.
            out = []
            copies = memcpy_n(ctx.memcpy, reps, n)
            for c in copies:
                x = ctx.src[n].clone()
                t0 = time.perf_counter_ns()
                y = bench_targets.times_one(x)
                out.append(time.perf_counter_ns() - t0 + c)
                del x, y
            return out

        return Case(
            f"fresh_{n}",
            f"fresh output {base.size_name(n)}: the worker returns x * 1 of a fresh input",
            "transfer",
            "x * 1 in-process + one memcpy of the output",
            floor,
            lambda s: s.timed("times_one", lambda: (ctx.src[n].clone(),), reps, 1),
            n,
        )

    def echo(n: int) -> Case:
        reps = plan.reps[f"echo_{n}"]
        return Case(
            f"echo_{n}",
            f"echo {base.size_name(n)}: a fresh input returned as it came",
            "transfer",
            "two memcpys, pre-faulted",
            lambda: pairs(memcpy_n(ctx.memcpy, 2 * reps, n)),
            lambda s: s.timed("echo", lambda: (ctx.src[n].clone(),), reps, 1),
            n,
        )

    def numpy_case(n: int) -> Case:
        reps = plan.reps[f"numpy_{n}"]
        skip = {}
        if n > MiB:
            skip["pyisolate"] = "numpy arrays cross as JSON lists (returns a list, not an array)"
        return Case(
            f"numpy_{n}",
            f"numpy echo {base.size_name(n)}",
            "transfer",
            "two memcpys, pre-faulted",
            lambda: pairs(memcpy_n(ctx.memcpy, 2 * reps, n)),
            lambda s: s.timed("echo", lambda: (ctx.np_src[n].copy(),), reps, 1),
            n,
            skip,
        )

    def node_floor() -> list[int]:
        out = []
        for _ in range(plan.reps["node_image"]):
            x = ctx.image.clone()
            t0 = time.perf_counter_ns()
            y = bench_targets.run_node("ImageInvert", {"image": x})
            out.append(time.perf_counter_ns() - t0)
            del y, x
        return out

    def small_floor() -> list[int]:
        ns = memcpy_n(ctx.memcpy, 2 * SMALL_N * plan.reps["small_dict"], SMALL_BYTES)
        k = 2 * SMALL_N
        return [sum(ns[i : i + k]) for i in range(0, len(ns), k)]

    def passon(s: sysmod.System) -> list[int]:
        out = []
        for _ in range(plan.reps["passon_64"]):
            y = s.call("make", 64 * MiB)  # the worker's output, untimed
            out += s.timed("nbytes_of", lambda y=y: (y,), 1)
            del y
        return out

    def cold(s_key: str) -> list[int]:
        out = []
        for _ in range(plan.cold):
            s = sysmod.SYSTEMS[s_key]()
            t0 = time.perf_counter_ns()
            s.start()
            s.call("import_comfy", ctx.comfy, True)
            out.append(time.perf_counter_ns() - t0)
            time.sleep(0.5)  # idle
            ctx.rss_cold[s_key].append(ctx.rss_tree(s.pids()))
            s.stop()
        return out

    def cold_floor() -> list[int]:
        out = []
        for _ in range(plan.cold):
            dt, mem = bare_import(ctx.comfy, ctx.rss_tree)
            out.append(dt)
            ctx.rss_cold["bare"].append(mem)
        return out

    image_bytes = ctx.image.numel() * 4
    return [
        latency("sched"),
        latency("same"),
        small_in(),
        *(fresh(n) for n in SIZES),
        *(echo(n) for n in SIZES),
        Case(
            "resend_64",
            "the same 64 MiB tensor sent on every call (target: <= 1 ms)",
            "transfer",
            None,
            None,
            # Each system its own tensor: pyisolate moves what it sends into shared memory.
            lambda s: s.timed("nbytes_of", lambda: (ctx.same[s.key],), plan.reps["resend_64"], 1),
            64 * MiB,
        ),
        Case(
            "passon_64",
            "worker's output tensor passed on, 64 MiB (target: <= 1 ms)",
            "transfer",
            None,
            None,
            passon,
            64 * MiB,
        ),
        Case(
            "node_image",
            "node call, IMAGE 1x1024x1024x3 float32 in and out (ImageInvert)",
            "transfer",
            "the node in-process (no isolation)",
            node_floor,
            lambda s: s.timed_node(
                "ImageInvert", lambda: {"image": ctx.image.clone()}, plan.reps["node_image"]
            ),
            image_bytes,
        ),
        *(numpy_case(n) for n in (MiB, 64 * MiB)),
        Case(
            "small_dict",
            f"dict of {SMALL_N} tensors x {SMALL_BYTES // KiB} KiB, round trip",
            "transfer",
            f"two memcpys of each of the {SMALL_N} tensors",
            small_floor,
            lambda s: s.timed(
                "echo",
                lambda: ({k: v.clone() for k, v in ctx.small.items()},),
                plan.reps["small_dict"],
                1,
            ),
            SMALL_N * SMALL_BYTES,
        ),
        Case(
            "cold",
            "cold start to first call (it imports torch and ComfyUI's core)",
            "cold",
            "a fresh interpreter importing the same, same venv",
            cold_floor,
            lambda s: cold(s.key),
        ),
    ]


def rss_idle(warm: dict[str, sysmod.System], idle_s: float, rss_tree) -> dict[str, dict]:
    """Every warm worker's RSS after ``idle_s`` seconds without a call (all wait together)."""
    time.sleep(idle_s)
    return {k: rss_tree(s.pids()) for k, s in warm.items()}
