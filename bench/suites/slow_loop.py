"""slow-loop: peak memory of a plain training loop against describe()'s estimate.

    bench/run.py slow-loop --stores DIR [--only c8] [--steps 0,1.5] [--reps 1]

For each step length (seconds), one epoch of `for b in ds.train: time.sleep(STEP)` with
insitubatch_rs (`rs-python` with --hold-batches: each batch stays alive while the next one is
fetched, as a training loop holds it), in a fresh process each (VmHWM only ever grows): the
process's peak RSS (VmHWM) beside `describe()["memory"]["estimated_peak_bytes"]`, with the
suite's knobs (batch 32, block_chunks 16, max_inflight 32, automatic budget).

A loop slower than the loader lets the pass fill its whole batch queue: that is the peak
describe() has to cover (it is never allowed below a measured peak), so a fast loop shows how
far above it sits and a slow one how close it comes. The step must be longer than the loader
takes for a batch: on a busy machine the loader falls behind and the queue never fills, so run
it on a quiet one. Linux only (/proc/self/status).
"""
import engines as registry
from report import header

from .common import knobs, rotated

NAME = "slow-loop"
STORES = "c8"
CHOICES = []
ENGINES = []
ALWAYS = ["rs-python"]
REPS = 1
QUICK = {"steps": "0,0.05"}


def add_args(ap):
    ap.add_argument("--steps", default=None, help="comma list of seconds per batch (default 0,1.5)")


def check(args, error):
    args.steps = args.steps or "0,1.5"
    try:
        args.step_list = [float(s) for s in args.steps.split(",") if s]
    except ValueError:
        error(f"--steps takes seconds separated by commas, not {args.steps!r}")
    if not args.step_list or min(args.step_list) < 0:
        error("--steps needs at least one step, none below 0")


def commands(args, ctx, store, url, which=None):
    eng = registry.engine("rs-python")
    return {f"step {s:g}": eng.command(ctx, url, knobs(args, epochs=1, compute_ms=s * 1000, hold_batches=True))
            for s in args.step_list}


def run(session):
    a, rows = session.args, []
    if not session.runnable(ALWAYS):
        return rows
    for name, path in session.stores():
        url = "file://" + path
        cmds = commands(a, session.ctx, path, url)
        for rnd in range(a.reps):
            for slot, (key, step) in enumerate(rotated(list(zip(cmds, a.step_list)), rnd)):
                rows.append(session.keep(session.measure(name, "rs-python", rnd, slot, url, cmds[key], step_s=step)))
    return rows


def config(args):
    return (f"one epoch per step and round, a fresh process each; batch {args.batch_size}, block_chunks "
            f"{args.block_chunks}, max_inflight {args.max_inflight}, automatic budget; {args.reps} round(s)")


def markdown(meta, rows):
    L = header(meta, ["# A loop slower than the loader: peak RSS against describe()'s estimate", ""])
    L += ["", "| store | step s | round | batches | peak RSS MiB (VmHWM) | describe() MiB | estimate ÷ peak |",
          "|---|--:|--:|--:|--:|--:|--:|"]
    for r in rows:
        res = r.get("result") or {}
        if r.get("error") or not res.get("epochs"):
            L.append(f"| {r['store']} | {r['step_s']:g} | {r['round']} | n/a ({(r.get('error') or '?')[:60]}) | | | |")
            continue
        peak, est = res.get("peak_rss_bytes") or 0, res.get("describe_estimated_peak_bytes") or 0
        L.append(f"| {r['store']} | {r['step_s']:g} | {r['round']} | {res['epochs'][0].get('batches')} | "
                 f"{peak / 2**20:.1f} | {est / 2**20:.1f} | " + (f"{est / peak:.2f}" if peak else "n/a") + " |")
    if meta.get("results"):
        L += ["", f"Rows: `{meta['results']}`."]
    L.append("")
    return "\n".join(L)
