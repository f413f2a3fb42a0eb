"""Registers a late codec (``values.register_late_codec``) for ``airlock_late_type.Late``
without importing that module; ``REGISTERED`` counts the registrations."""

from comfy_airlock import values

REGISTERED = []


def _register() -> None:
    import airlock_late_type

    REGISTERED.append(1)
    values.register_codec(
        "test.Late", airlock_late_type.Late, lambda v: v.n, airlock_late_type.Late
    )


values.register_late_codec(("test.Late",), (("airlock_late_type", "Late"),), _register)


def make(n: int):
    import airlock_late_type

    return airlock_late_type.Late(n)


def bump(v):
    return make(v.n + 1), len(REGISTERED)
