"""Which training step each remote-write sample is: per run, timestamp -> step.

A run that exports a step series (``step``, else ``global_step``, with no label
of its own) is placed by it: a sample's step is that series' value at the
sample's timestamp, sent in the same request or another one. With several
shards Prometheus sends a scrape's series in separate requests, in any order,
so a sample whose timestamp has no step yet *waits* (in memory, per run) until
the step series brings it; it is never given a step of its own. A waiting
sample whose step can no longer come (the step series has moved past its
timestamp without a sample there, or has ended) is dropped and counted as
*unplaced*.

A run that exports no step series gets steps from timestamp order: each new
timestamp is the next step, as with one shard all of a scrape's series share
its timestamp. Until this process has seen a run's step series, the run's
samples wait for one up to ``wait_s`` seconds; then the run is read in
timestamp order.

Either way the step of each timestamp is stored: the step series as sent, and
in timestamp order the run's ``step`` metric (value = step, time = the
timestamp). That is how a restarted server finds the mapping again.

Out-of-order and duplicate samples are judged as Prometheus's own receiver does
(see ``place``); a waiting sample is judged when it is placed, and one that
would break the rules then is dropped, never the request that placed it.
"""

from __future__ import annotations

import bisect
from array import array
from dataclasses import dataclass, field
from typing import Callable

from parallax.ingest.points import FINITE, MAX_STEP, NAN, NEG_INF, POS_INF, Batch, Sample
from parallax.ingest.prometheus import STEP_NAMES, PromInputError

#: The two ways a run's samples get their steps.
STEP_SERIES, TIMESTAMP_ORDER = "step series", "timestamp order"
CLOCK_SIZE = 4096  # timestamps remembered per run


def marker(v: float) -> tuple[float | None, int]:
    """(value, non-finite marker) as stored."""
    if v - v == 0.0:
        return v, FINITE
    if v != v:
        return None, NAN
    return None, POS_INF if v > 0 else NEG_INF


def batch_of(groups: dict[str, dict[int, Sample]]) -> Batch:
    out: dict[str, list[Sample]] = {}
    count = non_finite = 0
    lo, hi = None, None
    for name, by_step in groups.items():
        samples = [by_step[s] for s in sorted(by_step)]
        out[name] = samples
        count += len(samples)
        non_finite += sum(1 for x in samples if x[2])
        if samples:
            lo = samples[0][0] if lo is None else min(lo, samples[0][0])
            hi = samples[-1][0] if hi is None else max(hi, samples[-1][0])
    return Batch(groups=out, count=count, non_finite=non_finite, steps=(lo, hi) if count else None)


class Clock:
    """Timestamp (ms) -> step of one run's remote-write samples, the newest ``CLOCK_SIZE`` of them.

    Two sorted arrays of 64-bit integers (16 bytes a timestamp, not the ~170 of a dict and its int objects: 100
    runs scraped every second for an hour hold 6 MB, not 60)."""

    __slots__ = ("order", "_steps", "max_step")

    def __init__(self) -> None:
        self.order = array("q")  # the timestamps, sorted
        self._steps = array("q")  # the step of each
        self.max_step = -1

    def __len__(self) -> int:
        return len(self.order)

    def learn(self, ts: int, step: int) -> None:
        order = self.order
        if not order or ts > order[-1]:
            order.append(ts)
            self._steps.append(step)
        else:
            i = bisect.bisect_left(order, ts)
            if i < len(order) and order[i] == ts:
                self._steps[i] = step
            else:
                order.insert(i, ts)
                self._steps.insert(i, step)
        self.max_step = max(self.max_step, step)
        excess = len(order) - CLOCK_SIZE
        if excess > 0:
            del order[:excess], self._steps[:excess]

    def get(self, ts: int) -> int | None:
        order = self.order
        i = bisect.bisect_left(order, ts)
        return self._steps[i] if i < len(order) and order[i] == ts else None

    @property
    def max_ts(self) -> int:
        return self.order[-1] if self.order else -1

    def floor(self, ts: int) -> int | None:
        i = bisect.bisect_right(self.order, ts)
        return self._steps[i - 1] if i else None


@dataclass
class RunSteps:
    """What this process knows of one run's remote write: its clock, how it is placed, what waits, how it ended."""

    clock: Clock
    mode: str | None = None  # STEP_SERIES, TIMESTAMP_ORDER, or None: not known yet
    step_ts: int = -1  # the newest timestamp of its step series
    # name -> [(ts, value, monotonic time it began to wait)], oldest first
    waiting: dict[str, list[tuple[int, float, float]]] = field(default_factory=dict)
    ended_at: int | None = None  # timestamp of the staleness marker that finished the run (None: not ended so)
    finished_by_gauge: bool = False  # parallax_run_finished = 1 finished it

    @property
    def n_waiting(self) -> int:
        return sum(len(v) for v in self.waiting.values())

    @property
    def waiting_since(self) -> float | None:
        """When the longest-waiting sample began to wait (None: nothing waits)."""
        return min((w[2] for ws in self.waiting.values() for w in ws), default=None)


@dataclass
class RunPart:
    """One run's share of a request: its series (real samples), the step series' steps, its staleness markers."""

    series: list[tuple[str, str, list[int], list[float]]] = field(default_factory=list)  # (where, name, stamps, values)
    explicit: dict[int, tuple[str, int]] = field(default_factory=dict)  # ts -> (step series name, step)
    stale: dict[str, tuple[int, bool]] = field(default_factory=dict)  # name -> (newest marker ts, is the step series)
    newest: dict[str, int] = field(default_factory=dict)  # name -> newest real sample's ts in the request


@dataclass
class Placement:
    batch: Batch
    learned: dict[int, int]  # ts -> step, for the clock once the batch is stored
    duplicates: int  # samples dropped as repeats of stored ones
    waiting: dict[str, list[tuple[int, float, float]]]  # what waits for its step after this request
    unplaced: list[tuple[str, int]]  # (name, ts) dropped: their step cannot come
    newest_ts: int | None  # newest timestamp of a placed sample
    finished: float | None  # the newest value of FINISHED_GAUGE placed
    waited: int = 0  # samples of this request that wait for their step


@dataclass
class _Entry:
    where: str
    name: str
    stamps: list[int]
    values: list[float]
    lenient: int  # the first ``lenient`` samples waited from an earlier request: never a reason to refuse this one
    since: list[float]  # when each of those began to wait


def _entries(part: RunPart, waiting: dict[str, list[tuple[int, float, float]]]) -> list[_Entry]:
    """The request's series, with the samples that waited for their steps ahead of the same name's new ones."""
    out: list[_Entry] = []
    left = dict(waiting)
    for where, name, stamps, values in part.series:
        old = left.pop(name, None) or []
        out.append(_Entry(where, name, [w[0] for w in old] + stamps, [w[1] for w in old] + values, len(old),
                          [w[2] for w in old]))
    for name, old in left.items():
        out.append(_Entry(f"waiting samples of {name}", name, [w[0] for w in old], [w[1] for w in old], len(old),
                          [w[2] for w in old]))
    return out


def place(
    part: RunPart,
    run: RunSteps,
    mode: str | None,
    latest: dict,
    stored: Callable[[str, int], dict] | None,
    finished_name: str,
    now: float,
) -> Placement:
    """Steps for a run's samples (the request's and those that waited), with Prometheus's out-of-order and
    duplicate rules.

    A sample older than its series' newest stored one is out of order unless it is the very sample already
    stored (same step, timestamp and value: a retried request), which is dropped as a duplicate, so a retry
    changes nothing. Out of order, or another value at the newest's timestamp, refuses the request (a 400):
    unless the sample waited from an earlier request, which is then dropped (unplaced).
    """
    clock = run.clock
    explicit = {t: step for t, (_, step) in part.explicit.items()}
    step_ts = max(run.step_ts, max(explicit, default=-1))
    entries = _entries(part, run.waiting)
    learned: dict[int, int] = {}
    fresh: list[int] = []  # timestamp order: timestamps newer than any the run had, each a new step

    def known(t: int) -> int | None:
        s = explicit.get(t)
        return clock.get(t) if s is None else s

    if mode == TIMESTAMP_ORDER:
        lenient_only = {t for e in entries for t in e.stamps[: e.lenient]}
        strict = {t for e in entries for t in e.stamps[e.lenient :]}
        new_stamps = sorted({t for e in entries for t in e.stamps if known(t) is None})
        next_step = clock.max_step
        for t in new_stamps:
            if t > clock.max_ts:
                next_step += 1
                if next_step > MAX_STEP:
                    raise PromInputError(f"timestamp {t} would be step {next_step}, past the highest step there is: send a step series")
                learned[t] = next_step
                fresh.append(t)
            else:
                floor = clock.floor(t)
                if floor is not None:
                    learned[t] = floor
                elif t in strict and t not in lenient_only:
                    raise PromInputError(f"out of order sample: timestamp {t} is older than any this run has a step for")
    def step_at(t: int) -> int | None:
        s = explicit.get(t)
        if s is None:
            s = learned.get(t)
            if s is None:
                s = clock.get(t)
        return s

    groups: dict[str, dict[int, Sample]] = {}
    waiting: dict[str, list[tuple[int, float, float]]] = {}
    held_at: dict[str, set[int]] = {}
    waited = 0
    unplaced: list[tuple[str, int]] = []
    dropped = 0
    newest_ts: int | None = None
    finished: tuple[int, float] | None = None
    for e in entries:
        # Which samples wait: those with no step yet after the series' last placeable one, when it may still come.
        at = [step_at(t) for t in e.stamps]
        last_known = max((i for i, s in enumerate(at) if s is not None), default=-1)
        keep: list[int] = []
        for i, t in enumerate(e.stamps):
            if at[i] is not None:
                keep.append(i)
            elif i > last_known and mode != TIMESTAMP_ORDER and t > step_ts:
                held = held_at.setdefault(e.name, set())
                if t not in held:  # a retried request's copy waits once
                    held.add(t)
                    waiting.setdefault(e.name, []).append((t, e.values[i], e.since[i] if i < e.lenient else now))
                    waited += i >= e.lenient
            else:
                unplaced.append((e.name, t))
        lv = latest.get(e.name)
        newest = round(lv.time * 1000) if lv is not None else None
        newest_value = lv.value if lv is not None else None
        newest_marker = lv.nonfinite if lv is not None else 0
        by_step = groups.setdefault(e.name, {})
        old_points: dict[int, tuple] | None = None
        for i in keep:
            t, value = e.stamps[i], e.values[i]
            lenient = i < e.lenient
            v, f = marker(value)
            if newest is not None and t <= newest:
                if t < newest:
                    step = at[i]
                    if old_points is None:
                        lo = min((s for x, s in zip(e.stamps, at) if x < newest and s is not None), default=0)
                        old_points = stored(e.name, lo) if stored is not None and step is not None else {}
                    if step is not None and old_points.get(step) == (v, f, t):
                        dropped += 1
                        continue
                    if lenient:
                        unplaced.append((e.name, t))
                        continue
                    raise PromInputError(f"{e.where}: out of order sample: timestamp {t} is older than the newest stored ({newest})")
                if (v, f) == (newest_value, newest_marker):
                    dropped += 1
                    continue
                if lenient:
                    unplaced.append((e.name, t))
                    continue
                raise PromInputError(f"{e.where}: duplicate sample for timestamp {t} with a different value")
            newest, newest_value, newest_marker = t, v, f
            step = at[i]
            by_step[step] = (step, v, f, t / 1000.0)
            newest_ts = t if newest_ts is None else max(newest_ts, t)
            if e.name == finished_name and (finished is None or t >= finished[0]):
                finished = (t, value)
    if mode == TIMESTAMP_ORDER:
        # Record the step of each new timestamp as the run's `step` metric.
        by_step = groups.setdefault(STEP_NAMES[0], {})
        for t in fresh:
            step = learned[t]
            by_step.setdefault(step, (step, float(step), FINITE, t / 1000.0))
    learned.update(explicit)
    batch = batch_of({k: v for k, v in groups.items() if v})
    return Placement(batch, learned, dropped, waiting, unplaced, newest_ts, None if finished is None else finished[1], waited)
