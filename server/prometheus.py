"""Pushgateway pushes and remote-write requests, turned into runs, steps and batches.

Runs. A sample's run is its ``run`` label (Pushgateway: the grouping key's,
else the job); its project the ``project`` label, else the job, else
``prometheus``. Runs are created on first sight (tagged ``pushgateway`` or
``remote-write``) and their ids kept.

Steps. A push's step is its ``step`` (else ``global_step``) gauge; without
one it is the run's next step (highest step + 1). A remote-write sample's step
is the value of the run's ``step`` (else ``global_step``) series at the same
timestamp, in the same request or an earlier one; else timestamps are steps
in their order: a new timestamp newer than any the run had is the next step.
Either way the step of each timestamp is stored as the run's ``step`` metric
(value = step, time = the timestamp), which is how a restarted server picks
the mapping up again.

Out-of-order and duplicate samples are handled as Prometheus's own 1.0
receiver does: a sample with the same timestamp and value as the series'
newest is a duplicate and is dropped silently; one older than the newest, or
with the same timestamp and another value, makes the request a 400 (so the
sender does not retry it) and nothing of it is stored; so does a sample more
than 10 minutes in the future.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ingest.points import FINITE, MAX_STEP, NAN, NEG_INF, POS_INF, Batch, Sample
from ingest.prometheus import PROJECT_LABEL, RUN_LABEL, STEP_NAMES, PromInputError, PromSample, step_value, stored_name
from ingest.remote_write import Series
from server.lifecycle import end_run
from server.store import IngestResult, RunNotFound

DEFAULT_PROJECT = "prometheus"
MAX_AHEAD_MS = 10 * 60 * 1000  # as Prometheus's receiver: samples further in the future are refused
CLOCK_SIZE = 4096  # timestamps remembered per run
MAX_CLOCKS = 256  # runs whose clocks stay in memory (about 250 kB each at most)
MAX_RUNS = 10_000  # runs whose ids and locks stay in memory
MAX_NAME = 200


def _marker(v: float) -> tuple[float | None, int]:
    if v - v == 0.0:
        return v, FINITE
    if v != v:
        return None, NAN
    return None, POS_INF if v > 0 else NEG_INF


def _batch(groups: dict[str, dict[int, Sample]]) -> Batch:
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


def _run_key(project: str, name: str, where: str) -> tuple[str, str]:
    for what, v in (("project", project), ("run", name)):
        if not v or len(v) > MAX_NAME or any(ord(c) < 0x20 for c in v):
            raise PromInputError(f"{where}: the {what} name {v[:60]!r} must be 1 to {MAX_NAME} characters without control characters")
    return project, name


@dataclass
class Clock:
    """Timestamp (ms) -> step of one run's remote-write samples, the newest ``CLOCK_SIZE`` of them."""

    steps: dict[int, int] = field(default_factory=dict)
    order: list[int] = field(default_factory=list)  # the timestamps, sorted
    max_step: int = -1

    def learn(self, ts: int, step: int) -> None:
        if ts not in self.steps:
            bisect.insort(self.order, ts)
        self.steps[ts] = step
        self.max_step = max(self.max_step, step)
        while len(self.order) > CLOCK_SIZE:
            del self.steps[self.order.pop(0)]

    @property
    def max_ts(self) -> int:
        return self.order[-1] if self.order else -1

    def floor(self, ts: int) -> int | None:
        i = bisect.bisect_right(self.order, ts)
        return self.steps[self.order[i - 1]] if i else None


@dataclass
class Outcome:
    accepted: int = 0
    replaced: int = 0
    non_finite: int = 0
    aliased: int = 0
    runs: list[dict] = field(default_factory=list)

    def add(self, result: IngestResult, aliased: int) -> None:
        self.accepted += result.accepted - aliased
        self.replaced += result.replaced
        self.non_finite += result.non_finite
        self.aliased += aliased


class PromIngest:
    def __init__(self, store: Any, ingestor: Any):
        self.store = store
        self._ingestor = ingestor  # server.ingestion.Ingestor: the pipeline JSON ingest uses too
        self._run_ids: dict[tuple[str, str], int] = {}
        self._locks: dict[int, threading.Lock] = {}
        self._create_lock = threading.Lock()
        self._clocks: OrderedDict[int, Clock] = OrderedDict()
        self._deleted: set[int] = set()  # runs a DELETE finished: a later push makes them running again
        self._guard = threading.Lock()

    # -- runs -----------------------------------------------------------------------

    def _lock(self, run_id: int) -> threading.Lock:
        with self._guard:
            lock = self._locks.get(run_id)
            if lock is None:
                if len(self._locks) >= MAX_RUNS:  # keep the ones in use, forget the rest
                    self._locks = {k: v for k, v in self._locks.items() if v.locked()}
                    if len(self._run_ids) >= MAX_RUNS:
                        self._run_ids.clear()
                lock = self._locks[run_id] = threading.Lock()
            return lock

    def find_run(self, project: str, name: str) -> int | None:
        run_id = self._run_ids.get((project, name))
        if run_id is None:
            found = self.store.find_run(project, name)
            if found is None:
                return None
            run_id = self._run_ids[(project, name)] = found.id
        return run_id

    def run_id(self, project: str, name: str, tag: str) -> tuple[int, bool]:
        run_id = self._run_ids.get((project, name))
        if run_id is not None:
            return run_id, False
        run, created = self.store.create_run(project, name, {}, [tag])
        self._run_ids[(project, name)] = run.id
        return run.id, created

    def _write(self, run_id: int, batch: Batch, aliased: int | None = None) -> tuple[IngestResult, int]:
        """Store the batch (``aliased``: it was admitted already, with that many alias copies)."""
        if run_id in self._deleted:
            self._deleted.discard(run_id)
            self.store.update_run(run_id, status="running")
        if aliased is None:
            return self._ingestor.store_batch(run_id, batch)
        return self._ingestor.write(run_id, batch, aliased)

    # -- Pushgateway ------------------------------------------------------------------

    def push(
        self, grouping: dict[str, str], samples: list[PromSample], ignored: Iterable[str], now: float
    ) -> dict:
        job = grouping["job"]
        project, run_name = _run_key(grouping.get(PROJECT_LABEL, job), grouping.get(RUN_LABEL, job), "grouping key")
        ignored = frozenset(ignored)
        picked = {"job", RUN_LABEL, PROJECT_LABEL}
        extra = {k: v for k, v in grouping.items() if k not in picked and k not in ignored}
        rows: list[tuple[str, float, float]] = []  # (stored name, value, time)
        step_of: dict[str, int] = {}
        for s in samples:
            where = f"line {s.line}"
            labels = dict(extra)
            for k, v in s.labels.items():
                if k in grouping:
                    if grouping[k] != v:
                        raise PromInputError(f"{where}: label {k}={v!r} contradicts the grouping key's {k}={grouping[k]!r}")
                    continue
                if k not in ignored:
                    labels[k] = v
            if s.name in STEP_NAMES and not s.labels.keys() - grouping.keys() - ignored:
                step_of.setdefault(s.name, step_value(s.value, where))
            name = stored_name(s.name, labels, where)
            rows.append((name, s.value, s.timestamp_ms / 1000.0 if s.timestamp_ms is not None else now))
        step_name = next((n for n in STEP_NAMES if n in step_of), None)
        # The run's metric limit, before a new run is created for a push it would refuse.
        self._ingestor.limit.check(self.find_run(project, run_name), {name for name, _, _ in rows})
        run_id, created = self.run_id(project, run_name, "pushgateway")
        out = {"run_id": run_id, "project": project, "run": run_name, "run_created": created}
        with self._lock(run_id):
            if step_name is not None:
                step = step_of[step_name]
                out["step_from"] = f"the pushed {step_name} gauge"
            else:
                last = self.store.get_run(run_id).last_step
                step = 0 if last is None else last + 1
                if step > MAX_STEP:
                    raise PromInputError(f"the run's last step is {last}, the highest there is: push a step gauge")
                out["step_from"] = "the run's next step: the push has no step or global_step gauge"
            groups: dict[str, dict[int, Sample]] = {}
            for name, value, t in rows:
                v, f = _marker(value)
                groups.setdefault(name, {})[step] = (step, v, f, t)
            batch = _batch(groups)
            result, aliased = self._write(run_id, batch) if batch.count else (IngestResult(0, 0, 0), 0)
        out.update(step=step, accepted=result.accepted - aliased, replaced=result.replaced, non_finite=result.non_finite)
        if aliased:
            out["aliased"] = aliased
        return out

    def delete(self, grouping: dict[str, str]) -> dict:
        """DELETE of a group: its run is marked finished (its history stays); a later push makes it running again."""
        job = grouping["job"]
        project, run_name = _run_key(grouping.get(PROJECT_LABEL, job), grouping.get(RUN_LABEL, job), "grouping key")
        run_id = self.find_run(project, run_name)
        if run_id is None:
            return {"project": project, "run": run_name, "run_id": None, "detail": "no such run: nothing to delete"}
        try:  # as PATCH status does: an end event, and a finished run's alerts resolve
            end_run(self.store, self._ingestor.alerting, run_id, "finished", reason="Pushgateway DELETE")
        except RunNotFound:
            self._run_ids.pop((project, run_name), None)
            return {"project": project, "run": run_name, "run_id": None, "detail": "no such run: nothing to delete"}
        self._deleted.add(run_id)
        return {"project": project, "run": run_name, "run_id": run_id, "status": "finished"}

    # -- remote write -------------------------------------------------------------------

    def remote_write(self, series: list[Series], ignored: Iterable[str], now: float) -> dict:
        ignored = frozenset(ignored)
        limit_ms = int(now * 1000) + MAX_AHEAD_MS
        # 1. Validate what needs no store, and group the series per run.
        per_run: dict[tuple[str, str], _RunPart] = {}
        skipped = 0
        idents: dict[tuple, tuple[tuple[str, str] | None, str, bool]] = {}
        for i, ts in enumerate(series):
            stamps = ts.timestamps
            if not stamps:
                continue
            ident = idents.get(ts.labels)
            if ident is None:
                ident = idents[ts.labels] = _identify(ts.labels, ignored, f"time series #{i}")
            run_key, name, is_step = ident
            if run_key is None:
                skipped += 1
                continue
            where = f"time series #{i} ({name})"
            _check_order(stamps, ts.values, where)
            if stamps[-1] > limit_ms:
                raise PromInputError(f"{where}: out of bounds: a sample is more than 10 minutes in the future")
            part = per_run.get(run_key)
            if part is None:
                part = per_run[run_key] = _RunPart()
            if is_step:
                for t, v in zip(stamps, ts.values):
                    step = step_value(v, where)
                    prev = part.explicit.get(t)
                    if prev is None or (name == STEP_NAMES[0] and prev[0] != name):
                        part.explicit[t] = (name, step)
                    elif prev[0] == name and prev[1] != step:
                        raise PromInputError(f"{where}: two different steps at timestamp {t}")
            part.series.append((where, name, stamps, ts.values))
        # 2. Steps, and Prometheus's out-of-order and duplicate rules, for every run before any write.
        #    Runs are locked in id order; new runs are created last (they cannot fail the checks:
        #    nothing of them is stored yet), so a refused request leaves no empty run behind.
        #    A request that creates runs first takes the creation lock, so two of them cannot
        #    lock each other's new runs in opposite orders.
        found = [(key, part, self.find_run(*key)) for key, part in per_run.items()]
        held: list[threading.Lock] = []
        if any(rid is None for *_, rid in found):
            held.append(self._create_lock)
            self._create_lock.acquire()
        outcome = Outcome()
        try:
            for rid in sorted({rid for *_, rid in found if rid is not None}):
                held.append(self._lock(rid))
                held[-1].acquire()
            for _, part, run_id in found:  # the metric limit, before any run is created
                names = {name for _, name, _, _ in part.series}
                self._ingestor.limit.check(run_id, names if part.explicit else names | {STEP_NAMES[0]})
            placed = []
            for (project, run_name), part, run_id in sorted(found, key=lambda x: x[2] is None):
                created = False
                if run_id is None:
                    run_id, created = self.run_id(project, run_name, "remote-write")
                    held.append(self._lock(run_id))
                    held[-1].acquire()
                latest = {} if created else {lv.metric: lv for lv in self.store.latest(run_id)}
                stored = (lambda name, lo, rid=run_id: self._stored(rid, name, lo)) if not created else None
                placed.append((project, run_name, run_id, created, *_place(part, self._clock(run_id), latest, stored)))
            admitted: list[int] = []  # every run's batch is admitted (aliases, metric limit) before any is written
            try:
                for _, _, run_id, _, batch, _, _ in placed:
                    admitted.append(self._ingestor.admit(run_id, batch) if batch.count else 0)
            except BaseException:
                for _, _, run_id, *_ in placed[: len(admitted)]:
                    self._ingestor.limit.forget(run_id)
                raise
            for (project, run_name, run_id, created, batch, learned, dropped), aliased in zip(placed, admitted):
                result, aliased = self._write(run_id, batch, aliased) if batch.count else (IngestResult(0, 0, 0), 0)
                clock = self._clock(run_id)
                for t, step in learned.items():
                    clock.learn(t, step)
                outcome.add(result, aliased)
                outcome.runs.append(
                    {"run_id": run_id, "project": project, "run": run_name, "run_created": created,
                     "samples": result.accepted - aliased, "duplicates_dropped": dropped}
                )
        finally:
            for lock in reversed(held):
                lock.release()
        doc = {
            "accepted": outcome.accepted, "replaced": outcome.replaced, "non_finite": outcome.non_finite,
            "runs": outcome.runs, "skipped_series": skipped,
        }
        if outcome.aliased:
            doc["aliased"] = outcome.aliased
        return doc

    def _stored(self, run_id: int, name: str, lo_step: int) -> dict[int, tuple[float | None, int, int]]:
        """The stored points of ``name`` from ``lo_step`` on: step -> (value, non-finite marker, time in ms)."""
        out: dict[int, tuple[float | None, int, int]] = {}
        for s in self.store.series(run_id, [name], max_points=100_000, since_step=lo_step - 1):
            if s.downsampled:
                return {}
            markers = dict(s.non_finite)
            for st, v, t in zip(s.steps, s.values, s.times):
                out[st] = (v, markers.get(st, FINITE), round(t * 1000))
        return out

    def _clock(self, run_id: int) -> Clock:
        with self._guard:
            clock = self._clocks.get(run_id)
            if clock is not None:
                self._clocks.move_to_end(run_id)
                return clock
        clock = Clock()
        run = self.store.get_run(run_id)
        clock.max_step = -1 if run.last_step is None else run.last_step
        since = None if run.last_step is None else max(-1, run.last_step - CLOCK_SIZE)
        for s in self.store.series(run_id, ["step"], max_points=CLOCK_SIZE * 4, since_step=since):
            for st, t in zip(s.steps, s.times):
                clock.learn(round(t * 1000), st)
        clock.max_step = max(clock.max_step, -1 if run.last_step is None else run.last_step)
        with self._guard:
            self._clocks[run_id] = clock
            while len(self._clocks) > MAX_CLOCKS:  # the least recently used; it reloads from the store
                self._clocks.pop(next(iter(self._clocks)))
        return clock


@dataclass
class _RunPart:
    series: list[tuple[str, str, list[int], list[float]]] = field(default_factory=list)
    explicit: dict[int, tuple[str, int]] = field(default_factory=dict)  # ts -> (step series name, step)


def _identify(labels: tuple[tuple[str, str], ...], ignored: frozenset[str], where: str) -> tuple[tuple[str, str] | None, str, bool]:
    """(project, run) or None, the stored name, and whether it is a step series."""
    d: dict[str, str] = {}
    for k, v in labels:
        if k in d:
            raise PromInputError(f"{where}: label {k!r} given twice")
        d[k] = v
    metric = d.pop("__name__", None)
    if not metric:
        raise PromInputError(f"{where}: no __name__ label")
    run = d.pop(RUN_LABEL, None)
    project = d.pop(PROJECT_LABEL, None) or d.get("job") or DEFAULT_PROJECT
    rest = {k: v for k, v in d.items() if k not in ignored}
    name = stored_name(metric, rest, where)
    if not run:
        return None, name, False
    return _run_key(project, run, where), name, metric in STEP_NAMES and not rest


def _check_order(stamps: list[int], values: list[float], where: str) -> None:
    """Within one series: timestamps must not go back; a repeated timestamp must repeat the value."""
    if all(a < b for a, b in zip(stamps, stamps[1:])):
        return
    for i in range(1, len(stamps)):
        if stamps[i] < stamps[i - 1]:
            raise PromInputError(f"{where}: out of order sample: timestamp {stamps[i]} after {stamps[i - 1]}")
        if stamps[i] == stamps[i - 1] and not (values[i] == values[i - 1] or (values[i] != values[i] and values[i - 1] != values[i - 1])):
            raise PromInputError(f"{where}: duplicate sample for timestamp {stamps[i]} with a different value")


def _place(part: _RunPart, clock: Clock, latest: dict, stored: Callable[[str, int], dict] | None) -> tuple[Batch, dict[int, int], int]:
    """Steps for a run's samples, with Prometheus's out-of-order and duplicate rules; (batch, ts->step learned, duplicates dropped).

    A sample older than the series' newest is out of order unless it is the very
    sample already stored (same step, timestamp and value: a retried request),
    which is dropped as a duplicate, so a retry changes nothing.
    """
    explicit = {t: step for t, (_, step) in part.explicit.items()}
    learned: dict[int, int] = {}
    fresh: list[int] = []  # timestamps newer than any the run had: each a new step
    new_stamps = sorted({t for _, name, stamps, _ in part.series for t in stamps if t not in explicit and t not in clock.steps})
    next_step = max(clock.max_step, max(explicit.values(), default=-1) if explicit else -1)
    for t in new_stamps:
        if t > clock.max_ts:
            next_step += 1
            if next_step > MAX_STEP:
                raise PromInputError(f"timestamp {t} would be step {next_step}, past the highest step there is: send a step series")
            learned[t] = next_step
            fresh.append(t)
        else:
            floor = clock.floor(t)
            if floor is None:
                raise PromInputError(f"out of order sample: timestamp {t} is older than any this run has a step for")
            learned[t] = floor
    learned.update(explicit)
    steps = {**clock.steps, **learned}
    groups: dict[str, dict[int, Sample]] = {}
    dropped = 0
    for where, name, stamps, values in part.series:
        lv = latest.get(name)
        newest = round(lv.time * 1000) if lv is not None else None
        newest_value = lv.value if lv is not None else None
        newest_marker = lv.nonfinite if lv is not None else 0
        by_step = groups.setdefault(name, {})
        old_points: dict[int, tuple] | None = None
        for t, value in zip(stamps, values):
            v, f = _marker(value)
            if newest is not None and t <= newest:
                if t < newest:
                    step = steps.get(t)
                    if old_points is None:
                        lo = min((steps[x] for x in stamps if x < newest and x in steps), default=0)
                        old_points = stored(name, lo) if stored is not None and step is not None else {}
                    if step is not None and old_points.get(step) == (v, f, t):
                        dropped += 1
                        continue
                    raise PromInputError(f"{where}: out of order sample: timestamp {t} is older than the newest stored ({newest})")
                if (v, f) == (newest_value, newest_marker):
                    dropped += 1
                    continue
                raise PromInputError(f"{where}: duplicate sample for timestamp {t} with a different value")
            newest, newest_value, newest_marker = t, v, f
            step = steps[t]
            by_step[step] = (step, v, f, t / 1000.0)
    if not part.explicit:
        # Timestamp order: record the step of each new timestamp as the run's `step` metric.
        by_step = groups.setdefault(STEP_NAMES[0], {})
        for t in fresh:
            step = learned[t]
            by_step.setdefault(step, (step, float(step), FINITE, t / 1000.0))
    return _batch({k: v for k, v in groups.items() if v}), learned, dropped

