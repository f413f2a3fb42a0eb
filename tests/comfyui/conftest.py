"""Fixtures for tests against the real ComfyUI 0.30.0 (made by scripts/comfyui.sh)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import missing

from .harness import DEFAULT_COMFYUI_DIR, ComfyUI, make_base_dir


@pytest.fixture(scope="session")
def comfyui_dir() -> Path:
    """The ComfyUI tree: $COMFYUI_DIR (the Makefile exports it), else the bootstrap's default
    location. Missing: a failure under CI, a skip otherwise."""
    path = Path(os.environ.get("COMFYUI_DIR") or DEFAULT_COMFYUI_DIR)
    if not (path / "main.py").is_file():
        missing(f"ComfyUI tree {path} is missing: scripts/comfyui.sh makes it")
    return path


@pytest.fixture
def start_comfyui(comfyui_dir, tmp_path):
    """Starts real ComfyUI servers and stops them at the end of the test.

    ``start_comfyui(base_dir=None, **kw)``: base_dir defaults to a fresh ``make_base_dir(tmp_path)``;
    ``kw`` goes to ``ComfyUI`` (extra_args, env, startup_timeout, websocket, ...).
    """
    started: list[ComfyUI] = []

    def start(base_dir: Path | None = None, **kw) -> ComfyUI:
        base = (
            base_dir
            if base_dir is not None
            else make_base_dir(tmp_path, name=f"base{len(started)}")
        )
        ui = ComfyUI(comfyui_dir, base, start=False, **kw)
        started.append(ui)
        ui.start()
        return ui

    yield start
    for ui in started:
        ui.stop()
