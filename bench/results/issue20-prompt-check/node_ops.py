import time


def invert_timed(x):
    t0 = time.perf_counter_ns()
    y = 1.0 - x
    return y, time.perf_counter_ns() - t0


def blur_timed(x):
    import torch

    t0 = time.perf_counter_ns()
    img = x.movedim(-1, 1)
    k = torch.ones(3, 1, 5, 5) / 25
    y = torch.nn.functional.conv2d(
        torch.nn.functional.pad(img, (2, 2, 2, 2), mode="reflect"), k, groups=3
    ).movedim(1, -1)
    return y, time.perf_counter_ns() - t0
