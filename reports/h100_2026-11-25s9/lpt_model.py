#!/usr/bin/env python3
"""The list-scheduling model behind session 9's dC order (reports/README.md, session 9).

`python3 reports/h100_2026-11-25s9/lpt_model.py reports/h100_2026-11-25s9/run_d/mask_llm.log`

Reads run D's mask dump of the `ours` configuration on `llm` (kept token tiles per vocab tile: the
first 160 vocab tiles of the walk order, and the histogram of all 384) and schedules the vocab
tiles' walks (one time unit a kept tile, one workgroup an SM, 132 SMs, each workgroup started on
the SM that frees first) in two orders: the walk order (the dump's first 160, then the other 224
in a seeded shuffle: the dump does not list them, so this part is an assumption) and longest
first. Prints both makespans and the average load an SM, in kept-tile times.
"""
import heapq
import random
import sys


def makespan(walks, sms=132):
    free = [0.0] * sms
    for w in walks:
        t = heapq.heappop(free)
        heapq.heappush(free, t + w)
    return max(free)


def main(path):
    lines = open(path).read().splitlines()
    first = hist = None
    for ln in lines:  # the first configuration's lines (ours)
        if ln.startswith("MASK cols(first 160): ") and first is None:
            first = [int(x) for x in ln.split(": ")[1].split(",")]
        elif ln.startswith("MASK col hist: ") and hist is None:
            hist = [int(x) for x in ln.split(": ")[1].split(",")]
    counts = [k for k, n in enumerate(hist) for _ in range(n)]
    rest = list(counts)
    for c in first:
        rest.remove(c)
    random.seed(1)
    random.shuffle(rest)
    print(f"vocab tiles {len(counts)}, kept tiles {sum(counts)}")
    print(f"walk order: {makespan(first + rest):.1f} kept-tile times")
    print(f"longest first: {makespan(sorted(counts, reverse=True)):.1f}")
    print(f"average an SM: {sum(counts) / 132:.1f}")


if __name__ == "__main__":
    main(sys.argv[1])
