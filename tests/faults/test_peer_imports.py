"""The peer never makes the host import anything (docs/security.md). A worker's exception whose
class claims ``torch._dynamo.exc.TorchDynamoException`` or ``numpy.testing.KnownFailureException``
used to make the host import ``torch._dynamo`` (torch's module ``__getattr__`` imports it on
first access) or ``numpy.testing``; a torch-less host handed a torch tensor imported torch. A
host process of its own (``peer_import_host.py``) reports what entered its ``sys.modules``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .chaos import iterations
from .conftest import WORKER_SIDE

HOST = Path(__file__).with_name("peer_import_host.py")
RECREATED = {
    "builtins:ValueError": "builtins.ValueError",
    "numpy.linalg:LinAlgError": "numpy.linalg.LinAlgError",
}


def _check(phase: dict, run, torch: bool) -> None:
    assert phase["imported"] == [], f"the peer made the host import {phase['imported']}"
    for name, got in phase["raised"].items():
        if name in RECREATED:
            assert got == RECREATED[name], (name, got)
            run.outcome("host's own class re-created")
        else:
            assert got == "comfy_airlock.RemoteError", (name, got)
            run.outcome("RemoteError, nothing imported")
    want = "torch.Tensor" if torch else "numpy.ndarray"
    assert phase["tensors"] == {"torch": want, "numpy": "numpy.ndarray"}, phase["tensors"]
    run.outcome("torch tensor as " + want)


def test_the_peer_never_makes_the_host_import(fault):
    run = fault("peer names modules the host has not imported (exceptions, tensors)")
    for i in range(iterations(1)):
        with run.iteration(i):
            proc = subprocess.run(
                [sys.executable, str(HOST), str(WORKER_SIDE)],
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert proc.returncode == 0, proc.stderr[-3000:]
            out = json.loads(proc.stdout.strip().splitlines()[-1])
            assert out["bare_had_numpy"] is False, "the host must start without numpy"
            assert out["bare_tensor"] == "numpy.ndarray", out["bare_tensor"]
            run.outcome("torch tensor to a bare host as numpy.ndarray")
            assert out["torch_before"] is False, "the peer made the host import torch"
            assert out["dynamo_with_torch"] is False, "importing torch must not import _dynamo"
            _check(out["torchless"], run, torch=False)
            _check(out["with_torch"], run, torch=True)
    run.finish()
