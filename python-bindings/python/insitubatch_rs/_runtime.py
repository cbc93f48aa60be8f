"""What a pass did, and which stage limited it: the anchor's ``PassStats`` over the engine's.

The engine records the counters and times (``core/src/stats.rs``) and hands them over as
JSON; this module gives them the anchor's shape: attribute access (``.times.decode_s``,
``.depths.inflight_peak``), ``as_dict()``, ``limiting_stage`` and :func:`bottleneck`.

Two differences from the anchor, both deliberate:

* **The verdict is the engine's.** The anchor ranks summed stage totals, which blames the
  store for a CPU-bound batch transform (its open bug #95). The engine instead attributes
  every second the consumer waited to the stage that batch was waiting on (``blocked_s``)
  and decides from that. Stats from a pass carry the engine's own verdict; a ``PassStats``
  built (or ``dataclasses.replace``-d) by hand gets the same rule in Python, which the tests
  check against the engine on every pass they run.
* **Fields the engine does not measure are ``None``**, never a made-up number (only on
  ``PassStats`` built by hand without them); docs/migration.md lists the differences.

The engine's JSON, and the anchor's names some of its fields take here (``Depths``'
``batch_queue_*``, ``resident_peak``), come from the Rust type (``core/src/stats.rs``, its
``x-python`` extension), generated into ``_reports.py``; the dataclasses keep the anchor's
field order and defaults, so a new engine field also needs its line here (``_from_engine``
refuses one it cannot place).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any, get_args

from . import _native
from ._reports import FleetSummary, PassStatsJson, RankReport, Stage
from ._summary import reshape

__all__ = ["Depths", "FleetSummary", "PassStats", "RankReport", "StageTimes", "bottleneck", "fleet_summary"]

# The engine's stages, in its order (the words of core/src/stats.rs `Stage`, declared in the
# order of `Stage::ALL`): ties go to the later one.
STAGES: tuple[str, ...] = get_args(Stage)


class _EnginePassStats(PassStatsJson):
    """What ``last_pass_json``/``stats_json`` send: the engine's pass report and its one-line
    summary (the extension's ``stats_to_json``)."""

    summary: str


@dataclasses.dataclass(frozen=True)
class StageTimes:
    """Seconds by stage. Waits and pool work are summed over concurrent tasks (task-seconds),
    so they can exceed wall time: read the ratios between stages."""

    fetch_wait_s: float = 0.0  # storage requests, summed over concurrent tiles
    admission_parked_s: float = 0.0  # the driver had a chunk to admit but its reservation was full
    decode_s: float = 0.0  # codec decode (and disk-tier revives) on the thread pool
    assemble_s: float | None = None  # tile placement and chunk transforms on the thread pool
    gather_s: float = 0.0  # gather copies
    batch_transform_s: float = 0.0  # batch transforms
    consumer_s: float = 0.0  # the caller's time between receiving a batch and asking again
    consumer_wait_s: float = 0.0  # (ours) time the caller waited for a batch

    @property
    def producer_s(self) -> float:
        """Accounted producer-side cost (everything but the caller's own ``consumer_s``)."""
        return (
            self.fetch_wait_s
            + self.admission_parked_s
            + self.decode_s
            + (self.assemble_s or 0.0)
            + self.gather_s
            + self.batch_transform_s
        )


@dataclasses.dataclass(frozen=True)
class Depths:
    """Queue, in-flight and residency depths of one pass."""

    batch_queue_capacity: int = 0  # prefetch_depth
    batch_queue_peak: int = 0
    batch_queue_samples: int = 0  # times the caller asked for a batch
    batch_queue_empty: int = 0  # ... and found the queue empty
    batch_queue_full_enough: int | None = None  # ... and found it at least half full
    inflight_peak: int = 0  # most storage reads in flight at once
    max_inflight: int = 0
    decode_queue_peak: int | None = None  # most decode jobs waiting for a pool thread
    decode_threads: int = 0  # thread-pool parallelism
    resident_peak: int = 0  # most chunks resident at once (pool-wide)
    resident_peak_bytes: int = 0
    budget_bytes: int | None = None  # the pool's byte budget at the end of the pass
    batch_queue_now: int = 0  # (ours) batches waiting when the stats were taken
    read_window: int = 0  # (ours) reads allowed ahead of the decoders when the pass ended
    read_window_reason: str = "start"  # (ours) what set it: start, decoders, link, floor, ceiling
    read_ahead_peak_bytes: int = 0  # (ours) most stored bytes held read ahead at once (engine-wide)

    @property
    def starved_frac(self) -> float:
        """Share of the caller's requests that found the batch queue empty."""
        return self.batch_queue_empty / self.batch_queue_samples if self.batch_queue_samples else 0.0

    @property
    def fed_frac(self) -> float | None:
        """Share of requests that found the queue at least half full (``None`` on hand-built
        stats without ``batch_queue_full_enough``)."""
        if self.batch_queue_full_enough is None:
            return None
        return self.batch_queue_full_enough / self.batch_queue_samples if self.batch_queue_samples else 0.0


@dataclasses.dataclass(frozen=True)
class PassStats:
    """One pass over one split: counters, depths, times, and the stage they accuse.

    insitubatch 0.2.0's fields first (``split`` ... ``depths``), then ours: samples and bytes
    delivered, chunks re-read within the pass or revived from the disk tier, storage reads,
    time to first batch, the consumer wait attributed to each stage (``blocked_s``), and the
    rank's side: ``rank``, ``world_size``, ``dropped_samples`` (the epoch's samples no rank
    draws so all draw as many) and ``resumed_at`` (samples consumed before a resumed pass).
    """

    split: str
    epoch: int
    batches: int = 0
    cache_hits: int = 0  # chunk admissions served from residency
    cache_misses: int = 0  # chunk admissions that loaded
    bad_chunks: int = 0  # chunks with tiles filled under on_bad_chunk="nan"
    wall_s: float = 0.0  # from the pass's start to its last batch
    times: StageTimes = dataclasses.field(default_factory=StageTimes)
    depths: Depths = dataclasses.field(default_factory=Depths)
    samples: int = 0
    batch_bytes: int = 0
    reread_chunks: int = 0  # loaded again after an earlier block of this pass loaded them
    revived_chunks: int = 0  # served by cache_dir + persist with no fetch or decode
    storage_reads: int = 0  # storage requests for chunk data (one may bring several inner chunks)
    decoded_bytes: int = 0
    ttfb_s: float | None = None  # time to the first batch; None when there was none
    blocked_s: dict[str, float] = dataclasses.field(default_factory=dict)
    rank: int = 0
    world_size: int = 1
    dropped_samples: int = 0  # samples of the epoch no rank draws, so all draw as many (job-wide)
    resumed_at: int = 0  # samples this rank had consumed before a resumed pass started
    index_reads: int = 0  # shard-index requests
    tiles_read: int = 0  # stored or inner chunks the requests brought
    bytes_fetched: int = 0  # stored bytes fetched, gaps between coalesced ranges included
    gap_bytes: int = 0  # fetched bytes no tile needed
    tiles_read_ahead: int = 0  # inner chunks found read ahead (neighbours in a shard)
    hedged_reads: int = 0  # second requests sent for slow reads
    hedge_wins: int = 0  # hedges answered before the request they hedged
    batch_wait_p50_s: float = 0.0  # the caller's wait per batch after the first: median (within 2%)
    batch_wait_p95_s: float = 0.0  # ... 95th percentile
    batch_wait_p99_s: float = 0.0  # ... 99th percentile
    # The engine's (stage, advice, consumer_idle) for stats from a pass. Not an init field, so
    # `dataclasses.replace` drops it and a changed copy is judged afresh by `rule`.
    _engine_verdict: tuple[str, str, bool] | None = dataclasses.field(
        default=None, init=False, repr=False, compare=False
    )
    # The engine's one-line summary (``PassStats::summary``), for the pass's INFO line.
    _engine_summary: str | None = dataclasses.field(default=None, init=False, repr=False, compare=False)

    @property
    def consumer_idle(self) -> bool:
        """True when the caller's loop body did essentially nothing: a throughput measurement."""
        return _verdict(self)[2]

    @property
    def limiting_stage(self) -> str:
        """The stage to go fix: ``consumer``, ``store``, ``decode``, ``residency``, ``gather``,
        ``batch_transform`` (ours: insitubatch 0.2.0 folds it into ``gather``) or ``unknown``."""
        return _verdict(self)[0]

    @property
    def advice(self) -> str:
        """What to do about :attr:`limiting_stage`."""
        return _verdict(self)[1]

    def as_dict(self) -> dict[str, Any]:
        """A plain dict (for logging as JSON or asserting in a test), verdict included."""
        d = dataclasses.asdict(self)
        del d["_engine_verdict"], d["_engine_summary"]
        d["limiting_stage"], d["advice"], d["consumer_idle"] = _verdict(self)
        return d

    @classmethod
    def _from_engine(cls, raw: _EnginePassStats) -> PassStats:
        """From the engine's JSON (``core::stats::PassStats``), reshaped as ``_reports`` says
        (pairs as dicts, the anchor's names). An engine field the dataclasses do not declare
        is a ``TypeError`` here, never dropped."""
        fields = reshape("PassStats", raw)
        verdict = (fields.pop("limiting_stage"), fields.pop("advice"), fields.pop("consumer_idle"))
        summary = fields.pop("summary")
        fields["times"] = StageTimes(**reshape("StageTimes", raw["times"]))
        fields["depths"] = Depths(**reshape("Depths", raw["depths"]))
        if not raw["batches"]:
            fields["ttfb_s"] = None
        stats = cls(**fields)
        object.__setattr__(stats, "_engine_verdict", verdict)
        object.__setattr__(stats, "_engine_summary", summary)
        return stats


def bottleneck(stats: PassStats) -> tuple[str, str]:
    """Which stage limited this pass, and what to do about it: ``(stage, advice)``.

    Read from where the caller's waits went (``blocked_s``), in this order: no batches taken
    → ``unknown``; a loop body that did nothing → the stage that owned most of the wait, as
    a throughput measurement; the caller waited under a fifth of the wall → ``consumer`` (the
    goal); one stage owns at least 40% of the wait → that stage; else ``unknown``.
    """
    stage, advice, _ = _verdict(stats)
    return stage, advice


def fleet_summary(stats: Sequence[PassStats | Mapping[str, Any]]) -> FleetSummary:
    """Which rank is slow, and on what: the verdict over one pass of every rank (ours).

    ``stats``: each rank's ``last_pass`` (a :class:`PassStats`, or its ``as_dict()``), for
    example gathered with ``torch.distributed.all_gather_object``. A data-parallel job steps
    at its slowest rank's pace; a rank delivering under four fifths of the ranks' median rate
    is the straggler, named with the stage it waits on and what to do. Returns ``ranks``,
    ``median_samples_per_s``, ``slowest`` (its ``rank``, ``samples``, ``wall_s``,
    ``limiting_stage``, ``advice``), ``slowest_share``, ``straggler`` and ``verdict``.

    Raises:
        ValueError: an entry without the fields of a pass report.
    """
    reports = []
    for s in stats:
        d = s.as_dict() if isinstance(s, PassStats) else dict(s)
        try:
            reports.append({k: d[k] for k in ("rank", "samples", "wall_s", "limiting_stage", "advice")})
        except KeyError as e:
            raise ValueError(f"fleet_summary needs each rank's PassStats (or its as_dict()); an entry lacks {e}") from None
    summary: FleetSummary = json.loads(_native.fleet_summary_json(json.dumps(reports)))
    return summary


def _verdict(stats: PassStats) -> tuple[str, str, bool]:
    """``(stage, advice, consumer_idle)``: the engine's own for stats from a pass, else :func:`rule`."""
    return stats._engine_verdict if stats._engine_verdict is not None else rule(stats)


def rule(stats: PassStats) -> tuple[str, str, bool]:
    """The engine's verdict rule (``core::stats::verdict``), for hand-built stats."""
    t, d = stats.times, stats.depths
    return _native.verdict(
        queue_samples=d.batch_queue_samples,
        consumer_s=t.consumer_s,
        consumer_wait_s=t.consumer_wait_s,
        blocked=[float(stats.blocked_s.get(s, 0.0)) for s in STAGES],
        inflight_peak=d.inflight_peak,
        max_inflight=d.max_inflight,
    )


def format_pass(stats: PassStats, *, reuse: bool = True) -> str:
    """The per-pass INFO line: the engine's ``PassStats::summary`` (ending in ``limited by:``),
    with a note when batch-buffer reuse is off."""
    reuse_off = "" if reuse else " | batch buffers: reuse OFF via INSITUBATCH_NO_BUFFER_REUSE"
    line = stats._engine_summary or f"epoch {stats.epoch} ({stats.split}): limited by: {stats.limiting_stage}"
    return line + reuse_off
