"""A codec both sides register: a pack type crossing without pickle."""

import comfy_airlock


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __eq__(self, other):
        return isinstance(other, Point) and (self.x, self.y) == (other.x, other.y)


comfy_airlock.register_codec("test.Point", Point, lambda p: [p.x, p.y], lambda v: Point(v[0], v[1]))


def move(p, dx):
    return Point(p.x + dx, p.y)
