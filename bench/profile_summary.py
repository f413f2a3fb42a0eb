"""Summarizes py-spy raw (collapsed) stacks from bench/profile.sh: the frames with the most
samples on top of the stack (self) and anywhere in it (inclusive), as shares of all samples.

    .envs/bench/bin/python bench/profile_summary.py bench/out/profile/noop-host.txt [TOP]
"""

from __future__ import annotations

import collections
import re
import sys


def frame_name(f: str) -> str:
    # "function (file.py:line)" -> "function (file.py)": lines split a function's samples.
    return re.sub(r":\d+\)$", ")", f.strip())


def main(path: str, top: int = 25) -> None:
    self_c: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    with open(path, encoding="utf-8", errors="replace") as fh:
        lines = fh.readlines()
    for line in lines:
        stack, _, n = line.rstrip("\n").rpartition(" ")
        if not stack or not n.isdigit():
            continue
        n = int(n)
        frames = [frame_name(f) for f in stack.split(";") if f]
        if not frames:
            continue
        total += n
        self_c[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    print(f"{path}: {total} samples")
    for title, c in (("self", self_c), ("inclusive", incl)):
        print(f"\n  top {top} by {title}:")
        for f, n in c.most_common(top):
            print(f"  {100 * n / total:5.1f}%  {f[:150]}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 25)
