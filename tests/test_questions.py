"""Questions from a running call to the host (``runtime.ask``): answered on the thread that
waits for the call, in order, with errors raised in the worker."""

from __future__ import annotations

import pytest
from conftest import HELPERS

import comfy_airlock


def _answer(topic, payload):
    if topic == "double?":
        return {"twice": payload * 2}
    if topic == "fail?":
        raise ValueError("the host does not know")
    return None


@pytest.fixture
def asker(make_worker):
    return make_worker(sys_path=[str(HELPERS)], on_event=_answer)


def test_a_question_is_answered_inside_the_call(asker):
    assert asker.call("airlock_interrupts:ask", "double?", 21) == {"twice": 42}
    # Many in a row keep the lane in step.
    for i in range(50):
        assert asker.call("airlock_interrupts:ask", "double?", i) == {"twice": 2 * i}


def test_a_failing_answer_is_raised_in_the_worker_and_the_lane_survives(asker):
    with pytest.raises(comfy_airlock.AirlockError, match="the host does not know"):
        asker.call("airlock_interrupts:ask", "fail?", 1)
    assert asker.call("airlock_interrupts:ask", "double?", 2) == {"twice": 4}
    assert asker.generation == 1


def test_a_question_needs_a_question_mark(asker):
    with pytest.raises(ValueError, match="ends in"):
        asker.call("airlock_interrupts:ask", "double", 2)
