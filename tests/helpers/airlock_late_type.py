"""A type whose module the codec's registration must not import (as ComfyUI's video types,
whose module imports PyAV): tests/helpers/airlock_late_codec.py registers its codec late."""


class Late:
    def __init__(self, n: int):
        self.n = n
