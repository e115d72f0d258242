"""The rule evaluation suite (`make eval` runs it whole, on every family's held-out seeds)."""

from __future__ import annotations

import json
import math

from parallax.alerts.eval import SPARSE_EVALS, Outcome, Page, canonical_series, main, run_suite, score, summarise
from parallax.alerts.rules import load_rules
from parallax.alerts.suites import CAUSES, HELDOUT_SEEDS, TUNING_SEEDS, Scenario, T0
from parallax.alerts.suites.synthetic import SPARSE_SYMPTOM, generate


def test_tuning_and_heldout_seeds_never_overlap():
    assert TUNING_SEEDS and HELDOUT_SEEDS and not set(TUNING_SEEDS) & set(HELDOUT_SEEDS)


def test_the_default_pack_on_a_small_synthetic_suite_of_an_unseen_seed():
    report, outcomes = run_suite(family_names=["synthetic"], seeds=(4242,), healthy=12, per_cause=2, jobs=1)
    overall = report["families"]["synthetic"]["overall"]
    assert overall["healthy_runs"] == 12 and overall["fault_runs"] == 2 * len(CAUSES)
    assert overall["false_alarm_runs"] == 0, report["misses"]
    assert overall["pre_onset_alarm_runs"] == 0, report["misses"]
    assert overall["recall"] >= 0.9, report["misses"]
    assert overall["top_cause"] >= 0.9, report["misses"]
    for cause, row in report["families"]["synthetic"]["per_cause"].items():
        if cause in SPARSE_SYMPTOM:  # counted in evaluations too
            assert row["median_delay_evals"] is not None and row["median_delay_evals"] <= SPARSE_EVALS + 1, cause
    assert all(o.cause is None or o.first for o in outcomes)


def test_scenarios_are_seeded_and_labelled():
    a, b = generate(5, healthy=3, per_cause=1), generate(5, healthy=3, per_cause=1)
    same = lambda runs: repr([(s.name, s.series, s.times, s.config, s.events, s.end) for s in runs])  # noqa: E731
    assert same(a) == same(b)
    assert same(generate(6, healthy=3, per_cause=1)) != same(a)
    assert {s.cause for s in a} == {None, *CAUSES}
    for s in a:
        assert s.family == "synthetic"
        assert (s.onset is None) == (s.cause is None)
        assert set(s.times) >= {st for pts in s.series.values() for st in pts}
        if s.cause == "trainer_silent":
            assert s.silent_from is not None and s.last_step < s.onset
        if s.end == "total_steps":
            assert s.config["total_steps"] == s.last_step + 1


def _run(n: int, *, config: dict | None = None, end: str = "finished", silent_from: float | None = None,
         cause: str | None = None, onset: int | None = None) -> Scenario:
    steps = range(n)
    series = {"loss": {s: 0.5 for s in steps}, "step_s": {s: 10.0 for s in steps}}
    times = {s: T0 + 10.0 * (s + 1) for s in steps}
    return Scenario("r", "t", "v", cause, onset, series, times, config or {}, end=end, silent_from=silent_from)


def test_a_run_that_reaches_its_total_and_stops_is_not_a_silent_trainer():
    rules = load_rules()
    done = score(_run(100, config={"total_steps": 100}, end="total_steps"), rules)
    assert done.false_pages == [] and done.pages == []
    # framework spellings of the total count too (verl's nested trainer.total_training_steps)
    verl = score(_run(100, config={"trainer": {"total_training_steps": 100}}, end="total_steps"), rules)
    assert verl.pages == []
    # the same silence short of the total is a dead trainer, paged
    died = _run(60, config={"total_steps": 100}, cause="trainer_silent", onset=60, silent_from=T0 + 605.0)
    out = score(died, rules)
    assert [p.rule for p in out.first] == ["trainer_silent"] and out.top_right and out.recalled


def test_framework_keys_go_through_the_alias_table():
    steps = range(5)
    sc = Scenario("r", "t", "v", None, None, {"actor/entropy": {s: 1.0 for s in steps},
                                               "actor/pg_loss": {s: float("nan") if s == 3 else 0.1 for s in steps}},
                  {s: T0 + s for s in steps}, {"framework": "verl"})
    series = canonical_series(sc)
    assert series["entropy"] == {s: 1.0 for s in steps} and "actor/entropy" in series  # the raw key is kept
    assert math.isnan(series["actor/pg_loss"][3])
    canonical = Scenario("r", "t", "v", None, None, {"entropy": {0: 1.0}}, {0: T0}, {})
    assert canonical_series(canonical) is canonical.series


def test_summary_counts_false_pages_per_ten_thousand_healthy_steps_and_delays():
    quiet = Outcome("f", 0, "h1", None, "", None, healthy_steps=4000)
    noisy = Outcome("f", 0, "h2", None, "", None, healthy_steps=4000, pages=[Page("rollout_stall", 10, 0.0, "x")])
    noisy.false_pages = list(noisy.pages)
    fault = Outcome("f", 0, "e", "exploration_collapse", "", 100, healthy_steps=100)
    fault.first = [Page("exploration_collapse", 112, 0.0, "exploration_collapse")]
    fault.delay, fault.evals = 12.0, 2
    late = Outcome("f", 0, "e2", "exploration_collapse", "", 100, healthy_steps=100)
    late.first = [Page("reward_hacking", 190, 0.0, "reward_hacking")]  # wrong cause first, never the right one
    s = summarise([quiet, noisy, fault, late])
    o = s["overall"]
    assert o["healthy_steps"] == 8200 and o["false_pages"] == 1
    assert o["false_pages_per_10k_steps"] == round(10_000 / 8200, 3)
    assert o["false_alarm_runs"] == 1 and o["recall"] == 0.5 and o["top_cause"] == 0.5
    assert o["sparse_within_evals"] == 0.5 and not o["targets_met"]
    assert s["per_cause"]["exploration_collapse"]["median_delay_evals"] == 2


def test_main_prints_json_then_tables(tmp_path, capsys):
    out = tmp_path / "eval.json"
    assert main(["--family", "synthetic", "--seeds", "3", "--healthy", "2", "--per-cause", "1", "--jobs", "1",
                 "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    doc = json.loads(printed[: printed.index("\n}\n") + 2])
    assert doc == json.loads(out.read_text())
    assert set(doc) >= {"families", "all", "targets", "targets_met", "misses", "seeds", "rules"}
    assert "Family synthetic" in printed and "false pages per 10,000 healthy steps" in printed
