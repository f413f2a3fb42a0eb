#!/usr/bin/env bash
# Makes the peer-benchmark venv .envs/bench (Python 3.11, like the host venv) from
# requirements/bench.txt with the host venv's uv, so uv's cache supplies torch and the rest
# (hardlinked; no download when the host venv has been built). comfy-env 0.4.46 and pyisolate
# 0.10.2 come from PyPI, never vendored. comfy_airlock is the source tree's (python/, with the
# extension `make build` put there), by a .pth file. Installed with its bytecode compiled, as
# the host venv and every pack env are (ADR 0048): where PYTHONDONTWRITEBYTECODE is set (this
# machine, CI images) an uncompiled venv recompiles torch at every start, and the cold-start
# rows would time that compilation, the same for every system, instead of the start.
#
#   bash bench/setup.sh          # idempotent: skipped when the stamp matches bench.txt
#   bash bench/setup.sh --lock   # re-resolves bench.txt from bench.in (constrained by dev.txt)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
UV="$ROOT/.venv/bin/uv"
ENV="$ROOT/.envs/bench"
REQ="$ROOT/requirements/bench.txt"
[[ -x "$UV" ]] || { echo "[bench-setup] $UV missing: run 'make setup' first" >&2; exit 1; }

if [[ "${1:-}" == "--lock" ]]; then
    "$UV" pip compile -q --python-version 3.11 requirements/bench.in -c requirements/dev.txt \
        -o requirements/bench.txt
    exit 0
fi

# "compiled": a venv made before it was compiled is made again.
stamp="$(sha256sum "$REQ" | cut -d' ' -f1) compiled"
if [[ -f "$ENV/.airlock-stamp" && "$(cat "$ENV/.airlock-stamp")" == "$stamp" ]]; then
    exit 0
fi
# The host venv's base interpreter: the same CPython as the host venv.
PY="$(sed -n 's/^executable = //p' "$ROOT/.venv/pyvenv.cfg")"
[[ -x "$PY" ]] || PY="$("$UV" python find 3.11)"
echo "[bench-setup] creating $ENV with $PY"
"$UV" venv -q --allow-existing --python "$PY" "$ENV"
VIRTUAL_ENV="$ENV" "$UV" pip sync -q --compile-bytecode "$REQ"
site="$("$ENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$ROOT/python" >"$site/comfy_airlock.pth"
echo "$stamp" >"$ENV/.airlock-stamp"
echo "[bench-setup] done"
