"""The CUDA IPC crossing's refusals, which run on any machine (cuda_ipc.py, ADR 0041). The
crossing itself needs a card: bench/gpu/gpu_checks.py checks it on one (docs/benchmarks.md,
"GPU figures"), since CI has none."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from comfy_airlock import cuda_ipc, values  # noqa: E402


def _payload(uuid: str = "GPU-00000000-0000-0000-0000-000000000000") -> tuple:
    return ("float32", (4,), (1,), 0, uuid, b"\0" * 64, 16, 0, b"ref", 0, None, False)


def test_a_tensor_off_the_card_is_not_shared():
    assert cuda_ipc.share(torch, torch.zeros(4)) is None


@pytest.mark.parametrize("payload", [None, (), (1, 2, 3), _payload()[:11], [*_payload(), 0]])
def test_a_payload_of_the_wrong_shape_is_refused(payload):
    with pytest.raises(TypeError, match="CUDA IPC tensor of the wrong shape"):
        values.decode_ext(cuda_ipc.CODEC, payload)


def test_a_card_this_process_does_not_see_is_named():
    uuid = "GPU-11111111-2222-3333-4444-555555555555"
    if any(cuda_ipc._uuid(i) == uuid for i in range(torch.cuda.device_count())):
        pytest.skip("this machine has that card")
    with pytest.raises(RuntimeError, match=f"on the card {uuid}, which this process does not"):
        values.decode_ext(cuda_ipc.CODEC, _payload(uuid))


@pytest.mark.parametrize("register", ["by_type", "by_class_name"])
def test_a_pack_codec_cannot_take_the_name_cuda_tensors_cross_under(register):
    # Else the receiver would open a pack's value as a CUDA tensor.
    with pytest.raises(ValueError, match=r"'airlock\.cuda_ipc' is reserved"):
        if register == "by_type":
            values.register_codec(cuda_ipc.CODEC, complex, str, complex)
        else:
            values.register_codec_by_class_name(cuda_ipc.CODEC, "Thing", str, str)
