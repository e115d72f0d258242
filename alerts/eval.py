"""The rule evaluation suite: labelled runs of three independent families through the rules (``make eval``).

    .venv/bin/python -m parallax.alerts.eval [--family NAME]... [--seeds heldout|tuning|S,S,...]
                                    [--healthy N] [--per-cause N] [--rules FILE]... [--no-default]
                                    [--jobs N] [--json PATH] [--strict]

Every run of every family (:mod:`parallax.alerts.suites`) is replayed step by step
through :func:`parallax.alerts.engine.replay`, as incremental ingest would evaluate it:
a run logged under a framework's own keys goes through the alias table first,
and a run that ends by reaching its configured total, or whose trainer dies,
is followed by the silence timer. Only pages count (rules of severity
``critical`` or ``warning``); ``info`` notes are never sent.

Scored per family and per fault, on the seeds given (by default the held-out
ones, never used to tune the pack):

- *recall*: a page naming the fault's cause first fires within 60 steps of the
  onset (``trainer_silent``: within 60 step times or 20 minutes of the silence,
  whichever is longer: a run pauses for its evaluations and checkpoints, and a
  dead trainer is told from a pause by outlasting them);
- *right top cause*: the first page at or after the onset names the fault's
  cause first (among the runs where something paged);
- *false-alarm runs*: healthy runs with any page, and fault runs with a page
  before the onset; *false pages per 10,000 healthy steps* counts every page
  over every healthy step (healthy runs, and fault runs before their onset);
- *delay*: steps from the onset to the first right page (median, p90); for the
  faults only sparse evaluations show (exploration collapse, reward hacking),
  also in evaluations: the symptom's points from the onset to the page.

Prints a JSON document (also written to ``--json``), then one table per family
and one for all of them. Exit code 0 whether or not the targets are met
(``--strict``: 1 when they are not).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from parallax.alerts.engine import TIMER_SPAN, replay
from parallax.alerts.rules import Rule, load_rules
from parallax.alerts.suites import CAUSES, HELDOUT_SEEDS, TUNING_SEEDS, Scenario, assign_heartbeats, families

RECALL_STEPS = 60  # the right cause named within this many steps of the onset
#: A dead trainer takes no steps: its page must come within RECALL_STEPS step times or this many seconds of its
#: last report, whichever is longer (runs pause for evaluations and checkpoints; the page waits them out).
RECALL_SILENT_S = 20 * 60.0
SPARSE_EVALS = 2  # faults only sparse evaluations show: within this many evaluations of the onset
SPARSE = {"exploration_collapse", "reward_hacking"}
PAGE_SEVERITIES = frozenset({"critical", "warning"})
TARGETS = {
    "recall": 0.97,
    "top_cause": 0.95,
    "false_alarm_runs": 0,
    "median_delay_steps": 5,
    "sparse_within_evals": SPARSE_EVALS,
}
#: Run sizes per family (healthy runs, runs per cause) and the seeds of the default suite.
SIZES = {"synthetic": (40, 8), "independent": (40, 8), "toyrl": (16, 4)}


@dataclass
class Page:
    rule: str
    step: int
    time: float
    top_cause: str | None


@dataclass
class Outcome:
    family: str
    seed: int
    scenario: str
    cause: str | None
    variant: str
    onset: int | None
    healthy_steps: int  # steps judged while the run was healthy (all of a healthy run, before the onset otherwise)
    pages: list[Page] = field(default_factory=list)
    false_pages: list[Page] = field(default_factory=list)  # healthy run: every page; fault run: before the onset
    first: list[Page] = field(default_factory=list)  # the pages that fired first at/after the onset
    delay: float | None = None  # to the first page naming the right cause (steps, or step times for silence)
    evals: int | None = None  # sparse faults: evaluations from the onset to that page

    @property
    def detected(self) -> bool:
        return bool(self.first)

    @property
    def top_right(self) -> bool:
        return bool(self.first) and all(p.top_cause == self.cause for p in self.first)

    delay_s: float | None = None  # trainer_silent: seconds from the last report to the page

    @property
    def recalled(self) -> bool:
        if self.delay_s is not None:
            return self.delay is not None and (self.delay <= RECALL_STEPS or self.delay_s <= RECALL_SILENT_S)
        return self.delay is not None and self.delay <= RECALL_STEPS

    def brief(self) -> dict:
        return {
            "family": self.family,
            "seed": self.seed,
            "scenario": self.scenario,
            "cause": self.cause,
            "variant": self.variant,
            "onset": self.onset,
            "delay": self.delay,
            "evals": self.evals,
            "first": [(p.rule, p.step, p.top_cause) for p in self.first],
            "false_pages": [(p.rule, p.step, p.top_cause) for p in self.false_pages[:6]],
        }


# -- one run --------------------------------------------------------------------------------


def canonical_series(scenario: Scenario) -> dict[str, dict[int, float]]:
    """The run's series as the rules see them after ingest: framework keys get their canonical names
    (through ``ingest.aliases``, the raw keys kept), canonical names pass as they are."""
    from parallax.ingest import aliases
    from parallax.ingest.names import CANONICAL_METRICS
    from parallax.ingest.points import FINITE, NAN, NEG_INF, POS_INF, Batch

    if all(name in CANONICAL_METRICS for name in scenario.series) and "framework" not in scenario.config:
        return scenario.series
    rows = []
    for name, points in scenario.series.items():
        for step, v in points.items():
            t = scenario.times.get(step, 0.0)
            if math.isnan(v):
                rows.append((name, step, None, NAN, t))
            elif math.isinf(v):
                rows.append((name, step, None, POS_INF if v > 0 else NEG_INF, t))
            else:
                rows.append((name, step, float(v), FINITE, t))
    batch = Batch.of(rows)
    aliases.apply(batch, aliases.run_aliasing(scenario.config))
    return {name: {s: (v if v is not None else math.nan) for s, v, _, _ in samples} for name, samples in batch.groups.items()}


def score(scenario: Scenario, rules: list[Rule], *, seed: int = 0) -> Outcome:
    series = canonical_series(scenario)
    died = scenario.silent_from is not None
    last = scenario.last_step
    end_time = scenario.times[last]
    # After the last point: a dead trainer's silence, or a run that reached its total and just stopped (the
    # timer runs on and must stay quiet); a run marked finished is not judged any more.
    silent_from = scenario.silent_from if died else (end_time if scenario.end == "total_steps" else None)
    heartbeat_until = None  # no client: no heartbeats
    if scenario.heartbeat:  # they stop when the process dies or exits, and go on while it hangs
        heartbeat_until = math.inf if scenario.hung else (silent_from if silent_from is not None else math.inf)
    # the timer follows the silence past the recall deadline (60 step times or 20 minutes): a run of 15-minute
    # steps is paged after 6 of them, later than the replay's default hour
    times = sorted(scenario.times.values())
    step_time = statistics.median(b - a for a, b in zip(times, times[1:])) if len(times) > 1 else 0.0
    span = max(TIMER_SPAN, RECALL_SILENT_S, (RECALL_STEPS + 10) * step_time)
    result = replay(rules, series, times=scenario.times, config=scenario.config, events=scenario.events,
                    silent_from=silent_from, heartbeat_until=heartbeat_until, silent_span=span)
    severity = {r.name: r.severity for r in rules}
    onset = scenario.onset
    healthy_steps = (last + 1) if scenario.cause is None else max(0, (onset or 0))
    out = Outcome(scenario.family, seed, scenario.name, scenario.cause, scenario.variant, onset, healthy_steps)
    for t in result.transitions:
        if t.to_state == "firing" and severity.get(t.rule) in PAGE_SEVERITIES:
            out.pages.append(Page(t.rule, t.step, t.time, t.top_cause))
    if scenario.cause is None:
        out.false_pages = list(out.pages)
        return out
    after: list[Page] = []
    for p in out.pages:
        if (p.time > scenario.silent_from) if died else (p.step >= onset):
            after.append(p)
        else:
            out.false_pages.append(p)
    if not after:
        return out
    key = (lambda p: p.time) if died else (lambda p: p.step)
    first = min(key(p) for p in after)
    out.first = [p for p in after if key(p) == first]
    right = [p for p in after if p.top_cause == scenario.cause]
    if not right:
        return out
    hit = min(right, key=key)
    if died:
        step_s = series.get("step_s") or {}
        interval = statistics.median(step_s.values()) if step_s else None
        if not interval or not math.isfinite(interval) or interval <= 0:
            times = sorted(scenario.times.values())
            interval = statistics.median(b - a for a, b in zip(times, times[1:])) if len(times) > 1 else 10.0
        out.delay = round((hit.time - scenario.silent_from) / interval, 1)
        out.delay_s = round(hit.time - scenario.silent_from, 1)
    else:
        out.delay = float(hit.step - onset)
        if scenario.symptom:
            pts = series.get(scenario.symptom, {})
            out.evals = sum(1 for s in pts if onset <= s <= hit.step)
    return out


# -- summaries ------------------------------------------------------------------------------


def _p90(xs: list[float]) -> float | None:
    if not xs:
        return None
    ys = sorted(xs)
    return ys[min(len(ys) - 1, math.ceil(0.9 * len(ys)) - 1)]


def _ratio(a: int, b: int) -> float | None:
    return round(a / b, 3) if b else None


def summarise(outcomes: list[Outcome]) -> dict:
    healthy = [o for o in outcomes if o.cause is None]
    faults = [o for o in outcomes if o.cause is not None]
    healthy_steps = sum(o.healthy_steps for o in outcomes)
    per_cause: dict[str, dict] = {}
    for cause in CAUSES:
        runs = [o for o in faults if o.cause == cause]
        if not runs:
            continue
        detected = [o for o in runs if o.detected]
        delays = [o.delay for o in runs if o.delay is not None]
        evals = [o.evals for o in runs if o.evals is not None]
        per_cause[cause] = {
            "runs": len(runs),
            "recall": _ratio(sum(o.recalled for o in runs), len(runs)),
            "top_cause": _ratio(sum(o.top_right for o in detected), len(detected)),
            "pre_onset_alarm_runs": sum(bool(o.false_pages) for o in runs),
            "median_delay_steps": statistics.median(delays) if delays else None,
            "p90_delay_steps": _p90(delays),
            "median_delay_evals": statistics.median(evals) if evals else None,
            "p90_delay_evals": _p90([float(e) for e in evals]),
            "within_evals": (sum(1 for o in runs if o.evals is not None and o.evals <= SPARSE_EVALS)
                             if cause in SPARSE else None),
        }
        silent = [o.delay_s for o in runs if o.delay_s is not None]
        if silent:
            per_cause[cause]["median_delay_minutes"] = round(statistics.median(silent) / 60, 1)
            per_cause[cause]["p90_delay_minutes"] = round(_p90(silent) / 60, 1)
    by_rule: dict[str, int] = {}
    for o in outcomes:
        for p in o.false_pages:
            by_rule[p.rule] = by_rule.get(p.rule, 0) + 1
    false_pages = sum(by_rule.values())
    delays = [o.delay for o in faults if o.delay is not None]
    detected = [o for o in faults if o.detected]
    sparse_runs = [o for o in faults if o.cause in SPARSE]
    overall = {
        "runs": len(outcomes),
        "healthy_runs": len(healthy),
        "fault_runs": len(faults),
        "healthy_steps": healthy_steps,
        "recall": _ratio(sum(o.recalled for o in faults), len(faults)),
        "top_cause": _ratio(sum(o.top_right for o in detected), len(detected)),
        "false_alarm_runs": sum(bool(o.false_pages) for o in healthy),
        "pre_onset_alarm_runs": sum(bool(o.false_pages) for o in faults),
        "false_pages": false_pages,
        "false_pages_per_10k_steps": round(false_pages * 10_000 / healthy_steps, 3) if healthy_steps else None,
        "false_pages_per_10k_steps_by_rule": {r: round(n * 10_000 / healthy_steps, 3) for r, n in sorted(by_rule.items())},
        "median_delay_steps": statistics.median(delays) if delays else None,
        "p90_delay_steps": _p90(delays),
        "sparse_within_evals": _ratio(sum(1 for o in sparse_runs if o.evals is not None and o.evals <= SPARSE_EVALS),
                                      len(sparse_runs)),
    }
    overall["targets_met"] = bool(
        faults
        and (overall["recall"] or 0) >= TARGETS["recall"]
        and (overall["top_cause"] or 0) >= TARGETS["top_cause"]
        and overall["false_alarm_runs"] == 0
        and overall["pre_onset_alarm_runs"] == 0
        and overall["median_delay_steps"] is not None
        and overall["median_delay_steps"] <= TARGETS["median_delay_steps"]
        and (not sparse_runs or overall["sparse_within_evals"] == 1.0)
    )
    return {"overall": overall, "per_cause": per_cause}


def misses(outcomes: list[Outcome]) -> list[dict]:
    return [o.brief() for o in outcomes
            if o.false_pages or (o.cause is not None and not (o.recalled and o.top_right))
            or (o.cause in SPARSE and (o.evals is None or o.evals > SPARSE_EVALS))]


# -- running it -----------------------------------------------------------------------------

_WORKER_RULES: list[Rule] | None = None


def _init_worker(rule_files: list[str], include_default: bool) -> None:
    global _WORKER_RULES
    _WORKER_RULES = load_rules([Path(p) for p in rule_files], include_default=include_default)


def _score_job(job: tuple[Scenario, int]) -> Outcome:
    assert _WORKER_RULES is not None
    return score(job[0], _WORKER_RULES, seed=job[1])


def resolve_seeds(spec: str) -> tuple[int, ...]:
    if spec == "heldout":
        return HELDOUT_SEEDS
    if spec == "tuning":
        return TUNING_SEEDS
    try:
        return tuple(int(x) for x in spec.split(",") if x.strip())
    except ValueError:
        raise SystemExit(f"--seeds: 'heldout', 'tuning' or comma-separated integers, not {spec!r}") from None


def run_suite(
    *,
    family_names: Sequence[str] | None = None,
    seeds: Sequence[int] = HELDOUT_SEEDS,
    healthy: int | None = None,
    per_cause: int | None = None,
    rule_files: Sequence[str] = (),
    include_default: bool = True,
    jobs: int = 2,
) -> tuple[dict, list[Outcome]]:
    started = time.perf_counter()
    available = families()
    names = list(family_names or available)
    unknown = [n for n in names if n not in available]
    if unknown:
        raise SystemExit(f"unknown family {unknown[0]!r}; one of {', '.join(available)}")
    work: list[tuple[Scenario, int]] = []
    for name in names:
        h, p = SIZES.get(name, (40, 8))
        for seed in seeds:
            made = available[name](seed, healthy=h if healthy is None else healthy,
                                   per_cause=p if per_cause is None else per_cause)
            for sc in made:
                sc.family = sc.family or name
            # half the runs report through the client, whose heartbeats say the process lives; a trainer
            # that hangs (the independent family's hang variants) keeps its process, and its heartbeats, alive
            for sc in assign_heartbeats(made, seed, hung=lambda sc: "hang" in sc.variant):
                work.append((sc, seed))
    generated = time.perf_counter()
    if jobs > 1 and len(work) > 8:
        with ProcessPoolExecutor(jobs, initializer=_init_worker, initargs=(list(rule_files), include_default)) as pool:
            outcomes = list(pool.map(_score_job, work, chunksize=4))
    else:
        rules = load_rules([Path(p) for p in rule_files], include_default=include_default)
        outcomes = [score(sc, rules, seed=seed) for sc, seed in work]
    report: dict = {"seeds": list(seeds), "families": {}}
    for name in names:
        report["families"][name] = summarise([o for o in outcomes if o.family == name])
    report["all"] = summarise(outcomes)
    report["targets"] = TARGETS
    report["targets_met"] = all(f["overall"]["targets_met"] for f in report["families"].values())
    report["misses"] = misses(outcomes)
    report["rules"] = [r.name for r in load_rules([Path(p) for p in rule_files], include_default=include_default)]
    report["seconds"] = {"generate": round(generated - started, 1), "total": round(time.perf_counter() - started, 1)}
    return report, outcomes


# -- output ---------------------------------------------------------------------------------


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:g}"


def _table(console, title: str, summary: dict) -> None:
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for col in ("fault", "runs", f"recall@{RECALL_STEPS}", "right top cause", "pre-onset alarm runs",
                "median delay", "p90 delay", "median evals", "p90 evals", f"within {SPARSE_EVALS} evals"):
        t.add_column(col, justify="left" if col == "fault" else "right", no_wrap=col == "fault")
    for cause, row in summary["per_cause"].items():
        if "median_delay_minutes" in row:
            cause = f"{cause} ({row['median_delay_minutes']:g}/{row['p90_delay_minutes']:g} min)"
        t.add_row(cause, str(row["runs"]), _pct(row["recall"]), _pct(row["top_cause"]), str(row["pre_onset_alarm_runs"]),
                  _num(row["median_delay_steps"]), _num(row["p90_delay_steps"]), _num(row["median_delay_evals"]),
                  _num(row["p90_delay_evals"]),
                  "-" if row["within_evals"] is None else f"{row['within_evals']}/{row['runs']}")
    o = summary["overall"]
    t.add_row("[b]all faults[/b]", str(o["fault_runs"]), _pct(o["recall"]), _pct(o["top_cause"]),
              str(o["pre_onset_alarm_runs"]), _num(o["median_delay_steps"]), _num(o["p90_delay_steps"]), "", "",
              _pct(o["sparse_within_evals"]))
    console.print(t)
    rules = ", ".join(f"{r} {v:g}" for r, v in o["false_pages_per_10k_steps_by_rule"].items()) or "none"
    verdict = "[green]targets met[/green]" if o["targets_met"] else "[red]targets missed[/red]"
    console.print(f"  healthy runs {o['healthy_runs']}, with a false alarm: {o['false_alarm_runs']}; "
                  f"false pages per 10,000 healthy steps: {_num(o['false_pages_per_10k_steps'])} ({rules}); {verdict}")


def table(report: dict) -> None:
    from rich.console import Console
    from rich.markup import escape

    console = Console(width=max(Console().width, 140))
    seeds = ",".join(str(s) for s in report["seeds"])
    for name, summary in report["families"].items():
        _table(console, f"Family {name} (seeds {seeds})", summary)
    _table(console, f"All families (seeds {seeds}; {report['seconds']['total']} s)", report["all"])
    tg = report["targets"]
    console.print(f"targets per family: recall >= {tg['recall']:.0%}, right top cause >= {tg['top_cause']:.0%}, "
                  f"no false-alarm run, median delay <= {tg['median_delay_steps']} steps, sparse faults within "
                  f"{tg['sparse_within_evals']} evaluations: " + ("[green]met[/green]" if report["targets_met"] else "[red]missed[/red]"))
    for m in report["misses"][:40]:
        console.print(escape(f"  miss [{m['family']} {m['seed']}] {m['scenario']} ({m['variant']}): delay {m['delay']}, "
                             f"evals {m['evals']}, first {m['first']}, false pages {m['false_pages']}"))
    if len(report["misses"]) > 40:
        console.print(f"  ... and {len(report['misses']) - 40} more in the JSON")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m parallax.alerts.eval", description=__doc__.split("\n\n")[0])
    p.add_argument("--family", action="append", default=[], help="a family (default: all of them)")
    p.add_argument("--seeds", default="heldout", help="'heldout' (default), 'tuning', or seeds: 3,4,5")
    p.add_argument("--healthy", type=int, help="healthy runs per family and seed (default: the family's size)")
    p.add_argument("--per-cause", type=int, help="fault runs per cause id, family and seed")
    p.add_argument("--rules", action="append", default=[], help="a rule file used beside the default pack")
    p.add_argument("--no-default", action="store_true", help="leave the built-in pack out")
    p.add_argument("--jobs", type=int, default=2, help="processes replaying runs (default 2)")
    p.add_argument("--json", type=Path, help="also write the JSON report here")
    p.add_argument("--strict", action="store_true", help="exit 1 when the targets are missed")
    args = p.parse_args(argv)
    report, _ = run_suite(family_names=args.family or None, seeds=resolve_seeds(args.seeds), healthy=args.healthy,
                          per_cause=args.per_cause, rule_files=args.rules, include_default=not args.no_default,
                          jobs=args.jobs)
    doc = json.dumps(report, indent=2)
    print(doc)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(doc + "\n")
    table(report)
    return 1 if args.strict and not report["targets_met"] else 0


if __name__ == "__main__":
    sys.exit(main())
