#!/usr/bin/env bash
# Profiles comfy-airlock's call path (bench/profile_calls.py): py-spy (bench venv) samples the
# Python frames of the host and, at the same time, of the worker; where perf is installed,
# `perf record` samples both processes' native code (flat, by library and symbol: the Rust
# core, libc, the kernel) and `perf stat` counts context switches and page faults.
# (py-spy --native is too slow to keep up here: torch's libraries make its unwinding lag.)
# Output in bench/out/profile/: <mode>-{host,worker}.txt (py-spy raw collapsed stacks; see
# bench/profile_summary.py), <mode>-perf-report.txt, <mode>-perf-stat.txt.
#
#   bash bench/profile.sh [noop|echo64 ...]     # default: both, SECONDS_EACH=10 each
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="$ROOT/.envs/bench/bin/python"
SPY="$ROOT/.envs/bench/bin/py-spy"
OUT="$ROOT/bench/out/profile"
N="${SECONDS_EACH:-10}"
mkdir -p "$OUT"
modes=("$@")
[[ ${#modes[@]} -gt 0 ]] || modes=(noop echo64)
for mode in "${modes[@]}"; do
    fifo="$(mktemp -u)"
    mkfifo "$fifo"
    "$PY" "$ROOT/bench/profile_calls.py" "$mode" --seconds "$N" --settle 2 >"$fifo" &
    host=$!
    read -r worker <"$fifo"
    cat "$fifo" >/dev/null &
    "$SPY" record --rate 500 --format raw --pid "$host" --duration "$N" \
        --output "$OUT/$mode-host.txt" >/dev/null 2>&1 &
    a=$!
    "$SPY" record --rate 500 --format raw --pid "$worker" --duration "$N" \
        --output "$OUT/$mode-worker.txt" >/dev/null 2>&1 &
    b=$!
    wait "$host" "$a" "$b" || true
    rm -f "$fifo"
    if command -v perf >/dev/null 2>&1; then
        fifo="$(mktemp -u)"
        mkfifo "$fifo"
        "$PY" "$ROOT/bench/profile_calls.py" "$mode" --seconds "$N" --settle 1 >"$fifo" &
        host=$!
        read -r worker <"$fifo"
        cat "$fifo" >/dev/null &
        perf record -q -F 999 -p "$host,$worker" -o "$OUT/$mode.perf.data" -- sleep "$N" \
            >/dev/null 2>&1 || true
        wait "$host" || true
        rm -f "$fifo"
        perf report -q -i "$OUT/$mode.perf.data" --sort comm,dso,sym --percent-limit 0.7 \
            --stdio >"$OUT/$mode-perf-report.txt" 2>/dev/null || true
        perf stat -e task-clock,context-switches,cpu-migrations,page-faults \
            -o "$OUT/$mode-perf-stat.txt" -- \
            "$PY" "$ROOT/bench/profile_calls.py" "$mode" --seconds "$N" --settle 0 >/dev/null || true
    fi
    echo "[profile] $mode: $OUT/$mode-*"
done
