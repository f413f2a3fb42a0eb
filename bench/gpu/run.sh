#!/usr/bin/env bash
# GPU figures for docs/benchmarks.md ("GPU"), on one NVIDIA GPU, in well under 10 minutes.
# Needs only python3 and the NVIDIA driver (libcuda.so.1, libnvidia-ml.so.1): the checks use
# ctypes, so nothing is installed (the GPU machine may have no network). Where torch is
# importable it adds torch's CUDA IPC hand-off; where comfy_airlock is importable (its
# extension built), our NVML reader and a CUDA tensor round trip through a Worker; and where
# COMFYUI_DIR names a ComfyUI tree too, the memory bridge on the card (card_scenario.py).
#
#   bash bench/gpu/run.sh [OUT_DIR]      # writes OUT_DIR/gpu.json, OUT_DIR/card.json
#                                        # (default bench/out/gpu)
#
# A GPU machine without network gets our wheel, comfy-aimdo and the ComfyUI files from
# bench/gpu/prepare.sh (run here; it says what to run there).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${1:-${OUT:-$ROOT/bench/out/gpu}}"
mkdir -p "$OUT"
PY="${PYTHON:-}"
for cand in "$ROOT/.envs/bench/bin/python" "$ROOT/.venv/bin/python" python3; do
    [[ -n "$PY" ]] && break
    command -v "$cand" >/dev/null 2>&1 && PY="$cand"
done
nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv | tee "$OUT/nvidia-smi.csv" || true
rc=0
timeout 240 "$PY" "$ROOT/bench/gpu/gpu_checks.py" "$OUT/gpu.json" || rc=$?
if [[ -n "${COMFYUI_DIR:-}" ]]; then
    timeout 240 "$PY" "$ROOT/bench/gpu/card_scenario.py" "$OUT/card.json" || rc=$?
fi
exit "$rc"
