"""Exceptions in the worker re-raise in the host as their own class, with the worker's
traceback."""

from __future__ import annotations

import pytest
import torch

import comfy_airlock


def test_builtin_exception_keeps_its_class_and_traceback(host_worker):
    with pytest.raises(ValueError) as info:
        host_worker.call("airlock_testpack:raise_", "value", "bad input")
    e = info.value
    assert str(e) == "bad input"
    assert "airlock_testpack.py" in e.remote_traceback
    assert "raise ValueError(message)" in str(e.__cause__)
    assert e.worker == "shared"


def test_exception_args_are_preserved(host_worker):
    with pytest.raises(KeyError) as info:
        host_worker.call("airlock_testpack:raise_", "key", "missing")
    assert info.value.args == ("missing",)


def test_an_os_error_keeps_its_file_name(host_worker):
    with pytest.raises(FileNotFoundError) as info:
        host_worker.call("airlock_testpack:raise_", "file", "/no/such/file.png")
    # As natively: "[Errno 2] No such file or directory: '/no/such/file.png'".
    assert info.value.filename == "/no/such/file.png"
    assert str(info.value) == "[Errno 2] No such file or directory: '/no/such/file.png'"


def test_torch_oom_arrives_as_torch_oom(host_worker):
    with pytest.raises(torch.cuda.OutOfMemoryError, match=r"Tried to allocate 2.00 GiB"):
        host_worker.call("airlock_testpack:raise_", "oom")


def test_pack_only_class_becomes_remote_error(host_worker):
    with pytest.raises(comfy_airlock.RemoteError) as info:
        host_worker.call("airlock_testpack:raise_", "pack", "custom")
    e = info.value
    assert e.remote_type == "airlock_testpack.PackOnlyError"
    assert "custom" in str(e)
    assert "PackOnlyError" in e.remote_traceback


def test_system_exit_in_worker_does_not_exit_the_host(host_worker):
    with pytest.raises(comfy_airlock.RemoteError, match=r"SystemExit"):
        host_worker.call("airlock_testpack:raise_", "exit")
    assert host_worker.call("airlock_testpack:echo", 5) == 5


def test_unknown_target_is_reported(host_worker):
    with pytest.raises(ModuleNotFoundError):
        host_worker.call("no_such_module_xyz:fn")
    with pytest.raises(AttributeError):
        host_worker.call("airlock_testpack:no_such_function")
    with pytest.raises(ValueError, match=r"module:qualname"):
        host_worker.call("airlock_testpack")


def test_unencodable_result_is_an_error_not_a_crash(host_worker):
    with pytest.raises(TypeError, match=r"builtins.object"):
        host_worker.call("builtins:object")
    assert host_worker.call("airlock_testpack:echo", "still fine") == "still fine"
