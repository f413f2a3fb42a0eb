#!/usr/bin/env bash
# Builds the wheel a user installs: comfy_airlock-<version>-cp310-abi3-manylinux_2_28_x86_64.whl,
# one file for every CPython >= 3.10 on x86_64 Linux with glibc >= 2.28 (what torch's own wheels
# need, so every machine that runs ComfyUI's torch). Linked by zig (the `ziglang` PyPI package,
# in .venv) against glibc 2.28, so it does not depend on this machine's newer glibc; the custom
# node ships inside it (python/comfy_airlock/custom_node/; the top-level custom_node links there).
#
#   bash scripts/wheel.sh          # prints the wheel's path (make wheel)
#
# Cached by a hash of its inputs (the tracked and new files of crates/, python/, custom_node/
# and the build files): an unchanged tree prints the existing wheel at once. Built in its own
# target folder (target/wheel), apart from cargo's debug and clippy builds. `make build`
# installs this same wheel editable (scripts/develop.sh), so it is the only release build.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.venv"
OUT="${WHEEL_DIR:-$ROOT/dist}"

inputs_hash() {
    git ls-files -co --exclude-standard -- crates python custom_node Cargo.toml Cargo.lock \
        pyproject.toml README.md LICENSE* |
        sort | while IFS= read -r f; do
        if [[ -f "$f" && ! -L "$f" ]]; then
            printf '%s  %s\n' "$(sha256sum <"$f" | cut -d' ' -f1)" "$f"
        fi
    done | sha256sum | cut -c1-16
}

hash="$(inputs_hash)"
stamp="$OUT/.wheel-$hash"
if [[ -f "$stamp" && -f "$OUT/$(cat "$stamp")" ]]; then
    printf '%s\n' "$OUT/$(cat "$stamp")"
    exit 0
fi

mkdir -p "$OUT"
rm -f "$OUT"/comfy_airlock-*.whl "$OUT"/.wheel-*
start=$SECONDS
# The worker's preload library (ADR 0044), beside the extension in the package: C, linked by
# the same zig against the same glibc 2.28 (preload/born.c says why not Rust). Put in place by
# rename, as develop.sh does the extension: a running worker keeps the file it mapped.
born="$ROOT/python/comfy_airlock/libairlock_born.so"
"$VENV/bin/python" -m ziglang cc -target x86_64-linux-gnu.2.28 -shared -fPIC -O2 -Wall \
    -Werror -o "$born.tmp" "$ROOT/crates/airlock-py/preload/born.c"
mv -f "$born.tmp" "$born"
# maturin finds zig as `python -m ziglang` of the Python on PATH: the venv's.
PATH="$VENV/bin:$PATH" VIRTUAL_ENV="$VENV" CARGO_TARGET_DIR="$ROOT/target/wheel" \
    "$VENV/bin/maturin" build --release --zig --compatibility manylinux_2_28 \
    --interpreter "$VENV/bin/python" --out "$OUT" >&2
wheels=("$OUT"/comfy_airlock-*.whl)
if [[ ${#wheels[@]} -ne 1 || ! -f "${wheels[0]}" ]]; then
    echo "scripts/wheel.sh: expected one wheel in $OUT, found: ${wheels[*]}" >&2
    exit 1
fi
basename "${wheels[0]}" >"$stamp"
echo "[wheel] built in $((SECONDS - start)) s: ${wheels[0]}" >&2
printf '%s\n' "${wheels[0]}"
