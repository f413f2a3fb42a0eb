#!/usr/bin/env bash
# Prepares, on this machine, what bench/gpu/run.sh needs on a GPU machine that has torch but
# no network: one folder, .gpu/ (gitignored), to carry there.
#
#   .gpu/whl/        our wheel (scripts/wheel.sh) and comfy-aimdo at the host lock's version
#                    (ComfyUI 0.30.0's model_management imports it)
#   .gpu/ComfyUI/    the ComfyUI tree's Python and YAML files only (about 11 MB; the full
#                    tree's tokenizer vocabularies are not read at import), for card_scenario.py
#
#   bash bench/gpu/prepare.sh            # GPU_PYTHON=3.12: the GPU machine's Python
#
# Then, on the GPU machine, from the repository root:
#
#   python3 -m pip install -q --no-index --no-deps .gpu/whl/*.whl
#   COMFYUI_DIR=$PWD/.gpu/ComfyUI PYTHON=python3 bash bench/gpu/run.sh OUT_DIR
#
# comfy_kitchen (a 45 MB wheel) is not carried: ComfyUI imports it optionally, except through
# comfy.model_base, which the checks do not import (card_scenario.py says why).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
COMFYUI_DIR="${COMFYUI_DIR:-$ROOT/.cache/comfyui/0.30.0/ComfyUI}"
[[ -f "$COMFYUI_DIR/comfy/model_management.py" ]] || {
    echo "prepare.sh: no ComfyUI tree at $COMFYUI_DIR (make setup makes it)" >&2
    exit 2
}
rm -rf .gpu
mkdir -p .gpu/whl .gpu/ComfyUI
cp "$(bash scripts/wheel.sh | tail -1)" .gpu/whl/
aimdo="$("$ROOT/.venv/bin/python" -c 'import importlib.metadata as m; print(m.version("comfy-aimdo"))')"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "${GPU_PYTHON:-3.12}" \
    --implementation cp --platform manylinux_2_17_x86_64 -d .gpu/whl "comfy-aimdo==$aimdo"
(cd "$COMFYUI_DIR" && find . \( -path ./tests -o -path ./tests-unit -o -path ./blueprints \
    -o -name __pycache__ \) -prune -o -type f \( -name '*.py' -o -name '*.yaml' \
    -o -name requirements.txt -o -name pyproject.toml \) -print | tar -cf - -T -) |
    tar -xf - -C .gpu/ComfyUI
du -sh .gpu/whl .gpu/ComfyUI
