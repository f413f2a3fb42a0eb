"""A host process for tests/faults/test_peer_imports.py: it asks a worker for exceptions whose
classes claim modules this host has not imported and for tensors, and reports which modules
appeared in its ``sys.modules`` meanwhile (JSON on stdout). First with neither torch nor numpy,
then without torch, then after importing torch itself. Run as ``python peer_import_host.py WORKER_SIDE_DIR``."""

from __future__ import annotations

import json
import sys

import comfy_airlock

NAMED = [
    ("torch._dynamo.exc", "TorchDynamoException"),
    ("torch", "_dynamo.exc.TorchDynamoException"),
    ("torch", "_inductor.exc.InductorError"),
    ("numpy.testing", "KnownFailureException"),
    ("numpy", "testing.KnownFailureException"),
    ("numpy", "f2py.F2PyError"),
    ("comfy.model_management", "InterruptProcessingException"),
    ("numpy", "<locals>.Local"),
    # Controls, classes of modules this host has imported: still re-created.
    ("builtins", "ValueError"),
    ("numpy.linalg", "LinAlgError"),
]


def _raised(w, module, qualname) -> str:
    try:
        w.call("peer_values:raise_named", module, qualname)
    except Exception as e:
        t = type(e)
        return f"{t.__module__}.{t.__qualname__}"
    return "nothing raised"


def _phase(w) -> dict:
    before = set(sys.modules)
    raised = {f"{m}:{q}": _raised(w, m, q) for m, q in NAMED}
    tensors = {}
    for kind in ("torch", "numpy"):
        t = type(w.call("peer_values:tensor", kind))
        tensors[kind] = f"{t.__module__}.{t.__qualname__}"
    return {"imported": sorted(set(sys.modules) - before), "raised": raised, "tensors": tensors}


def main() -> None:
    w = comfy_airlock.Worker(sys.executable, sys_path=[sys.argv[1]], name="peer-imports")
    try:
        # A bare host (neither torch nor numpy) handed a torch tensor: numpy, comfy-airlock's
        # own choice of array, may be imported to hold it; torch may not.
        out = {"bare_had_numpy": "numpy" in sys.modules}
        t = type(w.call("peer_values:tensor", "torch"))
        out["bare_tensor"] = f"{t.__module__}.{t.__qualname__}"
        # Once each way first, so what the host imports for its own work is in the baseline.
        _phase(w)
        out.update(torchless=_phase(w), torch_before="torch" in sys.modules)
        import torch  # noqa: F401  (now the host has torch, as ComfyUI does)

        out["dynamo_with_torch"] = "torch._dynamo" in sys.modules
        _phase(w)
        out["with_torch"] = _phase(w)
    finally:
        w.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
