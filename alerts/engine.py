"""Feeds the rules with metric windows, runs the lifecycle and hands transitions over.

Two drivers share one evaluation step (``_step``):

- ``replay``: in-memory series evaluated step by step, as incremental ingest
  would (used by ``parallax rules test``, the scenario suite and tests);
- ``AlertEngine``: the live engine. An ingested batch re-evaluates only the
  rules that read the metrics it touched, for that run, from windows kept in
  memory (loaded once from the store, then appended from each batch); rules
  that read ``absent_for()`` also run on a timer. Transitions are saved and
  notified through functions it is handed, so it imports nothing of the
  server. When several processes write to one store, ``observe_stored``
  takes the new points from the store rather than from the batch, so the
  windows hold what every process stored.
"""

from __future__ import annotations

import logging
import math
import statistics
import threading
import time as _time
from bisect import bisect_left, bisect_right
from collections import OrderedDict, deque
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

from parallax.alerts.expr.nodes import EMPTY_WINDOW, Batch
from parallax.alerts.lifecycle import advance
from parallax.alerts.rules import Rule, active_many, evaluate
from parallax.alerts.states import FIRING, RESOLVED, AlertState, Transition
from parallax.ingest.aliases import run_mode, staleness_bound
from parallax.ingest.runconfig import eval_every, total_steps

log = logging.getLogger(__name__)

#: Wall seconds per step in a replay when no times are given.
DEFAULT_INTERVAL = 10.0
#: A replay's timer after the last data: every 30 s, for an hour unless told otherwise.
TIMER_EVERY, TIMER_SPAN = 30.0, 3600.0
#: How often the trainer-side client says its process is alive (parallax.client.HEARTBEAT_SECONDS), for replay.
HEARTBEAT_EVERY = 30.0
#: How long the live engine trusts a run's config/status/resume read from the store
#: (``forget_context`` drops it at once when the run or its events change).
CONTEXT_TTL = 30.0
_INF = math.inf
#: When several processes share the store, at most this many extra points per metric are read back to judge each
#: step of one batch (a batch spanning more steps has its earliest steps judged on shorter windows).
MAX_BATCH_WINDOW = 100_000
#: The step time a run's reports show (``report_interval()``): the median over its last this many reports that
#: advanced the step, once it has made at least STEP_CLOCK_MIN of them.
STEP_CLOCK_REPORTS, STEP_CLOCK_MIN = 20, 5


#: The held-out evaluation's metrics: a report that carries one ends an evaluation's pause (the trainer evaluated,
#: then reported) or starts one (it reported, then evaluated).
EVAL_METRICS = frozenset({"reward_heldout", "pass_at_k", "pass_at_1"})


def carries_eval(metrics: Iterable[str]) -> bool:
    """A report whose metrics include a held-out evaluation's."""
    return not EVAL_METRICS.isdisjoint(metrics)


class ReportPauses:
    """The longest wait between two of a run's reports so far (its evaluations, checkpoints, restarts), and the
    longest of those where neither report carried an evaluation's metric (``carries_eval``: a framework evaluates
    before the report that carries the evaluation, or after it)."""

    __slots__ = ("longest", "longest_outside_evals", "_last_evaluated")

    def __init__(self) -> None:
        self.longest: float | None = None
        self.longest_outside_evals: float | None = None
        self._last_evaluated = False  # the report before carried an evaluation's metric

    def report(self, wait: float | None, evaluated: bool) -> None:
        """A report arrived ``wait`` seconds after the one before (None: no wait known); ``evaluated``: it carried
        an evaluation's metric."""
        if wait is not None:
            self.longest = wait if self.longest is None else max(self.longest, wait)
            if not (evaluated or self._last_evaluated):
                other = self.longest_outside_evals
                self.longest_outside_evals = wait if other is None else max(other, wait)
        self._last_evaluated = evaluated


class StepClock:
    """A run's typical wall seconds per step, read off when its reports arrive: for each report that advanced
    the run's step, the seconds since the previous such report over the steps it advanced; the median of the
    last STEP_CLOCK_REPORTS (a pause - an evaluation, a checkpoint, a restart - is one interval among many, not
    the typical one). What ``report_interval()`` reads: the step time of a run that sends no step_s."""

    __slots__ = ("_ref", "_intervals", "_value")

    def __init__(self) -> None:
        self._ref: tuple[int, float] | None = None  # (step, time) of the last report that advanced the step
        self._intervals: deque[float] = deque(maxlen=STEP_CLOCK_REPORTS)
        self._value: float | None = None

    def report(self, step: int, now: float) -> None:
        if self._ref is not None:
            last_step, last_time = self._ref
            if step <= last_step:  # the same step again (its evaluation sent apart), or an older one
                return
            if now > last_time:  # (a batch imported at once has no wall time between its steps)
                self._intervals.append((now - last_time) / (step - last_step))
                self._value = (statistics.median(self._intervals)
                               if len(self._intervals) >= STEP_CLOCK_MIN else None)
        self._ref = (step, now)

    def interval(self) -> float | None:
        return self._value


def _finite_or_none(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _finite_or_none(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite_or_none(x) for x in v]
    return v


def cause_dicts(causes: Iterable[Any]) -> tuple[dict, ...]:
    """Ranked causes as JSON-ready dicts (non-finite evidence becomes null)."""
    return tuple(_finite_or_none(asdict(c) if not isinstance(c, dict) else c) for c in causes)


def rule_config(config: Mapping[str, Any] | None) -> dict:
    """The config the rules read for a run: its own, plus what Parallax infers from it under the names the rules
    use, where the run does not set them itself: ``synchronous`` (the run's mode, from Parallax's keys or the
    framework's own, ``ingest.aliases.run_mode``), ``total_steps`` and ``eval_every`` (from the keys frameworks log
    them under, ``ingest.runconfig``), and ``staleness_bound`` (the framework's own bound key,
    ``ingest.aliases.staleness_bound``)."""
    out = dict(config) if isinstance(config, Mapping) else {}
    if not isinstance(out.get("synchronous"), bool):
        mode = run_mode(out)
        if mode is not None:
            out["synchronous"] = mode
    if "total_steps" not in out:
        n = total_steps(out)
        if n is not None:
            out["total_steps"] = n
    if "eval_every" not in out:
        n = eval_every(out)
        if n is not None:
            out["eval_every"] = n
    if "staleness_bound" not in out and "max_staleness" not in out:
        n = staleness_bound(out)
        if n is not None:
            out["staleness_bound"] = n
    return out


class SeriesContext:
    """An EvalContext over sorted in-memory series: ``{metric: ([steps], [values])}``.

    One context is one step: every rule evaluated with it shares its fetched windows (``cache``) and the window
    calls already computed (``memo``: ``baseline(staleness_mean, 40, 10)`` is read by several rules)."""

    __slots__ = ("_series", "step", "config", "_since_report", "_resume_step", "cache", "memo", "_pairs",
                 "_longest_pause", "_heartbeat_age", "pair_cache", "batch", "bidx", "_report_interval",
                 "_longest_other_pause")

    def __init__(
        self,
        series: Mapping[str, tuple[list[int], list[float | None]]],
        *,
        step: int,
        config: dict | None = None,
        seconds_since_report: float | None = 0.0,
        resume_step: int | None = None,
        pairs: dict[str, list[tuple[int, float | None]]] | None = None,
        longest_pause: float | None = None,
        heartbeat_age: float | None = None,
        pair_cache: dict | None = None,
        report_interval: float | None = None,
        longest_pause_outside_evals: float | None = None,
    ):
        self._series = series
        self._longest_other_pause = longest_pause_outside_evals
        self._report_interval = report_interval
        #: kept with the series across the run's steps: a pair window's points, computed once (alerts.expr)
        self.pair_cache = pair_cache
        self._longest_pause = longest_pause
        self._heartbeat_age = heartbeat_age
        # shared by the contexts of one batch's steps: each metric's (step, value) pairs, built once and sliced
        self._pairs = pairs
        self.step = step
        self.config = config or {}
        self._since_report = seconds_since_report
        self._resume_step = resume_step
        self.cache: dict[str, tuple[int, list]] = {}
        self.memo: dict[tuple, Any] = {}
        #: the window values shared by the contexts of one batch's steps (alerts.expr.Batch), and this one's place
        self.batch: Batch | None = None
        self.bidx = 0

    def on(self, series: Mapping[str, tuple[list[int], list[float | None]]]) -> "SeriesContext":
        """This step's context over other series (a ``HeldSeries``): its own windows, no pair cache shared."""
        return SeriesContext(series, step=self.step, config=self.config, seconds_since_report=self._since_report,
                             resume_step=self._resume_step, longest_pause=self._longest_pause,
                             heartbeat_age=self._heartbeat_age, report_interval=self._report_interval,
                             longest_pause_outside_evals=self._longest_other_pause)

    def points(self, metric: str, n: int) -> list[tuple[int, float | None]]:
        if n <= 0:
            return []
        hit = self.cache.get(metric)  # (points asked for, the newest that many up to this step)
        if hit is not None and (n <= hit[0] or len(hit[1]) < hit[0]):
            pts = hit[1]
            return pts[-n:] if len(pts) > n else pts
        found = self._series.get(metric)
        if not found:
            return []
        steps, values = found
        end = bisect_right(steps, self.step)
        start = max(0, end - n)
        if self._pairs is not None:
            pairs = self._pairs.get(metric)
            if pairs is None:
                pairs = self._pairs[metric] = list(zip(steps, values))
            return pairs[start:end]
        pts = list(zip(steps[start:end], values[start:end]))
        self.cache[metric] = (n, pts)
        return pts

    def batch_span(self, metric: str) -> tuple[list, list[int]] | None:
        """The metric's values and where each step's window ends in them, for the contexts of this context's batch
        (all sharing this one's series); None when it has no batch or they do not share one."""
        batch = self.batch
        if batch is None or self._pairs is None:
            return None
        same = batch.same
        if same is None:
            same = batch.same = not any(c._series is not self._series for c in batch.ctxs)
        if not same:
            return None
        found = self._series.get(metric)
        if not found:
            return EMPTY_WINDOW, []
        steps, values = found
        ends = batch.ends.get(metric)
        if ends is None:
            ends = batch.ends[metric] = [bisect_right(steps, ctx.step) for ctx in batch.ctxs]
        return values, ends

    def finite_windows(self, ctxs: Sequence["SeriesContext"], metric: str, n: int) -> list[list[float] | None] | None:
        """For each of ``ctxs`` (contexts of one batch, sharing this one's series), the values of
        ``points(metric, n)`` when they are all finite, else None; None when this context has no batch."""
        if self._pairs is None or n <= 0:
            return None
        batch = self.batch
        shared = batch is not None and ctxs is batch.ctxs  # the whole batch: its checks and ends kept on it
        if shared and batch.same is not None:
            if not batch.same:
                return None
        else:
            same = not any(c._series is not self._series for c in ctxs)
            if shared:
                batch.same = same
            if not same:
                return None
        found = self._series.get(metric)
        if not found:
            return [EMPTY_WINDOW] * len(ctxs)  # (one list: the batch gives every step the value of an empty window)
        steps, values = found
        ends = batch.ends.get(metric) if shared else None
        if ends is None:
            ends = [bisect_right(steps, ctx.step) for ctx in ctxs]
            if shared:
                batch.ends[metric] = ends
        if ends:
            # One sum over the span all the windows lie in: finite there means every value of every window is a
            # finite float (a None raises, a NaN or an infinity never sums back to finite), so each window is handed
            # over as the loop below would (it can only differ where a window's own sum overflows, a slow path that
            # gives the same value).
            lo, hi = min(ends), max(ends)
            try:
                total = sum(values[lo - n if lo > n else 0:hi])
            except TypeError:
                total = _INF
            if -_INF < total < _INF:
                return [values[end - n if end > n else 0:end] for end in ends]
        out: list[list[float] | None] = []
        for ctx in ctxs:
            end = bisect_right(steps, ctx.step)
            xs = values[end - n if end > n else 0:end]
            try:
                total = sum(xs)  # in C: a None raises, a NaN or an infinity makes it non-finite
            except TypeError:
                total = _INF
            out.append(xs if -_INF < total < _INF else None)  # (a sum that overflows: the slow path, same value)
        return out

    def seconds_since_report(self) -> float | None:
        return self._since_report

    def report_interval(self) -> float | None:
        """The run's typical wall seconds per step, from when its reports arrived (``StepClock``); None until known."""
        return self._report_interval

    def longest_pause(self) -> float | None:
        """The longest wait between two of the run's reports before this silence (evaluations, checkpoints)."""
        return self._longest_pause

    def longest_pause_outside_evals(self) -> float | None:
        """The longest wait between two of the run's reports so far where neither carried an evaluation's metric
        (its checkpoints, its restarts: not its evaluations)."""
        return self._longest_other_pause

    def heartbeat_age(self) -> float | None:
        """Seconds since the trainer's process last said it is alive (None: it never sent a heartbeat)."""
        return self._heartbeat_age

    def steps_since_resume(self) -> int | None:
        if self._resume_step is None or self._resume_step > self.step:
            return None
        return self.step - self._resume_step


class HeldSeries(Mapping):
    """A run's series without the points of its resumes' holds (each span ``lo <= step < hi``): what a rule held
    after a resume reads once its hold is over. A resume's transient (the mismatch metrics, the lag, stalls and MFU
    jumping for a few steps) would otherwise sit in the windows the step the hold ends - a 5-point median read 3 of
    its steps - and page; without them, the windows read the steps before the resume and those after the hold, so
    a fault that begins with the resume is paged once 3 steps after the hold agree. Each metric is cut at its first
    read."""

    __slots__ = ("_series", "spans", "_cut")

    def __init__(self, series: Mapping[str, tuple[list[int], list[float | None]]], spans: Sequence[tuple[int, int]]):
        self._series, self.spans = series, tuple(spans)
        self._cut: dict[str, tuple[list[int], list[float | None]]] = {}

    def get(self, metric: str, default: Any = None) -> Any:  # type: ignore[override]
        hit = self._cut.get(metric)
        if hit is None:
            found = self._series.get(metric)
            if found is None:
                return default
            hit = found
            for lo, hi in reversed(self.spans):  # the latest first: the indexes of the earlier ones do not move
                steps, values = hit
                a, b = bisect_left(steps, lo), bisect_left(steps, hi)
                if a < b:
                    hit = (steps[:a] + steps[b:], values[:a] + values[b:])
            self._cut[metric] = hit
        return hit

    def __getitem__(self, metric: str) -> tuple[list[int], list[float | None]]:
        hit = self.get(metric)
        if hit is None:
            raise KeyError(metric)
        return hit

    def __iter__(self):
        return iter(self._series)

    def __len__(self) -> int:
        return len(self._series)


def hold_spans(resumes: Sequence[int], hold: int, since: int) -> tuple[tuple[int, int], ...]:
    """The holds (``resume <= step < resume + hold``) of ``resumes`` (ascending) that end after step ``since``,
    those that meet or overlap merged: what a rule held ``hold`` steps after each resume leaves out of windows that
    reach back to ``since``. Every resume has its own transient - a restart that took several tries, a crash in
    the first steps back - so leaving out the last one's alone would let an earlier one page the step it ends."""
    out: list[tuple[int, int]] = []
    for r in resumes:
        if r + hold <= since:
            continue
        if out and r <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], r + hold))
        else:
            out.append((r, r + hold))
    return tuple(out)


def held_groups(rules: Sequence[Rule], resumes: Sequence[int], lo: int,
                hi: int) -> list[tuple[list[Rule], tuple[tuple[int, int], ...] | None]]:
    """The rules judged at steps ``lo``..``hi``, grouped by the points their windows leave out: (rules, None) for
    those that read the whole series, (rules, ``hold_spans``) for rules held after the run's last resume whose
    windows may still reach into its hold (from its end until the longest of their windows has passed it), with
    the holds of the resumes before it that those windows reach. ``resumes``: the run's resume steps, ascending."""
    plain: list[Rule] = []
    held: dict[tuple[tuple[int, int], ...], list[Rule]] = {}
    last = resumes[-1] if resumes else None
    for rule in rules:
        h = rule.hold_after_resume
        reach = max(rule.windows.values(), default=0)
        if last is not None and h and hi >= last + h and lo < last + h + reach:
            held.setdefault(hold_spans(resumes, h, lo - reach), []).append(rule)
        else:
            plain.append(rule)
    out: list[tuple[list[Rule], tuple[tuple[int, int], ...] | None]] = [(plain, None)] if plain else []
    return out + [(group, spans) for spans, group in held.items()]


def _pack_order(moves: list[Transition], rules: Sequence[Rule]) -> list[Transition]:
    """Transitions of rules judged in groups, in the order one pass would give: by step, then the pack's order."""
    order = {r.name: i for i, r in enumerate(rules)}
    return sorted(moves, key=lambda t: (t.step, order.get(t.rule, 0)))


def _step_held(rules: Sequence[Rule], states: dict[str, AlertState], ctx: "SeriesContext",
               masked: Callable[[tuple[tuple[int, int], ...]], Mapping], resumes: Sequence[int], *, run_id: int,
               time: float) -> list[Transition]:
    """``_step``, with the rules held after the last of ``resumes`` (the context's resume) reading the series
    without the hold's points."""
    groups = held_groups(rules, _resumes_to(resumes, ctx.step), ctx.step, ctx.step)
    if all(mask is None for _, mask in groups):
        return _step(rules, states, ctx, run_id=run_id, time=time)
    moves: list[Transition] = []
    for group, mask in groups:
        moves += _step(group, states, ctx if mask is None else ctx.on(masked(mask)), run_id=run_id, time=time)
    return _pack_order(moves, rules)


def _step(
    rules: Iterable[Rule],
    states: dict[str, AlertState],
    ctx: SeriesContext,
    *,
    run_id: int,
    time: float,
) -> list[Transition]:
    """Evaluate these rules on one context and advance their alerts; ``states`` is updated in place."""
    moves: list[Transition] = []
    for rule in rules:
        try:
            ev = evaluate(rule, ctx)
        except Exception:  # a rule must never break ingest: log it and treat it as inactive
            log.exception("rule %s failed on run %s at step %s", rule.name, run_id, ctx.step)
            ev = None
        active = ev is not None and ev.active
        new, taken = advance(
            states.get(rule.name),
            active,
            rule=rule.name,
            run_id=run_id,
            step=ctx.step,
            time=time,
            for_steps=rule.for_steps,
            keep_firing_for=rule.keep_firing_for,
            severity=rule.severity,
            value=_finite_or_none(ev.value) if ev is not None else None,
            summary=ev.summary if ev is not None and active else "",
            causes=cause_dicts(ev.causes) if ev is not None and active else (),
            labels=dict(rule.labels),
        )
        if new is None:
            states.pop(rule.name, None)
        else:
            states[rule.name] = new
        moves.extend(taken)
    return moves


def _steps(
    rules: list[Rule],
    at: Mapping[int, list[str]],
    states: dict[str, AlertState],
    run: "_RunWindows",
    config: dict,
    resumes: Sequence[int],
    now: float,
) -> list[Transition]:
    """``_step`` at each step of ``at`` ({step: metrics with a point there}) in order, with the rules reading
    those metrics, as ``replay`` does; ``states`` is updated in place.

    Each rule's condition is first computed for all its steps at once (``active_many``); a step where it does
    not hold and the rule has no open alert is a step where nothing happens, so only the others are evaluated
    in full (headline, causes, evidence, lifecycle)."""
    steps = sorted(at)
    moves: list[Transition] = []
    parts = 0
    for back, part in _by_resume(resumes, steps):
        resume_step = back[-1] if back else None
        for group, mask in held_groups(rules, back, part[0], part[-1]):
            # the rules held after a resume read the series without the holds' points
            parts += 1
            series = run.series if mask is None else HeldSeries(run.series, mask)
            pairs: dict[str, list] = {}
            ctxs = {s: SeriesContext(series, step=s, config=config, seconds_since_report=0.0, resume_step=resume_step,
                                     pairs=pairs, pair_cache=run.pair_cache if mask is None else None,
                                     report_interval=run.clock.interval()) for s in part}
            batch = Batch(list(ctxs.values()))  # each window call once for the batch's steps
            try:
                moves += _judge_steps(group, part, at, states, run, ctxs, now)
            finally:
                batch.release()
    return moves if parts <= 1 else _pack_order(moves, rules)


def _resumes_to(resumes: Sequence[int], step: int) -> Sequence[int]:
    """The resumes at or before ``step`` (``resumes`` ascending)."""
    i = bisect_right(resumes, step)
    return resumes if i == len(resumes) else resumes[:i]


def _by_resume(resumes: Sequence[int], steps: list[int]) -> list[tuple[Sequence[int], list[int]]]:
    """``steps`` (ascending) in runs of those with the same resumes at or before them, each with those resumes: a
    batch the trainer restarted in is judged as ``replay`` judges it, each step after the resumes before it."""
    out: list[tuple[int, list[int]]] = []
    for s in steps:
        i = bisect_right(resumes, s)
        if out and out[-1][0] == i:
            out[-1][1].append(s)
        else:
            out.append((i, [s]))
    return [(_resumes_to(resumes, part[0]), part) for _, part in out]


def _judge_steps(rules: list[Rule], steps: list[int], at: Mapping[int, list[str]], states: dict[str, AlertState],
                 run: "_RunWindows", ctxs: dict[int, SeriesContext], now: float) -> list[Transition]:
    index = _index(rules)
    seen: dict[tuple[str, ...], list[Rule]] = {}  # a dense batch has the same metrics at every step
    touched = {s: seen.get(key) or seen.setdefault(key, _touched(index, key, rules))
               for s in steps for key in [tuple(at[s])]}
    ids = {s: {id(r) for r in touched[s]} for s in steps}
    active: dict[int, dict[int, bool]] = {}  # id(rule) -> {step: condition holds}
    for rule in rules:
        mine = [s for s in steps if id(rule) in ids[s]]
        try:
            flags = active_many(rule, [ctxs[s] for s in mine])
        except Exception:  # _step logs it, step by step
            flags = [True] * len(mine)
        active[id(rule)] = dict(zip(mine, flags))
    moves: list[Transition] = []
    for s in steps:
        due = [r for r in touched[s] if active[id(r)][s] or (states.get(r.name) is not None and states[r.name].open)]
        if due:
            moves += _step(due, states, ctxs[s], run_id=run.run_id, time=now)
    return moves


# -- replay ---------------------------------------------------------------


@dataclass(frozen=True)
class FiredAlert:
    rule: str
    started_step: int  # the step it went firing
    ended_step: int | None  # the step it resolved, None while firing
    top_cause: str | None
    active_since_step: int  # the step its condition first held


@dataclass
class ReplayResult:
    transitions: list[Transition] = field(default_factory=list)

    @property
    def firing(self) -> list[FiredAlert]:
        fired: list[FiredAlert] = []
        open_: dict[str, int] = {}
        for t in self.transitions:
            if t.to_state == FIRING:
                open_[t.rule] = len(fired)
                fired.append(FiredAlert(t.rule, t.step, None, t.top_cause, t.alert.active_since_step))
            elif t.to_state == RESOLVED and t.rule in open_:
                i = open_.pop(t.rule)
                f = fired[i]
                fired[i] = FiredAlert(f.rule, f.started_step, t.step, f.top_cause, f.active_since_step)
        return fired

    def firing_at(self, step: int) -> dict[str, str | None]:
        """Rule → top cause of the alerts firing at ``step`` (after that step's evaluation)."""
        out: dict[str, str | None] = {}
        for t in self.transitions:
            if t.step > step:
                break
            if t.to_state == FIRING:
                out[t.rule] = t.top_cause
            elif t.from_state == FIRING:
                out.pop(t.rule, None)
        return out

    def pending_at(self, step: int) -> set[str]:
        out: set[str] = set()
        for t in self.transitions:
            if t.step > step:
                break
            if t.to_state == "pending":
                out.add(t.rule)
            elif t.from_state == "pending":
                out.discard(t.rule)
        return out


def _index(rules: Sequence[Rule]) -> dict[str, list[Rule]]:
    by_metric: dict[str, list[Rule]] = {}
    for rule in rules:
        for metric in rule.metrics:
            by_metric.setdefault(metric, []).append(rule)
    return by_metric


def _touched(index: Mapping[str, list[Rule]], metrics: Iterable[str], rules: Sequence[Rule]) -> list[Rule]:
    hit = {id(r) for m in metrics for r in index.get(m, ())}
    return [r for r in rules if id(r) in hit]  # keep the pack's order


def replay(
    rules: list[Rule],
    series: Mapping[str, Mapping[int, float]],
    *,
    times: Mapping[int, float] | None = None,
    config: dict | None = None,
    events: Sequence[tuple[int, str]] = (),
    silent_from: float | None = None,
    heartbeat_until: float | None = None,
    run_id: int = 0,
    silent_span: float = TIMER_SPAN,
) -> ReplayResult:
    """Evaluate ``rules`` over in-memory series, step by step, as incremental ingest would.

    ``heartbeat_until``: the trainer's process sends a heartbeat every HEARTBEAT_EVERY seconds until then
    (``math.inf``: it never stops; None: it sends none). ``silent_span``: how long the timer follows the silence
    after ``silent_from``."""
    data: dict[str, tuple[list[int], list[float | None]]] = {}
    at_step: dict[int, list[str]] = {}
    for metric, points in series.items():
        steps = sorted(points)
        data[metric] = (steps, [_finite_or_none(float(points[s])) for s in steps])
        for s in steps:
            at_step.setdefault(s, []).append(metric)
    config = rule_config(config)
    resumes = sorted(s for s, kind in events if kind == "resume")
    index = _index(rules)
    states: dict[str, AlertState] = {}
    result = ReplayResult()

    def when(step: int) -> float:
        return times[step] if times and step in times else step * DEFAULT_INTERVAL

    timed = [r for r in rules if r.on_timer]
    last_step: int | None = None
    pauses = ReportPauses()  # the longest waits between two reports so far
    clock = StepClock()  # the typical seconds per step so far
    pair_cache: dict = {}  # the series never change during a replay
    held: dict[tuple[tuple[int, int], ...], HeldSeries] = {}  # nor do they without the resumes' holds

    def masked(spans: tuple[tuple[int, int], ...]) -> HeldSeries:
        found = held.get(spans)
        if found is None:
            found = held[spans] = HeldSeries(data, spans)
        return found

    def silence(after: int, start: float, until: float) -> None:
        """The timer's evaluations while nothing arrives, every TIMER_EVERY seconds from ``start``."""
        at = start + TIMER_EVERY
        while at < until:
            beat = None
            if heartbeat_until is not None:  # the newest heartbeat: on the timer's beat, while the process lives
                last_beat = start + HEARTBEAT_EVERY * ((min(at, heartbeat_until) - start) // HEARTBEAT_EVERY)
                beat = at - max(start, last_beat)
            back = _resumes_to(resumes, after)
            ctx = SeriesContext(data, step=after, config=config, seconds_since_report=at - start,
                                resume_step=back[-1] if back else None, longest_pause=pauses.longest,
                                heartbeat_age=beat, pair_cache=pair_cache, report_interval=clock.interval(),
                                longest_pause_outside_evals=pauses.longest_outside_evals)
            result.transitions += _step_held(timed, states, ctx, masked, back, run_id=run_id, time=at)
            at += TIMER_EVERY

    for step in sorted(at_step):
        gap = None
        if last_step is not None and times:
            gap = when(step) - when(last_step)
            if timed and gap > TIMER_EVERY:  # a pause (an evaluation, a checkpoint): the timer runs through it
                silence(last_step, when(last_step), when(step))
        pauses.report(gap, carries_eval(at_step[step]))
        last_step = step
        clock.report(step, when(step))
        back = _resumes_to(resumes, step)
        ctx = SeriesContext(data, step=step, config=config, seconds_since_report=0.0,
                            resume_step=back[-1] if back else None, longest_pause=pauses.longest,
                            pair_cache=pair_cache, report_interval=clock.interval(),
                            longest_pause_outside_evals=pauses.longest_outside_evals)
        result.transitions += _step_held(_touched(index, at_step[step], rules), states, ctx, masked, back,
                                         run_id=run_id, time=when(step))
    if timed and last_step is not None and silent_from is not None:
        # The run falls silent: the timer keeps evaluating, data no longer arrives.
        last_report = max(silent_from, when(last_step))
        silence(last_step, last_report, last_report + silent_span + TIMER_EVERY)
    return result


# -- live -----------------------------------------------------------------


class AlertStore(Protocol):
    """What the live engine needs from the store."""

    def open_alerts(self, run_id: int | None) -> list[AlertState]: ...  # None: of every run
    def save_transitions(self, transitions: list[Transition]) -> list[Transition]: ...
    def recent_points(self, run_id: int, windows: Mapping[str, int]) -> dict[str, list[tuple[int, float | None]]]: ...
    def points_after(
        self, run_id: int, after: Mapping[str, tuple[int, int]]
    ) -> dict[str, list[tuple[int, float | None]]]: ...  # only for observe_stored
    def run_context(  # (config, status, last seen, last step, resume steps ascending, last heartbeat)
        self, run_id: int) -> tuple[dict, str, float | None, int | None, tuple[int, ...], float | None]: ...
    def running_runs(self) -> list[int]: ...


class _RunWindows:
    """The recent points of one run, per metric, as the rules need them."""

    def __init__(self, run_id: int):
        self.run_id = run_id
        self.series: dict[str, tuple[list[int], list[float | None]]] = {}
        self.size: dict[str, int] = {}
        self.states: dict[str, AlertState] = {}
        self.loaded_states = False
        self.lock = threading.Lock()
        # (config, status, last seen, last step, resume steps, last heartbeat) from the store, and when it was read
        self.info: tuple[dict, str, float | None, int | None, tuple[int, ...], float | None] | None = None
        self.info_at = 0.0
        self.judged_step: int | None = None  # the highest step the rules were evaluated at
        # when this process last saw the run report, and the longest waits between two of its reports since
        self.last_report: float | None = None
        self.pauses = ReportPauses()
        self.clock = StepClock()  # its typical seconds per step, from when its reports arrived here
        # pair windows' points by the step of their sparse metric (alerts.expr): valid while the windows only
        # grow at their end; emptied when a point comes out of order or is replaced, or windows are reloaded
        self.pair_cache: dict = {}

    def reported(self, step: int | None, now: float, evaluated: bool = False) -> None:
        """A report arrived (a batch up to ``step``; ``evaluated``: it carried an evaluation's metric): how long the
        run paused before it (its evaluations, checkpoints), and its pace."""
        wait = now - self.last_report if self.last_report is not None and now > self.last_report else None
        self.pauses.report(wait, evaluated)
        self.last_report = now
        if step is not None:
            self.clock.report(step, now)

    def stale(self, windows: Mapping[str, int]) -> dict[str, int]:
        return {m: n for m, n in windows.items() if m not in self.series or self.size.get(m, 0) < n}

    def load(self, points: Mapping[str, list[tuple[int, float | None]]], windows: Mapping[str, int]) -> None:
        self.pair_cache.clear()
        for metric, n in windows.items():
            pts = points.get(metric, [])
            self.series[metric] = ([s for s, _ in pts], [v for _, v in pts])
            self.size[metric] = n

    def append(self, metric: str, samples: list[tuple]) -> None:
        """Add a batch's samples; anything out of order or replaced makes the metric reload."""
        found = self.series.get(metric)
        if found is None:
            return
        steps, values = found
        last = steps[-1] if steps else -1
        for sample in samples:
            step = sample[0]
            if step <= last:
                del self.series[metric]
                self.pair_cache.clear()
                return
            steps.append(step)
            values.append(sample[1])
            last = step
        keep = self.size.get(metric, 0) + len(samples)  # every step of the batch is judged with a full window
        if len(steps) > 2 * keep + 64:
            del steps[:-keep], values[:-keep]

    def shrink(self, windows: Mapping[str, int]) -> None:
        """After a big batch was judged: hold these metrics' windows again, not the batch."""
        for metric, n in windows.items():
            found = self.series.get(metric)
            if found is None:
                continue
            self.size[metric] = n
            steps, values = found
            if len(steps) > 2 * n + 64:
                del steps[:-n], values[:-n]

    def steps_in(self, metrics: Iterable[str], lo: int, hi: int) -> dict[int, list[str]]:
        """{step: [metrics with a point there]} for the held points with lo <= step <= hi."""
        at: dict[int, list[str]] = {}
        for metric in metrics:
            found = self.series.get(metric)
            if not found:
                continue
            steps = found[0]
            for s in steps[bisect_left(steps, lo):bisect_right(steps, hi)]:
                at.setdefault(s, []).append(metric)
        return at


class AlertEngine:
    """Evaluates rules as batches arrive and on a timer; keeps each run's alert state in memory and in the store."""

    def __init__(
        self,
        rules: list[Rule],
        store: AlertStore,
        *,
        on_transitions: Callable[[list[Transition]], None] | None = None,
        clock: Callable[[], float] = _time.time,
        max_runs: int = 10_000,
    ):
        self._store = store
        self._on_transitions = on_transitions
        self._clock = clock
        self._max_runs = max_runs
        self._runs: OrderedDict[int, _RunWindows] = OrderedDict()
        self._runs_lock = threading.Lock()
        self.set_rules(rules)

    @property
    def rules(self) -> list[Rule]:
        return self._rules

    def set_rules(self, rules: list[Rule]) -> None:
        windows: dict[str, int] = {}
        for rule in rules:
            for metric, n in rule.windows.items():
                windows[metric] = max(windows.get(metric, 0), n)
        self._rules, self._index, self._windows = list(rules), _index(rules), windows
        self._timed = [r for r in rules if r.on_timer]

    def _run(self, run_id: int) -> _RunWindows:
        with self._runs_lock:
            run = self._runs.get(run_id)
            if run is None:
                run = self._runs[run_id] = _RunWindows(run_id)
                # Forget the least recently used runs, but never one being evaluated
                # (a second copy of it would get a lock of its own).
                for old_id in list(self._runs)[: max(0, len(self._runs) - self._max_runs)]:
                    if not self._runs[old_id].lock.locked():
                        del self._runs[old_id]
            else:
                self._runs.move_to_end(run_id)
            return run

    def observe(
        self, run_id: int, groups: Mapping[str, list[tuple]], step: int | None = None, now: float | None = None
    ) -> list[Transition]:
        """After a batch was stored: re-evaluate the rules that read the metrics it touched, for that run.

        ``step`` is the batch's highest step, when the caller knows it. A batch of several steps is judged at
        each of its new steps in order, as ``replay`` does (an imported history fires where it happened).
        """
        now = now if now is not None else self._clock()
        if step is None:
            step = max((samples[-1][0] for samples in groups.values() if samples), default=None)
        rules = _touched(self._index, groups, self._rules)
        if not rules:
            if self._timed and step is not None:  # the timer's rules read the run's pace from every report
                run = self._run(run_id)
                with run.lock:
                    run.reported(step, now, carries_eval(groups))
            return []
        run = self._run(run_id)
        with run.lock:
            run.reported(step, now, carries_eval(groups))
            extra: dict[str, int] = {}
            lo = hi = None
            for metric, samples in groups.items():
                if metric in self._windows and samples:
                    run.append(metric, samples)
                    extra[metric] = len(samples)
                    first, last = samples[0][0], samples[-1][0]
                    lo = first if lo is None else min(lo, first)
                    hi = last if hi is None else max(hi, last)
            span = (lo, hi) if lo is not None and hi is not None and lo < hi else None
            return self._evaluate(run, rules, now, timer=False, step=step, span=span, extra=extra if span else None)

    def observe_stored(
        self, run_id: int, metrics: Iterable[str] | None, steps: tuple[int, int], now: float | None = None,
        *, every_step: bool = False,
    ) -> list[Transition]:
        """After points were stored, by this process or another: bring the windows up from the store, then
        evaluate as ``observe`` does. ``metrics`` None means any metric; ``steps`` is (lowest, highest).

        Used when several processes share the store: batches of one run may commit in
        another order than their steps, or reach this process late. The windows take every
        point above the last step they hold (so a late announcement leaves no gap), and a
        metric whose older steps were written reloads.

        ``every_step``: judge each step of ``steps`` that has points, even a single one, and even those this
        process judged already (a new leader catching up on what was announced before it led, whose own first
        batches may have come first), and then again the steps past ``steps`` it judged, in order; otherwise a
        single step is judged as the run's newest.
        """
        now = now if now is not None else self._clock()
        rules = self._rules if metrics is None else _touched(self._index, metrics, self._rules)
        lo, hi = steps
        if not rules:
            if self._timed:
                run = self._run(run_id)
                with run.lock:
                    run.reported(hi, now, metrics is not None and carries_eval(metrics))
            return []
        run = self._run(run_id)
        with run.lock:
            run.reported(hi, now, metrics is not None and carries_eval(metrics))
            names = list(self._windows) if metrics is None else [m for m in metrics if m in self._windows]
            after: dict[str, tuple[int, int]] = {}
            for metric in names:
                found = run.series.get(metric)
                if found is None:
                    continue  # not loaded: the evaluation loads it
                if not found[0] or lo <= found[0][-1]:
                    del run.series[metric]
                else:
                    after[metric] = (found[0][-1], run.size[metric])
            if after:
                for metric, pts in self._store.points_after(run_id, after).items():
                    if len(pts) >= run.size[metric]:
                        run.load({metric: pts}, {metric: run.size[metric]})
                    else:
                        run.append(metric, pts)
            if every_step and run.judged_step is not None and run.judged_step > hi:
                # Steps past the span that this process judged already (a new leader's own first batches, judged
                # on their requests before it caught up on the span): judged again after it, in order, so that a
                # transition the span makes is followed by theirs - not by the next batch's newest step.
                hi = run.judged_step
            span = (lo, hi) if lo < hi or (every_step and lo == hi) else None
            extra = {m: min(hi - lo + 1, MAX_BATCH_WINDOW) for m in names} if span else {}
            return self._evaluate(run, rules, now, timer=False, step=hi, span=span, extra=extra, rejudge=every_step)

    def evaluate_run(self, run_id: int, now: float | None = None) -> list[Transition]:
        """Every rule but the timer's on the run's newest step, from the store (a new leader catching up)."""
        rules = [r for r in self._rules if not r.on_timer]  # the timer judges silence, not this
        if not rules:
            return []
        run = self._run(run_id)
        with run.lock:
            return self._evaluate(run, rules, now if now is not None else self._clock(), timer=False)

    def reset(self) -> None:
        """Forget every run's windows and states: they are read from the store again (a new leader's start)."""
        with self._runs_lock:
            self._runs.clear()

    def tick(self, now: float | None = None) -> list[Transition]:
        """The timer: rules reading absent_for() on every running run."""
        if not self._timed:
            return []
        now = now if now is not None else self._clock()
        moves: list[Transition] = []
        for run_id in self._store.running_runs():
            run = self._run(run_id)
            with run.lock:
                moves += self._evaluate(run, self._timed, now, timer=True)
        return moves

    def completed(self, now: float | None = None, *, quiet_s: float = 60.0) -> list[int]:
        """Running runs that ended normally without saying so: their last step reached the total their config
        announces, and they have sent nothing for ``quiet_s`` seconds. The caller marks them finished."""
        now = now if now is not None else self._clock()
        out = []
        for run_id in self._store.running_runs():
            run = self._run(run_id)
            with run.lock:
                config, status, last_seen, last_step, _, _ = self._context(run, now, fresh=False)
            total = config.get("total_steps")
            if (status == "running" and isinstance(total, int) and last_step is not None and last_step + 1 >= total
                    and last_seen is not None and now - last_seen >= quiet_s):
                out.append(run_id)
        return out

    def _context(self, run: _RunWindows, now: float, fresh: bool) -> tuple:
        if fresh or run.info is None or now - run.info_at > CONTEXT_TTL:
            config, *rest = self._store.run_context(run.run_id)
            run.info, run.info_at = (rule_config(config), *rest), now
        return run.info

    def _evaluate(
        self,
        run: _RunWindows,
        rules: list[Rule],
        now: float,
        *,
        timer: bool,
        step: int | None = None,
        span: tuple[int, int] | None = None,
        extra: Mapping[str, int] | None = None,
        rejudge: bool = False,
    ) -> list[Transition]:
        """Evaluate at the run's newest step; with ``span`` (a batch's lowest and highest step), at each step of
        the batch above the last one judged, each time with the rules reading a metric that has a point there.
        ``extra`` is how many more points than the window a metric needs for that (the batch's own)."""
        config, status, last_seen, last_step, resumes, heartbeat_at = self._context(
            run, now, fresh=timer or step is None)
        if step is not None and (last_step is None or step > last_step):
            last_step = step
            run.info = (config, status, last_seen, last_step, resumes, heartbeat_at)
        if last_step is None or (timer and status != "running"):
            return []
        needed: dict[str, int] = {}
        for rule in rules:
            for metric in rule.metrics:
                needed[metric] = self._windows.get(metric, 1) + (extra.get(metric, 0) if extra else 0)
        stale = run.stale(needed)
        if stale:
            run.load(self._store.recent_points(run.run_id, stale), stale)
        self._load_states(run)
        since = (now - last_seen) if timer and last_seen is not None else 0.0
        beat = (now - heartbeat_at) if timer and heartbeat_at is not None else None
        states = dict(run.states)
        moves: list[Transition] = []
        at: dict[int, list[str]] = {}
        if span is not None:
            floor = None if rejudge else run.judged_step
            if floor is None:  # the first batch since a start: not before what the open alerts have seen
                floor = max((a.last_active_step for a in states.values()), default=span[0] - 1)
            at = run.steps_in(extra or (), max(span[0], floor + 1), span[1])
        if at:  # replay's order: each step with the rules reading what arrived at it
            moves += _steps(rules, at, states, run, config, resumes, now)
            judged = max(at)
            # an import's batch of thousands of steps is not held on; a live batch's few more points are
            run.shrink({m: self._windows[m] for m, k in (extra or {}).items() if m in self._windows and k > 256})
        else:
            ctx = SeriesContext(run.series, step=last_step, config=config, seconds_since_report=since,
                                resume_step=resumes[-1] if resumes else None, longest_pause=run.pauses.longest,
                                longest_pause_outside_evals=run.pauses.longest_outside_evals,
                                heartbeat_age=beat, pair_cache=run.pair_cache, report_interval=run.clock.interval())
            moves += _step_held(rules, states, ctx, lambda spans: HeldSeries(run.series, spans), resumes,
                                run_id=run.run_id, time=now)
            judged = last_step
        if not timer and (run.judged_step is None or judged > run.judged_step):
            run.judged_step = judged
        return self._commit(run, states, moves)

    def _load_states(self, run: _RunWindows) -> None:
        """The run's open alerts, from the store the first time (after a restart, or a failed save)."""
        if not run.loaded_states:
            run.states = {a.rule: a for a in self._store.open_alerts(run.run_id)}
            run.loaded_states = True

    def _commit(self, run: _RunWindows, states: dict[str, AlertState], moves: list[Transition]) -> list[Transition]:
        """Save the transitions, then adopt the new states; if the save fails, reload the states from the store."""
        if not moves:
            run.states = states
            return moves
        try:
            moves = self._store.save_transitions(moves)
        except Exception:
            run.loaded_states = False  # memory must not run ahead of the store
            raise
        ids = {t.rule: t.alert.id for t in moves if t.alert.open}  # the store gave new alerts their ids
        for rule, alert_id in ids.items():
            now_state = states.get(rule)  # a later step of the batch may have moved it on (or closed it)
            if now_state is not None and now_state.open and now_state.id is None:
                states[rule] = replace(now_state, id=alert_id)
        run.states = states
        if self._on_transitions is not None:
            try:
                self._on_transitions(moves)
            except Exception:
                log.exception("handing over %d alert transitions failed", len(moves))
        return moves

    def settle(self, run_id: int, now: float | None = None) -> list[Transition]:
        """The run stopped (finished or failed): its open alerts resolve (pending ones are dropped)."""
        return self._close(run_id, lambda rule: True, now)

    def retire(self, now: float | None = None) -> list[Transition]:
        """After a reload: open alerts of rules that are no longer in force resolve."""
        names = {r.name for r in self._rules}
        runs = {a.run_id for a in self._store.open_alerts(None) if a.rule not in names}
        return [t for run_id in sorted(runs) for t in self._close(run_id, lambda rule: rule not in names, now)]

    def _close(self, run_id: int, which: Callable[[str], bool], now: float | None) -> list[Transition]:
        run = self._run(run_id)
        now = now if now is not None else self._clock()
        with run.lock:
            self._load_states(run)
            states = dict(run.states)
            last_step = self._store.run_context(run_id)[3]
            moves: list[Transition] = []
            for name, prev in list(states.items()):
                if not which(name):
                    continue
                step = max(prev.last_active_step, last_step or 0)
                new, taken = advance(prev, False, rule=name, run_id=run_id, step=step, time=now, for_steps=0,
                                     keep_firing_for=0, severity=prev.severity, labels=prev.labels)
                if new is None:
                    states.pop(name, None)
                moves += taken
            return self._commit(run, states, moves)

    def forget_context(self, run_id: int) -> None:
        """The run's config, status or events changed: read them again at the next evaluation."""
        with self._runs_lock:
            run = self._runs.get(run_id)
        if run is not None:
            run.info = None
