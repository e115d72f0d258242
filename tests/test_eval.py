"""A small, fast run of the rule evaluation suite (`make eval` runs the full one)."""

from __future__ import annotations

import json

from alerts.eval import SPARSE_EVALS, WINDOW, main, run_suite
from alerts.suites.synthetic import CAUSES, SPARSE_SYMPTOM, generate


def test_the_default_pack_meets_the_targets_on_a_small_suite():
    report, outcomes = run_suite(seed=11, healthy=16, per_cause=3)
    overall = report["overall"]
    assert overall["healthy_runs"] == 16 and overall["fault_runs"] == 3 * len(CAUSES)
    assert overall["false_alarm_runs"] == 0, report["misses"]
    assert overall["pre_onset_alarm_runs"] == 0, report["misses"]
    assert overall["top1_accuracy"] == 1.0, report["misses"]
    for cause, row in report["per_cause"].items():
        if cause in SPARSE_SYMPTOM:
            # only the next evaluation can show it: by the 2nd evaluation after the onset
            assert row["sparse_hits"] == row["runs"], (cause, report["misses"])
            assert row["max_evals_to_detect"] <= SPARSE_EVALS
        else:
            assert row["hits"] == row["runs"], (cause, report["misses"])
            assert row["max_delay_steps"] <= WINDOW
    assert report["targets_met_counting_evaluations"]
    assert all(o.cause is None or o.first for o in outcomes)


def test_scenarios_are_seeded_and_labelled():
    a, b = generate(5, healthy=3, per_cause=1), generate(5, healthy=3, per_cause=1)
    same = lambda runs: repr([(s.name, s.series, s.times, s.config, s.events) for s in runs])  # noqa: E731 - NaN-safe
    assert same(a) == same(b)
    assert same(generate(6, healthy=3, per_cause=1)) != same(a)
    assert {s.cause for s in a} == {None, *CAUSES}
    for s in a:
        assert (s.onset is None) == (s.cause is None)
        assert set(s.times) >= {st for pts in s.series.values() for st in pts}
        if s.cause == "trainer_silent":
            assert s.silent_from is not None and s.last_step < s.onset


def test_main_prints_json_then_a_table(tmp_path, capsys):
    out = tmp_path / "eval.json"
    assert main(["--seed", "3", "--healthy", "2", "--per-cause", "1", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    doc = json.loads(printed[: printed.index("\n}\n") + 2])
    assert doc == json.loads(out.read_text())
    assert set(doc) >= {"overall", "per_cause", "targets", "targets_met", "misses", "seed", "rules"}
    assert "Rule evaluation suite" in printed
