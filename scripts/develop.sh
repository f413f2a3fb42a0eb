#!/usr/bin/env bash
# `make build`: the extension for this checkout, built once for both uses.
#
# `make test` needs the extension twice: imported from python/ by the tests (what `maturin
# develop` gives) and as the zig-linked manylinux wheel a user installs
# (tests/comfyui/test_wheel_install.py). Building both compiled the workspace in release mode
# twice, a few minutes each on 2 cores. So the wheel is the one build: scripts/wheel.sh makes
# it (cached by its inputs' hash), and this script installs it into .venv *editable*, as
# `maturin develop` would:
#   - the wheel is installed with uv (dist-info, the `airlock` console script);
#   - its copy of the package is replaced by a .pth naming python/, so edits to python/ take
#     effect without a rebuild;
#   - its `_native.abi3.so` and `libairlock_born.so` (the workers' preload library, ADR 0044)
#     are put into python/comfy_airlock/ by rename (a new inode: a running worker that has the
#     old file mapped keeps it).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"
PKG="$ROOT/python/comfy_airlock"

wheel="$(bash scripts/wheel.sh)"
site="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
stamp="$site/comfy_airlock.develop-stamp"
sum="$(sha256sum "$wheel" | cut -d' ' -f1)"

if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$sum" || ! -f "$PKG/_native.abi3.so" ||
    ! -f "$PKG/libairlock_born.so" ]]; then
    "$VENV/bin/uv" pip install -q --python "$PY" --no-deps --reinstall "$wheel"
    rm -rf "$site/comfy_airlock"
    printf '%s\n' "$ROOT/python" >"$site/comfy_airlock.pth"
    tmp="$(mktemp -d "$PKG/.native.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    "$PY" - "$wheel" "$tmp" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for name in ("_native.abi3.so", "libairlock_born.so"):
        z.extract(f"comfy_airlock/{name}", sys.argv[2])
EOF
    for name in _native.abi3.so libairlock_born.so; do
        chmod 755 "$tmp/comfy_airlock/$name"
        mv -f "$tmp/comfy_airlock/$name" "$PKG/$name"
    done
    printf '%s\n' "$sum" >"$stamp"
    echo "[develop] $(basename "$wheel") installed editable into $VENV" >&2
fi
