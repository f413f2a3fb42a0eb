"""A module the host test never imports: the host must not import it because a worker named
it in a pickle."""

from __future__ import annotations


class Thing:
    def __init__(self, n: int) -> None:
        self.n = n


def make(n: int) -> Thing:
    return Thing(n)
