"""What the suites share beyond bench/report.py: the engines' knobs, the rotation."""
import engines as registry


def knobs(args, **over):
    """The engines' knobs from the shared options, with the suite's own on top."""
    k = registry.Knobs(var=args.var, batch_size=args.batch_size, block_chunks=args.block_chunks,
                       max_inflight=args.max_inflight)
    for key, v in over.items():
        setattr(k, key, v)
    return k


def rotated(items, k):
    """``items`` rotated left by ``k``: round k starts at the k-th engine."""
    items = list(items)
    k %= max(1, len(items))
    return items[k:] + items[:k]
