"""The rule evaluation suite: labelled simulated runs through the rules (``make eval``).

    .venv/bin/python -m alerts.eval [--seed 0] [--healthy 50] [--per-cause 8] [--earliest-onset 90]
                                    [--rules FILE]... [--no-default] [--json PATH] [--strict]

Every scenario of :mod:`alerts.scenarios` is replayed step by step through
:func:`alerts.engine.replay`, as incremental ingest would evaluate it, and
scored:

- a healthy run with any alert firing is a false-alarm run;
- a fault run is *detected* when an alert fires at or after the onset (for
  ``trainer_silent``: after the run stopped reporting); its *delay* is the
  steps from the onset to that first alert (for ``trainer_silent``: the
  silence until it fired, in the run's step times);
- the *top-1 cause* is right when every alert that fired first names the
  fault's cause id first;
- a *hit* is right top-1 cause within ``--window`` (10) steps of the onset;
- an alert firing before the onset of a fault run is a false alarm too.

Exploration collapse and reward hacking show in sparse evaluations (pass@k,
held-out reward every 5-50 steps): no rule can see them before the next
evaluation, so their detection is also counted in evaluations (the symptom
metric's points from the onset to the alert); ``sparse_hits`` counts those
detected with the right cause by the 2nd evaluation after the onset.

Healthy replays stop at their last step: the replay's timer after the end of
data is not a silence (a finished run is not evaluated on a timer).

Prints a JSON document (also written to ``--json``), then a table. Exit code 0
whether or not the targets are met (``--strict``: 1 when they are not).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from alerts.engine import replay
from alerts.rules import Rule, load_rules
from alerts.suites.synthetic import CAUSES, Scenario, generate

WINDOW = 10  # steps from onset to firing, the target
SPARSE_EVALS = 2  # evaluations after the onset for faults only sparse metrics show
TARGETS = {"recall": 1.0, "top1_accuracy": 1.0, "false_alarm_runs": 0, "max_delay_steps": WINDOW}


@dataclass
class Fired:
    rule: str
    step: int
    time: float
    top_cause: str | None


@dataclass
class Outcome:
    scenario: str
    cause: str | None
    variant: str
    onset: int | None
    fired: list[Fired] = field(default_factory=list)
    pre_onset: list[Fired] = field(default_factory=list)
    first: list[Fired] = field(default_factory=list)  # the alerts that fired first at/after the onset
    delay: float | None = None
    evals: int | None = None  # sparse faults: evaluations from the onset to the alert

    @property
    def sparse_hit(self) -> bool:
        """Right cause, within the window or (sparse faults) by the SPARSE_EVALS-th evaluation."""
        return self.top1 and (self.in_time or (self.evals is not None and self.evals <= SPARSE_EVALS))

    @property
    def detected(self) -> bool:
        return bool(self.first)

    @property
    def in_time(self) -> bool:
        return self.delay is not None and self.delay <= WINDOW

    @property
    def top1(self) -> bool:
        return bool(self.first) and all(f.top_cause == self.cause for f in self.first)

    @property
    def hit(self) -> bool:
        return self.in_time and self.top1

    def brief(self) -> dict:
        return {
            "scenario": self.scenario,
            "cause": self.cause,
            "variant": self.variant,
            "onset": self.onset,
            "delay": self.delay,
            "evals": self.evals,
            "first": [(f.rule, f.top_cause) for f in self.first],
            "pre_onset": [(f.rule, f.step, f.top_cause) for f in self.pre_onset],
            "fired": [(f.rule, f.step, f.top_cause) for f in self.fired[:6]],
        }


def score(scenario: Scenario, rules: list[Rule]) -> Outcome:
    result = replay(
        rules,
        scenario.series,
        times=scenario.times,
        config=scenario.config,
        events=scenario.events,
        silent_from=scenario.silent_from,
    )
    end = scenario.times[scenario.last_step]
    out = Outcome(scenario.name, scenario.cause, scenario.variant, scenario.onset)
    for t in result.transitions:
        if t.to_state != "firing":
            continue
        if scenario.silent_from is None and t.time > end:
            continue  # the replay's timer after the data ended: the run finished, it did not go silent
        out.fired.append(Fired(t.rule, t.step, t.time, t.top_cause))
    if scenario.cause is None:
        return out
    silent = scenario.silent_from is not None
    after: list[Fired] = []
    for f in out.fired:
        if (f.time > scenario.silent_from) if silent else (f.step >= scenario.onset):
            after.append(f)
        else:
            out.pre_onset.append(f)
    if after:
        key = (lambda f: f.time) if silent else (lambda f: f.step)
        first = min(key(f) for f in after)
        out.first = [f for f in after if key(f) == first]
        if silent:
            interval = statistics.median(scenario.series["step_s"].values()) if scenario.series.get("step_s") else 10.0
            out.delay = round((first - scenario.silent_from) / interval, 1)
        else:
            out.delay = float(first - scenario.onset)
            if scenario.symptom:
                pts = scenario.series.get(scenario.symptom, {})
                out.evals = sum(1 for s in pts if scenario.onset <= s <= first)
    return out


def summarise(outcomes: list[Outcome]) -> dict:
    healthy = [o for o in outcomes if o.cause is None]
    faults = [o for o in outcomes if o.cause is not None]
    per_cause: dict[str, dict] = {}
    for cause in CAUSES:
        runs = [o for o in faults if o.cause == cause]
        if not runs:
            continue
        delays = [o.delay for o in runs if o.delay is not None]
        detected = [o for o in runs if o.detected]
        per_cause[cause] = {
            "runs": len(runs),
            "recall": round(sum(o.in_time for o in runs) / len(runs), 3),
            "recall_any_delay": round(len(detected) / len(runs), 3),
            "top1_accuracy": round(sum(o.top1 for o in detected) / len(detected), 3) if detected else None,
            "hits": sum(o.hit for o in runs),
            "sparse_hits": sum(o.sparse_hit for o in runs),
            "max_evals_to_detect": max((o.evals for o in runs if o.evals is not None), default=None),
            "median_delay_steps": statistics.median(delays) if delays else None,
            "max_delay_steps": max(delays) if delays else None,
            "pre_onset_alarm_runs": sum(bool(o.pre_onset) for o in runs),
        }
    delays = [o.delay for o in faults if o.delay is not None]
    detected = [o for o in faults if o.detected]
    by_rule: dict[str, int] = {}
    for o in healthy:
        for f in o.fired:
            by_rule[f.rule] = by_rule.get(f.rule, 0) + 1
    overall = {
        "fault_runs": len(faults),
        "healthy_runs": len(healthy),
        "recall": round(sum(o.in_time for o in faults) / len(faults), 3) if faults else None,
        "top1_accuracy": round(sum(o.top1 for o in detected) / len(detected), 3) if detected else None,
        "hit_rate": round(sum(o.hit for o in faults) / len(faults), 3) if faults else None,
        "sparse_hit_rate": round(sum(o.sparse_hit for o in faults) / len(faults), 3) if faults else None,
        "median_delay_steps": statistics.median(delays) if delays else None,
        "max_delay_steps": max(delays) if delays else None,
        "false_alarm_runs": sum(bool(o.fired) for o in healthy),
        "false_alarms_by_rule": by_rule,
        "pre_onset_alarm_runs": sum(bool(o.pre_onset) for o in faults),
    }
    met = bool(
        faults
        and overall["hit_rate"] == 1.0
        and overall["false_alarm_runs"] == 0
        and overall["pre_onset_alarm_runs"] == 0
    )
    met_sparse = bool(
        faults
        and overall["sparse_hit_rate"] == 1.0
        and overall["false_alarm_runs"] == 0
        and overall["pre_onset_alarm_runs"] == 0
    )
    misses = [o.brief() for o in outcomes if (o.cause is None and o.fired) or (o.cause is not None and (not o.hit or o.pre_onset))]
    return {"overall": overall, "per_cause": per_cause, "targets": TARGETS, "targets_met": met,
            "targets_met_counting_evaluations": met_sparse, "misses": misses}


def run_suite(
    *,
    seed: int = 0,
    healthy: int = 50,
    per_cause: int = 8,
    rules: list[Rule] | None = None,
    earliest_onset: int = 90,
) -> tuple[dict, list[Outcome]]:
    rules = rules if rules is not None else load_rules()
    started = time.perf_counter()
    scenarios = generate(seed, healthy=healthy, per_cause=per_cause, earliest_onset=earliest_onset)
    outcomes = [score(s, rules) for s in scenarios]
    report = summarise(outcomes)
    report["seed"] = seed
    report["rules"] = [r.name for r in rules]
    report["seconds"] = round(time.perf_counter() - started, 2)
    return report, outcomes


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def table(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 130))
    t = Table(title=f"Rule evaluation suite (seed {report['seed']}, {report['seconds']} s)")
    for col in ("cause", "runs", f"recall@{WINDOW}", "top-1", f"hits@{WINDOW}", f"hits@{WINDOW} or {SPARSE_EVALS} evals",
                "median delay", "max delay", "max evals", "pre-onset alarms"):
        t.add_column(col, justify="left" if col == "cause" else "right", no_wrap=col == "cause")
    for cause, row in report["per_cause"].items():
        t.add_row(cause, str(row["runs"]), _pct(row["recall"]), _pct(row["top1_accuracy"]), f"{row['hits']}/{row['runs']}",
                  f"{row['sparse_hits']}/{row['runs']}", str(row["median_delay_steps"]), str(row["max_delay_steps"]),
                  "-" if row["max_evals_to_detect"] is None else str(row["max_evals_to_detect"]),
                  str(row["pre_onset_alarm_runs"]))
    o = report["overall"]
    n = o["fault_runs"]
    t.add_row("[b]all faults[/b]", str(n), _pct(o["recall"]), _pct(o["top1_accuracy"]),
              f"{round((o['hit_rate'] or 0) * n)}/{n}", f"{round((o['sparse_hit_rate'] or 0) * n)}/{n}",
              str(o["median_delay_steps"]), str(o["max_delay_steps"]), "", str(o["pre_onset_alarm_runs"]))
    t.add_row(f"[b]healthy[/b]: {o['false_alarm_runs']} false-alarm runs", str(o["healthy_runs"]), "", "", "", "", "", "", "", "")
    console.print(t)
    goal = f"every fault detected within {WINDOW} steps with the right top cause, no alerts on healthy runs"
    if report["targets_met"]:
        console.print(f"[green]targets met[/green]: {goal}")
    elif report["targets_met_counting_evaluations"]:
        console.print(f"[yellow]targets met counting sparse faults by evaluations[/yellow] ({SPARSE_EVALS} evaluations "
                      f"after the onset): {goal}")
    else:
        console.print(f"[red]targets missed[/red]: {goal}")
    for m in report["misses"]:
        console.print(f"  miss: {m['scenario']} ({m['variant']}): delay {m['delay']}, evaluations {m['evals']}, "
                      f"first {m['first']}, before onset {m['pre_onset']}" + ("" if m["cause"] else f", fired {m['fired']}"))


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m alerts.eval", description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--healthy", type=int, default=50, help="healthy runs")
    p.add_argument("--per-cause", type=int, default=8, help="fault runs per cause id")
    p.add_argument("--earliest-onset", type=int, default=90, help="earliest step a fault may begin")
    p.add_argument("--rules", action="append", default=[], help="a rule file used beside the default pack")
    p.add_argument("--no-default", action="store_true", help="leave the built-in pack out")
    p.add_argument("--json", type=Path, help="also write the JSON report here")
    p.add_argument("--strict", action="store_true", help="exit 1 when the targets are missed")
    args = p.parse_args(argv)
    rules = load_rules(args.rules, include_default=not args.no_default)
    report, _ = run_suite(seed=args.seed, healthy=args.healthy, per_cause=args.per_cause, rules=rules,
                          earliest_onset=args.earliest_onset)
    doc = json.dumps(report, indent=2)
    print(doc)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(doc + "\n")
    table(report)
    return 1 if args.strict and not report["targets_met"] else 0


if __name__ == "__main__":
    sys.exit(main())
