"""The environment a worker starts with: an allow-list of the host's variables, not a copy of
them. Every pack's worker gets it, and so does ``comfy_airlock.Worker(env=None)``, the default;
``Worker(env=INHERIT_ENV)`` opts out and passes the host's whole environment.

ComfyUI's process often holds secrets in its environment: API keys for paid nodes
(``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``), ``HF_TOKEN``, cloud credentials
(``AWS_SECRET_ACCESS_KEY``), CI or proxy tokens. A worker runs a third party's code and its
dependencies, so it gets only what a Python, torch or CUDA process needs to run the same way
as the host, plus the pack's own ``[env_vars]`` and our ``AIRLOCK_*`` variables:

==========================================  =====================================================
passed                                      why
==========================================  =====================================================
``PATH``, ``HOME``, ``USER``, ``LOGNAME``   finding programs, ``~`` and the user's name
``LANG``, ``LANGUAGE``, ``LC_*``, ``TZ``    text encoding and time zone, as in the host
``TERM``, ``NO_COLOR``, ``FORCE_COLOR``     how libraries format their log output
``LD_LIBRARY_PATH``                         CUDA and other native libraries outside the linker's
                                            default path (``LD_PRELOAD`` is *not* passed: a
                                            preloaded allocator built for the host's process
                                            can break another interpreter; a pack sets it in
                                            ``[env_vars]`` if it wants one)
``CUDA_*``, ``NVIDIA_*``, ``HIP_*``,        device selection and driver settings
``ROCR_*``, ``HSA_*``, ``ZE_*``,            (``CUDA_VISIBLE_DEVICES``, ...); ``CUDA_MODULE_LOADING``
``ONEAPI_DEVICE_SELECTOR``
``PYTORCH_*``, ``TORCH_*``,                 torch allocator, cache and compile settings the host
``TORCHINDUCTOR_*``, ``TRITON_*``           was started with
``OMP_*``, ``MKL_*``, ``OPENBLAS_*``,       thread counts and how idle threads wait: without
``KMP_*``, ``GOMP_*``, ``NUMEXPR_*``        them each worker would use every core (a worker's
                                            OpenMP threads sleep when idle unless one of these
                                            says otherwise: ``thread_policy.py``)
``HF_HOME``, ``HF_HUB_CACHE``,              where model caches are, and offline switches; the
``HF_HUB_OFFLINE``, ``HF_ENDPOINT``, ...    token (``HF_TOKEN``) is *not* passed
``XDG_CACHE_HOME``, ``XDG_CONFIG_HOME``,    where libraries keep caches and settings
``XDG_DATA_HOME``
``HTTP(S)_PROXY``, ``NO_PROXY``, lower case without them a worker behind a proxy cannot
                                            download (a proxy URL carrying a password passes
                                            too; see docs/security.md)
``SSL_CERT_FILE``, ``SSL_CERT_DIR``,        TLS roots of a corporate network
``REQUESTS_CA_BUNDLE``, ``CURL_CA_BUNDLE``
``PYTHONIOENCODING``, ``PYTHONUTF8``, ...   interpreter behaviour (``PYTHONPATH``/``PYTHONHOME``
                                            are replaced by the worker's own)
``AIRLOCK_*``                               comfy-airlock's own settings
==========================================  =====================================================

Whatever environment a worker gets (this one, or the host's whole with ``INHERIT_ENV``), the
supervisor then adds two defaults unless it already says otherwise: how idle OpenMP threads
wait (``thread_policy.py``) and, on Linux, how much freed memory glibc's heap keeps
(``heap_policy.py``); and, on Linux, puts comfy-airlock's own ``libairlock_born.so`` in front
of the worker's ``LD_PRELOAD``, which the worker takes out again as it starts
(``born_policy.py``, ADR 0044).

Even through a prefix, a name that looks like a secret (containing ``TOKEN``, ``SECRET``,
``PASSWORD``, ``PASSWD``, ``API_KEY``, ``CREDENTIAL`` or ``PRIVATE_KEY``) is not passed. The
operator can pass more with the ``worker_env`` setting (comma-separated names; ``NAME_*`` for a
prefix); exact names given there pass even if they look like secrets. ``TMPDIR`` and
``XDG_RUNTIME_DIR`` are set by the core to the worker's private directory.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final

from comfy_airlock import settings

EXACT = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TERM",
        "NO_COLOR",
        "FORCE_COLOR",
        "LD_LIBRARY_PATH",
        "ONEAPI_DEVICE_SELECTOR",
        "HF_HOME",
        "HF_HUB_CACHE",
        "HF_HUB_OFFLINE",
        "HF_DATASETS_CACHE",
        "HF_DATASETS_OFFLINE",
        "HF_HUB_DISABLE_TELEMETRY",
        "HF_ENDPOINT",
        "TRANSFORMERS_CACHE",
        "TRANSFORMERS_OFFLINE",
        "DIFFUSERS_CACHE",
        "DO_NOT_TRACK",
        "XDG_CACHE_HOME",
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "all_proxy",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "PYTHONIOENCODING",
        "PYTHONUTF8",
        "PYTHONWARNINGS",
        "PYTHONFAULTHANDLER",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONHASHSEED",
    }
)

PREFIXES = (
    "LC_",
    "CUDA_",
    "NVIDIA_",
    "HIP_",
    "ROCR_",
    "HSA_",
    "ZE_",
    "PYTORCH_",
    "TORCH_",
    "TORCHINDUCTOR_",
    "TRITON_",
    "OMP_",
    "MKL_",
    "OPENBLAS_",
    "KMP_",
    "GOMP_",
    "NUMEXPR_",
    "AIRLOCK_",
)

SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "API_KEY", "CREDENTIAL", "PRIVATE_KEY")


class InheritEnv:
    """The type of :data:`INHERIT_ENV`."""

    def __repr__(self) -> str:
        return "comfy_airlock.INHERIT_ENV"


#: ``Worker(env=INHERIT_ENV)``: the worker gets every variable of the host, secrets included.
INHERIT_ENV: Final = InheritEnv()

#: The operator's additions to the allow-list.
EXTRA_ENV = settings.ENV["worker_env"]


def _looks_secret(name: str) -> bool:
    upper = name.upper()
    return any(word in upper for word in SECRET_WORDS)


def _extra(host: Mapping[str, str]) -> tuple[frozenset[str], tuple[str, ...]]:
    names, prefixes = set(), []
    items = settings.get().worker_env if host is os.environ else settings.parse("worker_env", host)
    for item in items:
        if item.endswith("*"):
            prefixes.append(item[:-1])
        elif item:
            names.add(item)
    return frozenset(names), tuple(p for p in prefixes if p)


def allowed(name: str, host: Mapping[str, str] | None = None) -> bool:
    """Whether the host's variable ``name`` reaches workers."""
    host = os.environ if host is None else host
    extra_names, extra_prefixes = _extra(host)
    if name in EXACT or name in extra_names:
        return True
    if name.startswith(PREFIXES + extra_prefixes):
        return not _looks_secret(name)
    return False


def worker_env(
    pack_env: Mapping[str, str], ours: Mapping[str, str], host: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The allow-listed part of ``host`` (default: this process's environment), then the pack's
    ``[env_vars]``, then ``ours`` (the ``AIRLOCK_*`` values for this worker), later ones
    winning."""
    host = os.environ if host is None else host
    env = {k: v for k, v in host.items() if allowed(k, host)}
    env.update(pack_env)
    env.update(ours)
    return env
