#!/usr/bin/env python3
"""What first-touching fresh anonymous memory costs on this machine, per GiB of system time.

    bench/fault_cost.py [--gib 1] [--rounds 3]

A cold epoch writes every byte of its peak memory once (decoded chunks, batches), so this
cost is paid once per process and scales with peak RSS. Four ways, interleaved per round:
4 KiB pages touched one by one, 4 KiB pages populated by one madvise(MADV_POPULATE_WRITE),
and the same two with MADV_HUGEPAGE (what jemalloc's `thp:always` asks for). Each mapping
is fresh and unmapped after use. Prints the median and min-max system seconds per GiB.
Linux only (MADV_POPULATE_WRITE needs 5.14).
"""
import argparse
import mmap
import resource
import statistics

PAGE = 4096
MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)
WAYS = {
    "4k-touch": (None, False),
    "4k-populate": (None, True),
    "thp-touch": (mmap.MADV_HUGEPAGE, False),
    "thp-populate": (mmap.MADV_HUGEPAGE, True),
}


def sys_seconds():
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime


def first_touch(nbytes, advice, populate):
    """System seconds to fault in a fresh anonymous mapping of `nbytes`."""
    m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        if advice is not None:
            m.madvise(advice)
        s0 = sys_seconds()
        if populate:
            m.madvise(MADV_POPULATE_WRITE)
        else:
            for off in range(0, nbytes, PAGE):
                m[off] = 1
        return sys_seconds() - s0
    finally:
        m.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    nbytes = int(args.gib * 2**30) // (2 << 20) * (2 << 20)
    seen = {w: [] for w in WAYS}
    names = list(WAYS)
    for r in range(args.rounds):
        for w in names[r % len(names):] + names[:r % len(names)]:
            seen[w].append(first_touch(nbytes, *WAYS[w]) / (nbytes / 2**30))
    print(f"system seconds per GiB first touched ({args.rounds} rounds of {nbytes / 2**30:.2f} GiB, interleaved)")
    for w, xs in seen.items():
        print(f"  {w:13s} median {statistics.median(xs):.2f}  min-max {min(xs):.2f}-{max(xs):.2f}")


if __name__ == "__main__":
    main()
