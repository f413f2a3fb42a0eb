"""The pyisolate side of bench/compare.py: an extension whose methods forward to
bench/bench_targets.py, and the adapter that registers torch's tensor serializer.

pyisolate loads this directory as the extension's module (``module_path``) in its child, and
re-creates the adapter there by module and class name, so both must be importable by name:
bench/ is on the host's path, and host-coupled children inherit it. Modelled on pyisolate's
own test harness (tests/harness/host.py and tests/harness/test_package, 0.10.2).
"""

from __future__ import annotations

import os
from typing import Any

import bench_targets
from pyisolate.shared import ExtensionBase


class BenchExtension(ExtensionBase):
    async def noop(self) -> None:
        return bench_targets.noop()

    async def echo(self, x: Any) -> Any:
        return bench_targets.echo(x)

    async def import_torch(self) -> str:
        return bench_targets.import_torch()

    async def make(self, nbytes: int) -> Any:
        return bench_targets.make(nbytes)

    async def nbytes_of(self, x: Any) -> int:
        return bench_targets.nbytes_of(x)

    async def run_node(self, class_name: str, kwargs: dict) -> Any:
        return bench_targets.run_node(class_name, kwargs)

    async def times_one(self, x: Any) -> Any:
        return bench_targets.times_one(x)

    async def import_comfy(self, comfy_dir: str, cpu: bool = True) -> str:
        return bench_targets.import_comfy(comfy_dir, cpu)


class BenchAdapter:
    """Minimal adapter, as pyisolate's ReferenceAdapter: torch tensors by shared memory."""

    @property
    def identifier(self) -> str:
        return "airlock_bench"

    def get_path_config(self, module_path: str) -> dict[str, Any] | None:
        return {"preferred_root": os.getcwd(), "additional_paths": []}

    def setup_child_environment(self, snapshot: dict[str, Any]) -> None:
        pass

    def register_serializers(self, registry: Any) -> None:
        from pyisolate._internal.tensor_serializer import deserialize_tensor, serialize_tensor

        registry.register("torch.Tensor", serialize_tensor, deserialize_tensor)

    def provide_rpc_services(self) -> list:
        return []

    def handle_api_registration(self, api: Any, rpc: Any) -> None:
        pass
