"""DynamicVRAM (comfy-aimdo) in a worker, started as ComfyUI's ``main.py`` starts it in the host.

Natively every custom node runs in a process where ``main.py`` has initialised aimdo (when its
flags allow it: ``enables_dynamic_vram()``, an NVIDIA device, not WSL, torch 2.8 or later),
switched ``comfy.model_patcher.CoreModelPatcher`` to ``ModelPatcherDynamic`` and set
``comfy.memory_management.aimdo_enabled``. A worker is not started by ``main.py``, so without
this its packs load every model the legacy way while the host's do not. The worker does what
``main.py`` does, in the same order (``init`` with the reserve and the NVML-pressure flag, then
``init_devices`` over ComfyUI's devices with ``--vram-headroom``, then the log level), with the
host's mirrored flags, and only when the host itself runs aimdo. A failure is logged as
``main.py`` logs it, and the worker goes on with the legacy patcher.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("comfy_airlock.worker")

_LEVELS = {
    "DEBUG": "set_log_debug",
    "DETAIL": "set_log_detail",
    "CRITICAL": "set_log_critical",
    "ERROR": "set_log_error",
    "WARNING": "set_log_warning",
}


def start(host_runs_aimdo: bool, console_log_level: str = "INFO") -> bool:
    """Starts aimdo here as ``main.py`` would, when the host runs it. True: it runs."""
    if not host_runs_aimdo:
        return False
    try:
        import comfy.cli_args as cli
        import comfy_aimdo.control as control
    except Exception as e:
        log.warning("DynamicVRAM runs in ComfyUI but not in this worker: %s", e)
        return False
    args = cli.args
    if not (args.enable_dynamic_vram or cli.enables_dynamic_vram()):
        return False
    headroom = None if args.reserve_vram is None else int(args.reserve_vram * 1024**3)
    try:
        control.init(simple_vram_headroom=headroom, nvml_pressure=not args.disable_nvml_pressure)
    except TypeError:  # comfy-aimdo 0.4.10 and 0.4.9, as main.py falls back
        try:
            control.init(simple_vram_headroom=headroom)
        except TypeError:
            control.init()
    import comfy.memory_management
    import comfy.model_management as mm
    import comfy.model_patcher

    if not args.enable_dynamic_vram and not (mm.is_nvidia() and not mm.is_wsl()):
        return False
    if not args.enable_dynamic_vram and mm.torch_version_numeric < (2, 8):
        log.warning(
            "DynamicVRAM needs Pytorch 2.8 or later: the legacy ModelPatcher in this worker"
        )
        return False
    devices = mm.get_all_torch_devices()
    headroom_each = int(args.vram_headroom * 1024**3)
    try:
        ok = control.init_devices((d.index, headroom_each) for d in devices)
    except TypeError:  # comfy-aimdo 0.4.9
        ok = control.init_devices(d.index for d in devices)
    if not ok:
        log.warning("No working comfy-aimdo in this worker: the legacy ModelPatcher")
        return False
    _set_level(control, console_log_level)
    comfy.model_patcher.CoreModelPatcher = comfy.model_patcher.ModelPatcherDynamic
    comfy.memory_management.aimdo_enabled = True
    log.info("DynamicVRAM enabled in this worker, as in ComfyUI")
    return True


def _set_level(control: Any, level: str) -> None:
    setter = getattr(control, _LEVELS.get(level, "set_log_info"), None)
    if setter is None:  # DETAIL before comfy-aimdo had it
        setter = control.set_log_info
    setter()
