"""What this worker asked the host and the model commands it ran, recorded by the test pack
(the product keeps no such log): it wraps the worker's ``admission.ask`` and its model handler
when the pack is imported (inside a call, so the link is up)."""

import collections

# Admissions and OOM retries asked by this worker, newest last.
ASKED = []
# The model commands run, newest last: (model, op, arg, bytes or refusal).
COMMANDS = collections.deque(maxlen=256)


def install():
    from comfy_airlock.worker import admission, link, models

    if getattr(admission.ask, "_recorded", False):
        return
    ask, execute = admission.ask, models.execute

    def recorded_ask(topic, device, need, minimum, ids):
        answer = ask(topic, device, need, minimum, ids)
        entry = {"topic": topic, "device": str(device), "need": int(need)}
        ASKED.append({**entry, "minimum": int(minimum), "models": ids, "answer": answer})
        del ASKED[:-256]
        return answer

    def recorded_execute(model, op, arg):
        done, refusal, report = execute(model, op, arg)
        COMMANDS.append((model, op, arg, done if refusal is None else refusal))
        return done, refusal, report

    recorded_ask._recorded = True
    admission.ask = recorded_ask
    models.execute = recorded_execute
    if link.LINK is not None:
        link.LINK.set_model_handler(recorded_execute)
