"""Pushgateway pushes and remote-write requests, turned into runs, steps and batches.

Runs. A sample's run is its ``run`` label (Pushgateway: the grouping key's,
else the job); its project the ``project`` label, else the job, else
``prometheus``. Runs are created on first sight (tagged ``pushgateway`` or
``remote-write``) and their ids kept. Series named ``parallax_*`` are
Parallax's own ``/metrics`` scraped back (``parallax_metric{run=...}``), and
``up`` and ``scrape_*`` are Prometheus's about each scrape: neither is ever a
run's data (they count as ``skipped_series``). ``parallax_run_finished`` is the
trainer's.

Steps. A push's step is its ``step`` (else ``global_step``) gauge; without
one it is the run's next step (highest step + 1). A remote-write sample's step
comes from its run's step series, or from timestamp order: see
``server.prom_steps``.

Labelled indicators. ``pass_at_k{k="<k>"}`` also feeds ``pass_at_k`` when k is
the run's k (config ``k``, default 8), and ``pass_at_k{k="1"}`` ``pass_at_1``
(``ingest.prometheus.canonical_copies``).

How a run ends (``server.lifecycle``). A Pushgateway DELETE marks it finished
(a later push makes it running again). ``parallax_run_finished`` = 1 marks it
finished, by either path; 0 after that, running again. Remote write: when
staleness markers end a run's step series (its scrape target went away),
``series_ended`` marks it finished, unless its config announces a total step
count it has not reached: then it stays running and ``trainer_silent`` pages,
as for a crash. A run without a step series ends so at the first marker that
ends one of its series. A sample newer than that marker (the trainer came
back) makes it running again. A staleness marker is never stored: not as a
point, not as a NaN.

Out-of-order and duplicate samples are handled as Prometheus's own 1.0
receiver does: a sample with the same timestamp and value as the series'
newest is a duplicate and is dropped silently; one older than the newest, or
with the same timestamp and another value, makes the request a 400 (so the
sender does not retry it) and nothing of it is stored; so does a sample more
than 10 minutes in the future.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from parallax.ingest.points import FINITE, MAX_STEP, Batch, Sample
from parallax.ingest.prometheus import (
    FINISHED_GAUGE,
    PROJECT_LABEL,
    RUN_LABEL,
    SCRAPE_SERIES,
    STEP_NAMES,
    PromInputError,
    PromSample,
    canonical_copies,
    is_own_series,
    step_value,
    stored_name,
)
from parallax.ingest.remote_write import Series
from parallax.server.lifecycle import end_run, series_ended
from parallax.server.prom_steps import (
    CLOCK_SIZE,
    STEP_SERIES,
    TIMESTAMP_ORDER,
    Clock,
    Placement,
    RunPart,
    RunSteps,
    batch_of,
    marker,
    place,
)
from parallax.server.store import IngestResult, RunNotFound

log = logging.getLogger(__name__)

DEFAULT_PROJECT = "prometheus"
MAX_AHEAD_MS = 10 * 60 * 1000  # as Prometheus's receiver: samples further in the future are refused
MAX_RUN_STEPS = 256  # runs whose clocks stay in memory (64 kB each at most); runs with waiting samples stay too
MAX_RUNS = 10_000  # runs whose ids and locks stay in memory
MAX_NAME = 200
#: Samples waiting for their step, all runs together; past it new ones are dropped (counted unplaced).
MAX_WAITING = 200_000
#: A sample of a run with a step series waits at most this long for its step (seconds).
MAX_WAIT_S = 600.0
#: How often the background sweep looks for runs whose waiting samples are due (seconds).
SWEEP_S = 1.0


def _run_key(project: str, name: str, where: str) -> tuple[str, str]:
    for what, v in (("project", project), ("run", name)):
        if not v or len(v) > MAX_NAME or any(ord(c) < 0x20 for c in v):
            raise PromInputError(f"{where}: the {what} name {v[:60]!r} must be 1 to {MAX_NAME} characters without control characters")
    return project, name


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


@dataclass
class _Placed:
    project: str
    run_name: str
    run_id: int
    created: bool
    part: RunPart
    state: RunSteps
    mode: str | None
    placement: Placement
    aliased: int = 0


class PromIngest:
    def __init__(self, store: Any, ingestor: Any, *, step_wait_s: float = 30.0, clock: Callable[[], float] = time.monotonic):
        self.store = store
        self._ingestor = ingestor  # server.ingestion.Ingestor: the pipeline JSON ingest uses too
        self._step_wait_s = step_wait_s
        self._clock = clock
        self._run_ids: dict[tuple[str, str], int] = {}
        self._locks: dict[int, threading.Lock] = {}
        self._create_lock = threading.Lock()
        self._steps: OrderedDict[int, RunSteps] = OrderedDict()
        self._waiting_runs: set[int] = set()
        self._deleted: set[int] = set()  # runs a DELETE (or the finished gauge) finished: a later push makes them running again
        self._guard = threading.Lock()
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None

    # -- background sweep ---------------------------------------------------------------

    def start(self) -> None:
        """Start the sweep that places (or gives up on) waiting samples when no request comes to do it."""
        if self._sweeper is None:
            self._stop.clear()
            self._sweeper = threading.Thread(target=self._sweep_loop, name="parallax-prom-sweep", daemon=True)
            self._sweeper.start()

    def stop(self) -> None:
        self._stop.set()
        if self._sweeper is not None:
            self._sweeper.join(timeout=10)
            self._sweeper = None
        left = sum(st.n_waiting for st in list(self._steps.values()))
        if left:
            log.warning("%d remote-write samples were still waiting for their steps at shutdown: not stored", left)

    def _sweep_loop(self) -> None:
        while not self._stop.wait(SWEEP_S):
            try:
                self.sweep()
            except Exception:
                log.exception("placing waiting remote-write samples failed")

    def sweep(self) -> int:
        """Place the waiting samples that are due: runs with no step series seen after ``step_wait_s`` (then read
        in timestamp order), samples waited ``MAX_WAIT_S`` (dropped). Returns the runs handled."""
        now = self._clock()
        with self._guard:
            candidates = [(rid, self._steps.get(rid)) for rid in self._waiting_runs]
        due = []
        for rid, st in candidates:
            since = st.waiting_since if st is not None else None
            if since is None:
                with self._guard:
                    self._waiting_runs.discard(rid)
                continue
            if (st.mode is None and now - since >= self._step_wait_s) or now - since >= MAX_WAIT_S:
                due.append(rid)
        for rid in due:
            with self._lock(rid):
                st = self._steps.get(rid)
                if st is None or not st.waiting:
                    continue
                try:
                    run = self.store.get_run(rid)
                except RunNotFound:
                    self._forget(rid)
                    continue
                try:
                    item = self._place_run(run.project, run.name, rid, False, RunPart(), now)
                    self._admit([item])
                    self._commit(item, now)
                except PromInputError as exc:  # cannot be placed, now or later: not kept waiting forever
                    n = st.n_waiting
                    st.waiting = {}
                    self._count("unplaced", n)
                    log.warning("run %s: %d waiting remote-write samples dropped: %s", rid, n, exc)
        return len(due)

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

    def _forget(self, run_id: int) -> None:
        with self._guard:
            self._steps.pop(run_id, None)
            self._waiting_runs.discard(run_id)

    def _running_again(self, run_id: int, why: str) -> None:
        self.store.update_run(run_id, status="running")
        log.info("run %s is running again: %s", run_id, why)
        if self._ingestor.alerting is not None:
            self._ingestor.alerting.run_changed(run_id, "running")

    def _write(self, run_id: int, batch: Batch, aliased: int | None = None, *, revive: bool = True) -> tuple[IngestResult, int]:
        """Store the batch (``aliased``: it was admitted already, with that many alias copies)."""
        if revive and run_id in self._deleted:
            self._deleted.discard(run_id)
            self._running_again(run_id, "a push after its DELETE")
        if aliased is None:
            extra = canonical_copies(batch.groups, self._ingestor.aliases.run(run_id).k)
            batch.count += extra
            result, aliased = self._ingestor.store_batch(run_id, batch)
            return result, aliased + extra
        return self._ingestor.write(run_id, batch, aliased)

    def _finish_by_gauge(self, run_id: int) -> bool:
        """FINISHED_GAUGE = 1: the run finishes (if it was running). Whether it was ended now."""
        if self.store.get_run(run_id).status != "running":
            return False
        end_run(self.store, self._ingestor.alerting, run_id, "finished", reason=f"{FINISHED_GAUGE} = 1")
        return True

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
        skipped = 0
        finishing: float | None = None
        for s in samples:
            if is_own_series(s.name):
                skipped += 1
                continue
            where = f"line {s.line}"
            labels = dict(extra)
            for k, v in s.labels.items():
                if k in grouping:
                    if grouping[k] != v:
                        raise PromInputError(f"{where}: label {k}={v!r} contradicts the grouping key's {k}={grouping[k]!r}")
                    continue
                if k not in ignored:
                    labels[k] = v
            if s.name in STEP_NAMES and not {k for k, v in s.labels.items() if v} - grouping.keys() - ignored:
                step_of.setdefault(s.name, step_value(s.value, where))
            name = stored_name(s.name, labels, where)
            if name == FINISHED_GAUGE:
                finishing = s.value
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
                v, f = marker(value)
                groups.setdefault(name, {})[step] = (step, v, f, t)
            batch = batch_of(groups)
            finished = finishing is not None and finishing >= 1
            result, aliased = self._write(run_id, batch, revive=not finished) if batch.count else (IngestResult(0, 0, 0), 0)
            if finished and self._finish_by_gauge(run_id):
                self._deleted.add(run_id)
                out["status"] = "finished"
        out.update(step=step, accepted=result.accepted - aliased, replaced=result.replaced, non_finite=result.non_finite)
        if aliased:
            out["aliased"] = aliased
        if skipped:
            out["skipped"] = skipped
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
        per_run, skipped = _group(series, frozenset(ignored), int(now * 1000) + MAX_AHEAD_MS)
        mono = self._clock()
        # Steps, and Prometheus's out-of-order and duplicate rules, for every run before any write.
        # Runs are locked in id order; new runs are created last (they cannot fail the checks:
        # nothing of them is stored yet), so a refused request leaves no empty run behind.
        # A request that creates runs first takes the creation lock, so two of them cannot
        # lock each other's new runs in opposite orders.
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
            placed: list[_Placed] = []
            for (project, run_name), part, run_id in sorted(found, key=lambda x: x[2] is None):
                created = False
                if run_id is None:
                    if not part.series:
                        continue  # only staleness markers, for a run never seen: nothing to create
                    run_id, created = self.run_id(project, run_name, "remote-write")
                    held.append(self._lock(run_id))
                    held[-1].acquire()
                placed.append(self._place_run(project, run_name, run_id, created, part, mono))
            self._admit(placed)  # every run's batch is admitted (aliases, metric limit) before any is written
            for item in placed:
                result, aliased = self._commit(item, mono)
                outcome.add(result, aliased)
                doc = {"run_id": item.run_id, "project": item.project, "run": item.run_name, "run_created": item.created,
                       "samples": result.accepted - aliased, "duplicates_dropped": item.placement.duplicates}
                if item.state.waiting:
                    doc["waiting"] = item.state.n_waiting
                if item.placement.unplaced:
                    doc["unplaced"] = len(item.placement.unplaced)
                outcome.runs.append(doc)
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

    def _place_run(self, project: str, run_name: str, run_id: int, created: bool, part: RunPart, mono: float) -> _Placed:
        """Steps for one run's samples (under its lock); nothing is stored yet."""
        st = self._run_steps(run_id, created)
        mode = st.mode
        if part.explicit or any(is_step for _, is_step in part.stale.values()):
            mode = STEP_SERIES
        elif mode is None:
            since = st.waiting_since
            if self._step_wait_s <= 0 or (since is not None and mono - since >= self._step_wait_s):
                mode = TIMESTAMP_ORDER  # no step series came: timestamps are steps
        if mode == STEP_SERIES and st.waiting:
            self._expire(st, mono)
        latest = {} if created else {lv.metric: lv for lv in self.store.latest(run_id)}
        stored = (lambda name, lo: self._stored(run_id, name, lo)) if not created else None
        placement = place(part, st, mode, latest, stored, FINISHED_GAUGE, mono)
        return _Placed(project, run_name, run_id, created, part, st, mode, placement)

    def _admit(self, placed: list[_Placed]) -> None:
        admitted: list[_Placed] = []
        try:
            for item in placed:
                batch = item.placement.batch
                if batch.count:
                    extra = canonical_copies(batch.groups, self._ingestor.aliases.run(item.run_id).k)
                    batch.count += extra
                    item.aliased = self._ingestor.admit(item.run_id, batch) + extra
                admitted.append(item)
        except BaseException:
            for item in admitted:
                self._ingestor.limit.forget(item.run_id)
            raise

    def _commit(self, item: _Placed, mono: float) -> tuple[IngestResult, int]:
        """Store an admitted run's batch, then keep what was learned and settle how the run stands."""
        p, st, run_id = item.placement, item.state, item.run_id
        result, aliased = self._write(run_id, p.batch, item.aliased) if p.batch.count else (IngestResult(0, 0, 0), 0)
        for t, step in p.learned.items():
            st.clock.learn(t, step)
        if item.mode is not None:
            st.mode = item.mode
        if item.part.explicit:
            st.step_ts = max(st.step_ts, max(item.part.explicit))
        st.waiting = p.waiting
        unplaced = list(p.unplaced)
        with self._guard:
            others = [self._steps.get(rid) for rid in self._waiting_runs if rid != run_id]
        overflow = st.n_waiting + sum(x.n_waiting for x in others if x is not None) - MAX_WAITING
        if overflow > 0:
            unplaced += self._drop_waiting(st, overflow)
        self._count("waited", p.waited)
        self._lifecycle(item, unplaced)
        if unplaced:
            self._count("unplaced", len(unplaced))
            log.warning("run %s: %d remote-write samples dropped: their step never came (e.g. %s at %d)",
                        run_id, len(unplaced), *unplaced[0])
        with self._guard:
            # Another run's request may have evicted this state meanwhile: it holds what was just learned (and what
            # waits), so it stays. No newer copy can exist: those are made under this run's lock, which is held.
            if self._steps.get(run_id) is not st:
                self._steps[run_id] = st
            if st.waiting:
                self._waiting_runs.add(run_id)
            else:
                self._waiting_runs.discard(run_id)
        return result, aliased

    def _lifecycle(self, item: _Placed, unplaced: list[tuple[str, int]]) -> None:
        """After a run's batch is stored: the trainer came back, said it finished, or its series ended."""
        p, st, run_id, part = item.placement, item.state, item.run_id, item.part
        alerting = self._ingestor.alerting
        if st.ended_at is not None and p.newest_ts is not None and p.newest_ts > st.ended_at:
            st.ended_at = None
            if self.store.get_run(run_id).status == "finished":
                self._running_again(run_id, "remote-write samples newer than the staleness markers that ended it")
        if p.finished is not None:
            if p.finished >= 1 and not st.finished_by_gauge:
                self._finish_by_gauge(run_id)
                st.finished_by_gauge = True
            elif p.finished < 1 and st.finished_by_gauge:
                st.finished_by_gauge = False
                if self.store.get_run(run_id).status == "finished":
                    self._running_again(run_id, f"{FINISHED_GAUGE} = {p.finished:g}")
        ended: int | None = None
        for name, (ts, is_step) in part.stale.items():
            if ts <= part.newest.get(name, -1):
                continue  # the series came back within the request
            if (item.mode == STEP_SERIES and is_step) or item.mode == TIMESTAMP_ORDER:
                ended = ts if ended is None else max(ended, ts)
        self._count("stale_markers", len(part.stale))
        if ended is None:
            return
        # What waited for a step at or before the end will not get one.
        for name in list(st.waiting):
            keep = [w for w in st.waiting[name] if w[0] > ended]
            unplaced += [(name, w[0]) for w in st.waiting[name] if w[0] <= ended]
            if keep:
                st.waiting[name] = keep
            else:
                del st.waiting[name]
        if self.store.get_run(run_id).status != "running":
            return
        status = series_ended(self.store, alerting, run_id, reason="Prometheus staleness markers ended its "
                              + ("step series" if item.mode == STEP_SERIES else "series") + ": its scrape target went away")
        if status == "finished":
            st.ended_at = ended

    def _expire(self, st: RunSteps, mono: float) -> None:
        for name in list(st.waiting):
            keep = [w for w in st.waiting[name] if mono - w[2] < MAX_WAIT_S]
            gone = len(st.waiting[name]) - len(keep)
            if gone:
                self._count("unplaced", gone)
                log.warning("%d remote-write samples of %s waited %.0f s for their step: dropped", gone, name, MAX_WAIT_S)
            if keep:
                st.waiting[name] = keep
            else:
                del st.waiting[name]

    def _drop_waiting(self, st: RunSteps, n: int) -> list[tuple[str, int]]:
        """Past MAX_WAITING: the newest of this run's waiting samples are dropped."""
        gone: list[tuple[str, int]] = []
        for name in list(st.waiting):
            while st.waiting[name] and len(gone) < n:
                t = st.waiting[name].pop()[0]
                gone.append((name, t))
            if not st.waiting[name]:
                del st.waiting[name]
        return gone

    def _count(self, outcome: str, n: int) -> None:
        telemetry = self._ingestor.telemetry
        if n and telemetry is not None and hasattr(telemetry, "remote_write_samples"):
            telemetry.remote_write_samples.labels(outcome).inc(n)

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

    def _run_steps(self, run_id: int, created: bool) -> RunSteps:
        with self._guard:
            st = self._steps.get(run_id)
            if st is not None:
                self._steps.move_to_end(run_id)
                return st
        clock = Clock()
        if not created:
            run = self.store.get_run(run_id)
            clock.max_step = -1 if run.last_step is None else run.last_step
            since = None if run.last_step is None else max(-1, run.last_step - CLOCK_SIZE)
            for s in self.store.series(run_id, list(STEP_NAMES), max_points=CLOCK_SIZE * 4, since_step=since):
                for step, t in zip(s.steps, s.times):
                    if s.metric == STEP_NAMES[0] or clock.get(round(t * 1000)) is None:
                        clock.learn(round(t * 1000), step)
            clock.max_step = max(clock.max_step, -1 if run.last_step is None else run.last_step)
        st = RunSteps(clock)
        with self._guard:
            self._steps[run_id] = st
            if len(self._steps) > MAX_RUN_STEPS:  # the least recently used without waiting samples; they reload
                for old in [rid for rid, x in self._steps.items() if not x.waiting][: len(self._steps) - MAX_RUN_STEPS]:
                    del self._steps[old]
        return st


def _group(series: list[Series], ignored: frozenset[str], limit_ms: int) -> tuple[dict[tuple[str, str], RunPart], int]:
    """Validate what needs no store, and group the series per run; (runs' parts, series skipped)."""
    per_run: dict[tuple[str, str], RunPart] = {}
    skipped = 0
    idents: dict[tuple, tuple[tuple[str, str] | None, str, bool]] = {}
    for i, ts in enumerate(series):
        stamps = ts.timestamps
        if not stamps and not ts.stale:
            continue
        ident = idents.get(ts.labels)
        if ident is None:
            ident = idents[ts.labels] = _identify(ts.labels, ignored, f"time series #{i}")
        run_key, name, is_step = ident
        if run_key is None:
            skipped += 1
            continue
        where = f"time series #{i} ({name})"
        part = per_run.get(run_key)
        if part is None:
            part = per_run[run_key] = RunPart()
        if stamps:
            _check_order(stamps, ts.values, where)
            if stamps[-1] > limit_ms:
                raise PromInputError(f"{where}: out of bounds: a sample is more than 10 minutes in the future")
            if is_step:
                for t, v in zip(stamps, ts.values):
                    step = step_value(v, where)
                    prev = part.explicit.get(t)
                    if prev is None or (name == STEP_NAMES[0] and prev[0] != name):
                        part.explicit[t] = (name, step)
                    elif prev[0] == name and prev[1] != step:
                        raise PromInputError(f"{where}: two different steps at timestamp {t}")
            part.series.append((where, name, stamps, ts.values))
            part.newest[name] = max(part.newest.get(name, -1), stamps[-1])
        if ts.stale:
            newest_marker = max(ts.stale)
            prev_marker = part.stale.get(name)
            if prev_marker is None or newest_marker > prev_marker[0]:
                part.stale[name] = (newest_marker, is_step)
    return per_run, skipped


def _identify(labels: tuple[tuple[str, str], ...], ignored: frozenset[str], where: str) -> tuple[tuple[str, str] | None, str, bool]:
    """(project, run) or None (not a run's series), the stored name, and whether it is a step series."""
    d: dict[str, str] = {}
    for k, v in labels:
        if k in d:
            raise PromInputError(f"{where}: label {k!r} given twice")
        d[k] = v
    metric = d.pop("__name__", None)
    if not metric:
        raise PromInputError(f"{where}: no __name__ label")
    if metric in SCRAPE_SERIES or is_own_series(metric):
        return None, metric, False  # Prometheus's about the scrape, or Parallax's own scraped back
    run = d.pop(RUN_LABEL, None)
    project = d.pop(PROJECT_LABEL, None) or d.get("job") or DEFAULT_PROJECT
    rest = {k: v for k, v in d.items() if k not in ignored and v != ""}
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
