"""How early any detector could have found each reward-hacking run of a draw (``python -m parallax.alerts.oracle``).

The evaluation suite asks every fault that only sparse evaluations show to be paged within 2 evaluations of its
onset (``alerts.eval``). Whether that is possible for a given run depends on how much the fault has shown by then,
which this module measures for reward hacking with an oracle that knows what no rule can:

- **the exploit's own effect.** The family draws the same run again without the exploit, every random draw the
  same (``generate(..., reward_effect=False)``: the synthetic and independent families); at each evaluation from
  the onset, the difference of the two runs' train/held-out gaps (the training reward's mean over the points since
  the evaluation before, at most 10 of them, as the rules read it, less the held-out score) is the
  exploit's effect with the noise cancelled;
- **the gap's noise**, read from the whole run without the exploit: its evaluations' robust point-to-point
  noise (the median absolute deviation of successive differences, over sqrt 2);
- **the onset and the effect's shape.** Knowing them, the best test of the evaluations so far is the matched
  filter (Neyman-Pearson for a known signal in Gaussian noise): its statistic stands ``sqrt(sum z_i^2)`` of its
  sigmas from zero, ``z_i`` the effect at evaluation i in the gap's sigmas - where the gap widens: an
  over-optimised run's held-out score that first rises narrows it, and a test that paged a held-out score for
  rising would page every run that learns.

The oracle finds the run by evaluation j when that evidence reaches the level a test held to the pack's budget
needs (one page per 10,000 healthy steps: a chance of ``1e-4 x spacing`` per evaluation, ``z_alpha``), with a
chance of ``Phi(evidence - z_alpha)``. A rule knows neither the onset (it tests every evaluation as a possible
one), nor the shape, nor the noise (it reads it from the run's evaluations so far, a few of them in a run evaluated
30-50 steps apart): the oracle's count bounds what any rule held to the budget finds within 2 evaluations. The toy
family is left out: its exploit is a mechanism of a real loop, whose run without it draws other noise from the
onset on, so the difference of the two runs is not the exploit's effect.

Prints, per family, the reward-hacking runs, how many the pack found within 2 evaluations, how many the oracle
finds (evidence at the 2nd evaluation past z_alpha) and its expected count, and the runs the oracle finds that
the pack does not.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Sequence

from parallax.alerts.engine import SeriesContext
from parallax.alerts.eval import RECALL_STEPS, SIZES, SPARSE_EVALS, canonical_series, score
from parallax.alerts.expr.parse import parse_expr
from parallax.alerts.rules import load_rules
from parallax.alerts.suites import HELDOUT_SEEDS, Scenario, assign_heartbeats, families

CAUSE = "reward_hacking"
FAMILIES = ("synthetic", "independent")  # those that can draw a run again without its exploit
BUDGET_PER_STEP = 1e-4  # the pack's budget: at most one page per 10,000 healthy steps per rule
_N = NormalDist()
_GAP = parse_expr("last(reward_train - reward_heldout)")


@dataclass
class Ceiling:
    family: str
    seed: int
    scenario: str
    variant: str
    onset: int
    spacing: float  # steps between evaluations (median)
    sigma: float  # the gap's noise, from the run without the exploit
    steps: list[int]  # the evaluations from the onset
    z: list[float]  # the exploit's effect at each of them, in sigmas
    evidence: list[float]  # sqrt(sum z_i^2) up to each evaluation
    z_alpha: float
    oracle_evals: int | None  # the evaluation (1-based, from the onset) by which the evidence reaches z_alpha
    pack_evals: int | None  # the evaluation of the pack's first page naming reward hacking (None: none in 60 steps)

    @property
    def oracle_delay(self) -> int | None:
        """Steps from the onset to the evaluation by which the oracle finds the run."""
        return None if self.oracle_evals is None else self.steps[self.oracle_evals - 1] - self.onset

    @property
    def oracle_chance(self) -> float:
        """The oracle's chance of finding the run within SPARSE_EVALS evaluations."""
        e = self.evidence[min(SPARSE_EVALS, len(self.evidence)) - 1] if self.evidence else 0.0
        return _N.cdf(e - self.z_alpha)


def gaps(series: dict[str, dict[int, float]]) -> dict[int, float]:
    """The train/held-out gap at each evaluation, read as the rules read it (``reward_train - reward_heldout``: the
    training reward's mean since the evaluation before, at most its last 10 points, less the held-out score)."""
    pair: dict[str, tuple[list[int], list[float]]] = {}
    for m in ("reward_train", "reward_heldout"):
        points = series.get(m)
        if points:
            steps = sorted(points)
            pair[m] = (steps, [points[s] for s in steps])
    out: dict[int, float] = {}
    for e in pair.get("reward_heldout", ([], []))[0]:
        gap = _GAP.evaluate(SeriesContext(pair, step=e))
        if gap is not None:
            out[e] = gap
    return out


def robust_noise(values: Sequence[float]) -> float | None:
    """Point-to-point noise: the median absolute deviation of successive differences, as a sigma, over sqrt 2."""
    d = [b - a for a, b in zip(values, values[1:])]
    if len(d) < 3:
        return None
    m = statistics.median(d)
    return statistics.median(abs(x - m) for x in d) / 0.6745 / math.sqrt(2)


def ceiling(faulty: Scenario, without: Scenario, *, seed: int, pack_evals: int | None) -> Ceiling | None:
    """The oracle's evidence for one run, from the run and the same run drawn without its exploit."""
    gf, gc = gaps(canonical_series(faulty)), gaps(canonical_series(without))
    evals = sorted(gc)
    sigma = robust_noise([gc[e] for e in evals])
    if not sigma or faulty.onset is None:
        return None
    spacing = statistics.median(b - a for a, b in zip(evals, evals[1:]))
    after = [e for e in evals if e >= faulty.onset and e in gf]
    z = [(gf[e] - gc[e]) / sigma for e in after]
    evidence = [math.sqrt(sum(max(0.0, v) ** 2 for v in z[: i + 1])) for i in range(len(z))]
    z_alpha = _N.inv_cdf(1 - min(0.5, BUDGET_PER_STEP * spacing))
    found = next((i + 1 for i, e in enumerate(evidence) if e >= z_alpha), None)
    return Ceiling(faulty.family, seed, faulty.name, faulty.variant, faulty.onset, spacing, sigma, after,
                   [round(v, 3) for v in z], [round(v, 3) for v in evidence], round(z_alpha, 3), found, pack_evals)


def _job(args: tuple[str, int, str | None]) -> list[Ceiling]:
    family, seed, rules_file = args
    rules = load_rules([rules_file], include_default=False) if rules_file else load_rules()
    healthy, per_cause = SIZES[family]
    generate = families()[family]
    made = assign_heartbeats(generate(seed, healthy=healthy, per_cause=per_cause), seed,
                             hung=lambda sc: "hang" in sc.variant)
    without = {sc.name: sc for sc in generate(seed, healthy=healthy, per_cause=per_cause, reward_effect=False)}
    out = []
    for sc in made:
        if sc.cause != CAUSE:
            continue
        outcome = score(sc, rules, seed=seed)
        c = ceiling(sc, without[sc.name], seed=seed, pack_evals=outcome.evals if outcome.recalled else None)
        if c is not None:
            out.append(c)
    return out


def measure(family_names: Sequence[str], seeds: Sequence[int], *, rules_file: str | None = None,
            jobs: int = 1) -> list[Ceiling]:
    work = [(f, s, rules_file) for f in family_names for s in seeds]
    if jobs > 1 and len(work) > 1:
        with ProcessPoolExecutor(jobs) as pool:
            parts = list(pool.map(_job, work))
    else:
        parts = [_job(w) for w in work]
    return [c for part in parts for c in part]


def summarise(ceilings: list[Ceiling]) -> dict:
    def within(evals: int | None) -> bool:
        return evals is not None and evals <= SPARSE_EVALS

    out: dict = {}
    for family in sorted({c.family for c in ceilings}) + ["all"]:
        runs = [c for c in ceilings if family in ("all", c.family)]
        oracle = [c for c in runs if within(c.oracle_evals)]
        out[family] = {
            "runs": len(runs),
            "pack_within": sum(within(c.pack_evals) for c in runs),
            "oracle_within": len(oracle),
            "oracle_expected": round(sum(c.oracle_chance for c in runs), 1),
            "pack_within_of_oracle": sum(within(c.pack_evals) for c in oracle),
            "pack_recall": sum(c.pack_evals is not None for c in runs),
            "oracle_recall": sum(c.oracle_delay is not None and c.oracle_delay <= RECALL_STEPS for c in runs),
            "weak_evidence": sum(1 for c in runs if c.oracle_chance < 0.07),  # 1.5 sigma short of z_alpha
            "oracle_not_pack": [c.scenario for c in oracle if not within(c.pack_evals)],
        }
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m parallax.alerts.oracle", description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", default=",".join(FAMILIES), help="comma-separated: synthetic, independent")
    ap.add_argument("--seeds", default=",".join(map(str, HELDOUT_SEEDS)), help="comma-separated seeds")
    ap.add_argument("--rules", default=None, help="a rule file instead of the default pack")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--json", default=None, help="write every run's figures there")
    a = ap.parse_args(argv)
    names = [f for f in a.family.split(",") if f]
    bad = [f for f in names if f not in FAMILIES]
    if bad:
        ap.error(f"unknown family {bad[0]!r}: the oracle draws runs again without their exploit in "
                 f"{', '.join(FAMILIES)} only")
    try:
        seeds = [int(s) for s in a.seeds.split(",") if s]
    except ValueError:
        ap.error(f"--seeds: comma-separated integers, not {a.seeds!r}")
    ceilings = measure(names, seeds, rules_file=a.rules, jobs=a.jobs)
    summary = summarise(ceilings)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"summary": summary, "runs": [asdict(c) for c in ceilings]}, fh, indent=1)
    print(f"reward hacking, seeds {','.join(map(str, seeds))}: runs found within {SPARSE_EVALS} evaluations of the "
          f"onset and within {RECALL_STEPS} steps, by the pack and by the oracle")
    head = ("family", "runs", "2 evals: pack", "oracle", "oracle expected", "pack of oracle's", "weak",
            f"{RECALL_STEPS} steps: pack", "oracle")
    print(" | ".join([head[0].ljust(11), *head[1:]]))
    for family, s in summary.items():
        row = (family, s["runs"], s["pack_within"], s["oracle_within"], s["oracle_expected"],
               s["pack_within_of_oracle"], s["weak_evidence"], s["pack_recall"], s["oracle_recall"])
        print(" | ".join([family.ljust(11)] + [str(v).rjust(len(h)) for v, h in zip(row[1:], head[1:])]))
    print("weak: the oracle's chance of finding the run within 2 evaluations is under 7% (its evidence 1.5 sigma "
          "short of z_alpha)")
    missed = summary["all"]["oracle_not_pack"]
    print("found by the oracle within 2 evaluations, not by the pack: " + (", ".join(missed) if missed else "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
