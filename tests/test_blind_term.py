"""The blind term's rule (host/memory/reserve.py, pure) and a process's device truth over a
simulated card (comfy_airlock/card.py): the pieces the memory scenarios use end to end."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from comfy_airlock.card import Truth
from comfy_airlock.device import SimGpu
from comfy_airlock.host.memory.reserve import BlindTermRule

GIB = 1 << 30


def test_the_term_grows_at_once_and_shrinks_only_after_a_measured_release_at_rest():
    rule = BlindTermRule()
    assert rule.take(3 * GIB, shrink=False) == 3 * GIB  # grows at once, anywhere
    assert rule.take(1 * GIB, shrink=True) == 3 * GIB  # no release measured: stays
    rule.released = True
    assert rule.take(1 * GIB, shrink=False) == 3 * GIB  # inside a loop: stays
    assert rule.take(1 * GIB, shrink=True) == 1 * GIB  # at rest, after the release
    assert rule.take(0, shrink=True) == 1 * GIB  # the release was measured into it once
    assert rule.take(-GIB, shrink=False) == 1 * GIB  # a view above the truth: never clamped...
    rule.released = True
    assert rule.take(-GIB, shrink=True) == -GIB  # ...and taken when it may shrink


def test_a_simulated_card_is_the_truth_and_its_uuid_the_device(tmp_path: Path):
    card = SimGpu.create(tmp_path / "gpu", 16 * GIB, semantics="wddm")
    other = SimGpu.create(tmp_path / "other", 8 * GIB, semantics="device_wide")
    truth = Truth((card, other))
    assert truth.kind == "sim" and truth.sim() is card and truth.sim(1) is other
    assert truth.uuid(0) == card.uuid and truth.uuid(1) == other.uuid and truth.uuid(2) is None
    card.attach(os.getpid())
    card.book(4242, "model", 12 * GIB)
    assert truth.free(torch.device("cuda", 0)) == 4 * GIB  # every process counted
    assert card.free_seen_by(os.getpid()) > 4 * GIB  # while this one's own view is blind
    assert Truth().kind == "nvml" and Truth().sim() is None
