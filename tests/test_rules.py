"""Rule packs: loading, validation errors with file:line:col, evaluation with ranked causes,
and the built-in pack against its YAML unit tests and DESIGN §2."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from parallax.alerts.engine import replay, rule_config
from parallax.alerts.rules import (
    CAUSE_IDS,
    DEFAULT_PACK,
    Evaluation,
    RankedCause,
    Rule,
    RuleError,
    evaluate,
    load_pack_text,
    load_rules,
)

DEFAULT_TESTS = DEFAULT_PACK.with_name("default.test.yaml")


class Ctx:
    """An EvalContext over {metric: [values from step 0]} (None = no point, nan = non-finite)."""

    def __init__(self, series, *, step=None, config=None, since_report=0.0, since_resume=None, longest_pause=None,
                 heartbeat_age=None, report_interval=None, longest_pause_outside_evals=None):
        self.series = {
            m: [(i, v) for i, v in enumerate(vals) if v is not None] for m, vals in series.items()
        }
        self.step = step if step is not None else max((p[-1][0] for p in self.series.values() if p), default=0)
        self.config = config or {}
        self._since_report = since_report
        self._since_resume = since_resume
        self._longest_pause = longest_pause
        self._longest_other_pause = longest_pause_outside_evals
        self._heartbeat_age = heartbeat_age
        self._report_interval = report_interval
        self.fetches = 0

    def points(self, metric, n):
        self.fetches += 1
        pts = [(s, None if v is None or not math.isfinite(v) else v) for s, v in self.series.get(metric, []) if s <= self.step]
        return pts[-n:]

    def seconds_since_report(self):
        return self._since_report

    def steps_since_resume(self):
        return self._since_resume

    def longest_pause(self):
        return self._longest_pause

    def longest_pause_outside_evals(self):
        return self._longest_other_pause

    def heartbeat_age(self):
        return self._heartbeat_age

    def report_interval(self):
        return self._report_interval


def rules_by_name() -> dict[str, Rule]:
    return {r.name: r for r in load_rules()}


RULES = rules_by_name()


def run(rule: str, series, **kw) -> Evaluation | None:
    return evaluate(RULES[rule], Ctx(series, **kw))


# -- loading -----------------------------------------------------------------------


def test_default_pack_loads_and_covers_every_cause():
    rules = load_rules()
    assert [r.source for r in rules] == ["default"] * len(rules)
    named = {c.id for r in rules for c in r.causes}
    assert named == CAUSE_IDS
    assert len(CAUSE_IDS) == 8
    for r in rules:
        assert r.severity in ("critical", "warning", "info")
        assert r.causes, r.name
        assert r.summary, r.name
        assert r.metrics == frozenset(r.windows)
    assert {r.name for r in rules if r.on_timer} == {"trainer_silent"}
    assert RULES["importance_weight_spike"].hold_after_resume >= 10
    assert "importance_weight_max" in RULES["importance_weight_spike"].metrics


def test_every_default_rule_states_its_budget_and_its_effect():
    """Thresholds come from a stated false-alarm budget and a minimum effect with a physical meaning (issue #12)."""
    for r in load_rules():
        assert "Budget:" in r.description and "Effect" in r.description, r.name


def test_the_default_pack_passes_its_yaml_unit_tests():
    from parallax.alerts.ruletest import run_file

    outcomes = run_file(DEFAULT_TESTS)
    failed = [(o.name, o.failures) for o in outcomes if not o.ok]
    assert failed == []
    assert len(outcomes) >= 20


def test_every_rule_has_a_yaml_unit_test_that_fires_it():
    import yaml

    doc = yaml.safe_load(DEFAULT_TESTS.read_text())
    fired = {a["rule"] for case in doc["tests"] for e in case.get("expect", []) for a in e.get("firing") or []}
    fired |= {a["rule"] for case in doc["tests"] for a in case.get("expect_after_silence", [])}
    assert fired == set(RULES)
    quiet = [c for c in doc["tests"] if all(not e.get("firing") for e in c.get("expect", [])) and "expect_after_silence" not in c]
    assert len(quiet) >= 5  # healthy cases


MINIMAL = """
rules:
  - name: high_loss
    expr: last(loss) > 2
    for: 3
    keep_firing_for: 2
    severity: info
    labels: {team: rl, panel: loss}
    values:
      loss: last(loss)
    summary: "loss {loss:.2f} at step {step}"
    causes:
      - id: numerical_blowup
        score: clamp(last(loss) / 10, 0, 1)
        evidence: [last(loss), "max_over(loss, 5)"]
        advice: "loss is {loss:.1f}"
"""


def test_a_minimal_pack():
    (rule,) = load_pack_text(MINIMAL, "mine.yaml")
    assert rule.name == "high_loss"
    assert (rule.for_steps, rule.keep_firing_for, rule.severity) == (3, 2, "info")
    assert rule.labels == {"team": "rl", "panel": "loss"}
    assert rule.source == "mine.yaml"
    assert rule.metrics == {"loss"}
    assert rule.windows == {"loss": 5}
    assert not rule.on_timer
    assert rule.hold_after_resume == 0
    ev = evaluate(rule, Ctx({"loss": [1.0, 5.0, 3.0]}))
    assert ev == Evaluation(
        active=True,
        value=3.0,
        summary="loss 3.00 at step 2",
        causes=[
            RankedCause(
                id="numerical_blowup",
                score=0.3,
                evidence=[
                    {"expr": "last(loss)", "metric": "loss", "window": 1, "steps": [2, 2], "value": 3.0},
                    {"expr": "max_over(loss, 5)", "metric": "loss", "window": 5, "steps": [0, 2], "value": 5.0},
                ],
                advice="loss is 3.0",
            )
        ],
    )
    quiet = evaluate(rule, Ctx({"loss": [1.0]}))
    assert quiet == Evaluation(active=False, value=1.0, summary="", causes=[])
    assert evaluate(rule, Ctx({"other": [1.0]})) is None  # the metric is missing: inactive


def test_empty_rules_list_and_defaults():
    assert load_pack_text("rules: []", "x.yaml") == []
    assert load_pack_text("rules:", "x.yaml") == []
    (r,) = load_pack_text("rules:\n  - {name: a, expr: x > 1}\n", "x.yaml")
    assert (r.for_steps, r.keep_firing_for, r.severity, r.labels, r.causes, r.summary) == (0, 0, "warning", {}, (), "")


@pytest.mark.parametrize(
    "text, line, column, rule, fragment",
    [
        ("rules: [", 1, 9, None, "invalid YAML"),
        ("", None, None, None, "empty rule file"),
        ("- a\n", 1, 1, None, "mapping with a `rules:` list"),
        ("rules: []\ngroups: []\n", 2, 1, None, "unknown key 'groups'"),
        ("version: 1\n", 1, 1, None, "unknown key 'version'"),
        ("rules: {a: 1}\n", 1, 8, None, "must be a list"),
        ("rules:\n  - 3\n", 2, 5, None, "each rule is a mapping"),
        ("rules:\n  - {expr: x}\n", 2, 5, None, "no `name`"),
        ("rules:\n  - {name: 'bad name', expr: x}\n", 2, 12, None, "`name` must be"),
        ("rules:\n  - {name: a}\n", 2, 5, "a", "no `expr`"),
        ("rules:\n  - name: a\n    expr: x\n    fro: 3\n", 4, 5, "a", "unknown key 'fro'"),
        ("rules:\n  - name: a\n    expr: max_over(x, 5) >\n", 3, 27, "a", "syntax error"),
        ("rules:\n  - name: a\n    expr: last(x) > 1 and foo(x)\n", 3, 27, "a", "unknown function 'foo'"),
        ("rules:\n  - name: a\n    expr: \"mean_over(x, n)\"\n", 3, 25, "a", "window length"),
        ("rules:\n  - name: a\n    expr: >-\n      last(x) > 1\n      and foo(x)\n", 5, 11, "a", "unknown function"),
        ("rules:\n  - name: a\n    expr: 3\n    for: -1\n", 4, 10, "a", "`for` must be"),
        ("rules:\n  - name: a\n    expr: x\n    for: 1.5\n", 4, 10, "a", "`for` must be"),
        ("rules:\n  - name: a\n    expr: x\n    severity: page\n", 4, 15, "a", "`severity` must be one of"),
        ("rules:\n  - name: a\n    expr: x\n    labels: [a]\n", 4, 13, "a", "`labels` must be a mapping"),
        ("rules:\n  - name: a\n    expr: x\n    labels: {a: {b: 1}}\n", 4, 17, "a", "label 'a' must be a string"),
        ("rules:\n  - name: a\n    expr: x\n    summary: 'x is {y}'\n", 4, 14, "a", "unknown name {y}"),
        ("rules:\n  - name: a\n    expr: x\n    summary: '{value.__class__}'\n", 4, 14, "a", "unknown name"),
        ("rules:\n  - name: a\n    expr: x\n    summary: '{value!r}'\n", 4, 14, "a", "conversions"),
        ("rules:\n  - name: a\n    expr: x\n    summary: '{value:>{step}}'\n", 4, 14, "a", "not a number format"),
        ("rules:\n  - name: a\n    expr: x\n    summary: '{'\n", 4, 14, "a", "invalid template"),
        ("rules:\n  - name: a\n    expr: x\n    values: {step: x}\n", 4, 14, "a", "invalid value name"),
        ("rules:\n  - name: a\n    expr: x\n    values: {v: 'foo('}\n", 4, 18, "a", "values.v: syntax error"),
        ("rules:\n  - name: a\n    expr: x\n    causes: [{id: bogus}]\n", 4, 19, "a", "unknown cause id 'bogus'"),
        ("rules:\n  - name: a\n    expr: x\n    causes: [{id: token_mismatch, weight: 1}]\n", 4, 35, "a",
         "unknown cause key 'weight'"),
        ("rules:\n  - name: a\n    expr: x\n    causes: [{score: 1}]\n", 4, 14, "a", "cause has no `id`"),
        ("rules:\n  - name: a\n    expr: x\n    causes:\n      - {id: token_mismatch}\n      - {id: token_mismatch}\n",
         6, 14, "a", "listed twice"),
        ("rules:\n  - name: a\n    expr: x\n    causes: [{id: token_mismatch, score: 'x +'}]\n", 4, 46, "a",
         "cause token_mismatch score: syntax error"),
        ("rules:\n  - name: a\n    expr: x\n    causes: [{id: token_mismatch, evidence: last(x)}]\n", 4, 45, "a",
         "`evidence` must be a list"),
        ("rules:\n  - name: a\n    expr: x\n    causes: [{id: token_mismatch, advice: '{nope}'}]\n", 4, 43, "a",
         "unknown name {nope}"),
        ("rules:\n  - name: a\n    expr: x\n  - name: a\n    expr: y\n", 4, 5, "a", "duplicate rule name"),
        ("rules:\n  - name: a\n    expr: x\n    expr: y\n", 4, 5, None, "duplicate key 'expr'"),
        ("rules:\n  - name: a\n    expr: [x]\n", 3, 11, "a", "must be an expression"),
        # definitions: the signature, the body, and each call
        ("define:\n  f: last(x)\nrules: []\n", 2, 3, None, "named like a call"),
        ("define:\n  max(a): last(a)\nrules: []\n", 2, 3, None, "max is a built-in function"),
        ("define:\n  f(a, a): last(a)\nrules: []\n", 2, 3, None, "names a parameter twice"),
        ("define:\n  f(): [x]\nrules: []\n", 2, 8, None, "the body must be an expression"),
        ("define:\n  f(): last(x) +\nrules: []\n", 2, 17, None, "definition f(): syntax error"),
        ("define:\n  f(): last(x)\n  f( ): last(y)\nrules: []\n", 3, 3, None, "f() defined twice"),
        ("define:\n  f(): last(x)\nrules:\n  - {name: a, expr: x > 1}\n", 2, 3, None, "f() is not used by any rule"),
        ("define:\n  f(n): last(x)\nrules:\n  - {name: a, expr: f() > 1}\n", 4, 21, "a", "f() takes 1 argument (n), got 0"),
        ("define:\n  f(n): last(x)\nrules:\n  - {name: a, expr: f(n=1) > 1}\n", 4, 25, "a", "takes its arguments by position"),
        ("define:\n  f(): g()\n  g(): f() + 1\nrules:\n  - {name: a, expr: 1 > f()}\n", 5, 25, "a",
         "in f(): in g(): f() calls itself (through f -> g)"),
        ("define:\n  f(n): mean_over(x, n)\nrules:\n  - {name: a, expr: 'f(y) > 1'}\n", 4, 24, "a",
         "in f(): window length must be a whole number"),
        ("define:\n  f(): last(x)\nrules:\n  - {name: a, expr: fx() > 1}\n", 4, 21, "a", "unknown function 'fx' (did you mean f?)"),
    ],
)
def test_invalid_packs_name_file_line_column_and_rule(text, line, column, rule, fragment):
    with pytest.raises(RuleError) as info:
        load_pack_text(text, "pack.yaml")
    err = info.value
    assert fragment in err.message, str(err)
    assert (err.path, err.rule, err.line, err.column) == ("pack.yaml", rule, line, column), str(err)
    where = "pack.yaml" + (f":{line}" if line else "") + (f":{column}" if column else "")
    assert str(err) == f"{where}:{f' rule {rule}:' if rule else ''} {err.message}"


DEFINED = """
define:
  # a window length, a metric and a pair as arguments; one definition calling another
  level(m, n): median_over(m, n)
  rise(m): level(m, 3) - baseline(m, 6, 3)
  gap_rise(): rise(a - b)
rules:
  - name: r
    expr: rise(x) > level(x, 5) / 2 and coalesce(gap_rise() >= 0, True)
    values:
      value: rise(x)
      level: level(x, 5)
    summary: "rise {value:g} over {level:g}"
"""

WRITTEN_OUT = """
rules:
  - name: r
    expr: >-
      median_over(x, 3) - baseline(x, 6, 3) > median_over(x, 5) / 2
      and coalesce(median_over(a - b, 3) - baseline(a - b, 6, 3) >= 0, True)
    values:
      value: median_over(x, 3) - baseline(x, 6, 3)
      level: median_over(x, 5)
    summary: "rise {value:g} over {level:g}"
"""


def test_definitions_evaluate_as_their_bodies_written_out():
    (defined,) = load_pack_text(DEFINED, "defined.yaml")
    (written,) = load_pack_text(WRITTEN_OUT, "written.yaml")
    assert defined.windows == written.windows and set(defined.windows) == {"x", "a", "b"}
    assert defined.condition.source.startswith("rise(x) > level(x, 5) / 2")  # shown as written
    series = {"x": [1.0] * 8 + [9.0, 9.5, 10.0], "a": [2.0] * 11, "b": [1.0] * 11}
    for step in range(4, 11):
        ctx = Ctx(series, step=step)
        got, want = evaluate(defined, ctx), evaluate(written, Ctx(series, step=step))
        assert got == want
    fired = evaluate(defined, Ctx(series, step=10))
    assert fired is not None and fired.active and fired.summary == "rise 8.5 over 9"
    assert not evaluate(defined, Ctx(series, step=7)).active


def test_definitions_that_double_at_every_level_are_refused():
    levels = "".join(f"  f{i}(): f{i + 1}() + f{i + 1}()\n" for i in range(15)) + "  f15(): last(x)\n"
    with pytest.raises(RuleError, match="syntax nodes once its definitions are written in"):
        load_pack_text(f"define:\n{levels}rules:\n  - {{name: a, expr: f0() > 1}}\n", "bomb.yaml")


def test_the_default_pack_names_its_repeated_sub_expressions():
    text = DEFAULT_PACK.read_text()
    # the step-time chain and the lag's evidence are written once, in `define:`
    assert text.count("median_over(train_s, n) + median_over(stall_s, n)") == 1
    assert text.count("1 - 0.6 * lag_beyond() - 0.4 * lag_rose()") == 1
    assert "step_time(5)" in text and "lag_evidence()" in text


def test_yaml_aliases_cannot_blow_up():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    for i, prev in zip("bcdefg", "abcdef"):
        bomb += f"{i}: &{i} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"
    bomb += "rules: []\n"
    with pytest.raises(RuleError, match="YAML nodes"):
        load_pack_text(bomb, "bomb.yaml")


def test_load_rules_files_directories_and_duplicates(tmp_path: Path):
    one = tmp_path / "one.yaml"
    one.write_text("rules:\n  - {name: mine, expr: x > 1}\n")
    assert [r.name for r in load_rules([one], include_default=False)] == ["mine"]
    names = [r.name for r in load_rules([one])]
    assert names[-1] == "mine" and "importance_weight_spike" in names

    packs = tmp_path / "packs"
    packs.mkdir()
    (packs / "a.yaml").write_text("rules:\n  - {name: a1, expr: x > 1}\n")
    (packs / "b.yml").write_text("rules:\n  - {name: b1, expr: x > 1}\n")
    (packs / "a.test.yaml").write_text("tests: []\n")  # rule tests are not packs
    assert [r.name for r in load_rules([packs], include_default=False)] == ["a1", "b1"]

    clash = tmp_path / "clash.yaml"
    clash.write_text("rules:\n  - name: trainer_silent\n    expr: absent_for() > 1\n")
    with pytest.raises(RuleError) as info:
        load_rules([clash])
    assert info.value.rule == "trainer_silent"
    assert (info.value.path, info.value.line) == (str(clash), 2)
    assert "first defined at default:" in info.value.message

    with pytest.raises(RuleError, match="cannot read"):
        load_rules([tmp_path / "missing.yaml"])


# -- evaluation --------------------------------------------------------------------


def test_hold_after_resume_makes_the_rule_inactive():
    series = {"importance_weight_max": [1.1] * 50 + [9.0] * 6, "staleness_mean": [0.5] * 56}
    assert run("importance_weight_spike", series, since_resume=3) is None
    assert run("importance_weight_spike", series, since_resume=9) is None
    assert run("importance_weight_spike", series, since_resume=10).active
    assert run("importance_weight_spike", series).active


def test_points_are_fetched_once_per_metric():
    ctx = Ctx({"importance_weight_max": [1.1] * 50 + [9.0] * 6, "staleness_mean": [0.5] * 56})
    evaluate(RULES["importance_weight_spike"], ctx)
    assert ctx.fetches <= len(RULES["importance_weight_spike"].metrics)


def test_a_rule_whose_metric_is_missing_is_inactive():
    assert run("importance_weight_spike", {"loss": [0.1] * 60}) is None
    assert not run("rollout_stall", {"loss": [0.1] * 20}).active
    assert run("trainer_mfu_low", {"trainer_mfu": [0.4] * 10}) is None  # no baseline yet


def causes(ev: Evaluation) -> list[str]:
    return [c.id for c in ev.causes]


def evidence(ev: Evaluation, cause: str) -> dict[str, float]:
    (c,) = [c for c in ev.causes if c.id == cause]
    return {e["expr"]: e["value"] for e in c.evidence}


def test_importance_weight_spike_ranks_stale_rollouts_when_staleness_rose():
    ev = run(
        "importance_weight_spike",
        {"importance_weight_max": [1.1] * 50 + [6, 8, 9, 9, 9], "staleness_mean": [0.6] * 50 + [2, 3, 3.5, 3.5, 3.5]},
    )
    assert ev.active
    assert causes(ev) == ["stale_rollouts", "token_mismatch", "exploration_collapse"]  # no entropy sent: scored 0
    assert ev.causes[0].score > ev.causes[1].score
    assert evidence(ev, "stale_rollouts")["max_over(staleness_mean, 5)"] == 3.5
    assert "staleness 3.50 (baseline 0.60, bound n/a)" in ev.summary


def test_importance_weight_spike_ranks_token_mismatch_when_staleness_stayed_flat():
    flat = {"importance_weight_max": [1.1] * 50 + [6, 8, 9, 9, 9], "staleness_mean": [1.5, 1.7, 1.6] * 18 + [1.6]}
    ev = run("importance_weight_spike", flat, config={"staleness_bound": 2})
    assert causes(ev) == ["token_mismatch", "stale_rollouts", "exploration_collapse"]
    plain = ev.causes[0].score
    confirmed = run(
        "importance_weight_spike",
        {**flat, "token_mismatch_rate": [0.0] * 50 + [0.05] * 5, "logprob_diff_max": [0.5] * 50 + [8.0] * 5},
        config={"staleness_bound": 2},
    )
    assert causes(confirmed)[0] == "token_mismatch"
    assert confirmed.causes[0].score > plain  # the mismatch metrics confirm it
    ev_items = evidence(confirmed, "token_mismatch")
    assert ev_items["median_over(token_mismatch_rate, 3)"] == 0.05
    assert ev_items["median_over(logprob_diff_max, 5)"] == 8.0


def test_a_mismatch_whose_worst_values_swing_wildly_is_judged_against_the_noise_before_it():
    # prime-rl's worst per-token k3 KL after a re-tokenizing restart: 1.0-1.3 before, 40 to 20,000 after; the
    # noise of the 40 steps before the 10 newest is the threshold's, not one the mismatch itself inflated
    before = [1.0, 1.2, 1.1, 1.3] * 15
    after = [11820.0, 7611.0, 651.0, 21960.0, 2355.0, 329.0, 3486.0, 2028.0, 157.0, 419.0, 43.0, 1532.0, 413.0]
    for n in range(6, len(after) + 1):
        ev = run("importance_weight_spike", {"mismatch_kl_max": before + after[:n]})
        assert ev is not None and ev.active, n


def test_importance_weight_one_step_spike_is_quiet():
    ev = run("importance_weight_spike", {"importance_weight_max": [1.1] * 50 + [30.0] + [1.1] * 4})
    assert ev is not None and not ev.active


def test_staleness_above_the_configured_bound_or_its_own_baseline():
    series = {"staleness_mean": [1.0] * 50 + [2.5] * 3}
    assert run("staleness_high", series, config={"staleness_bound": 2}).active
    assert not run("staleness_high", series, config={"staleness_bound": 4}).active
    assert not run("staleness_high", series).active  # no bound: too little history to know the run's range
    # no bound: judged against the largest lag of the run's history before its 40 newest steps (2 x 1 + 1), once
    # 80 steps of it lie there; three times it (3 x 1 + 1) while fewer do (a first 40 steps may show a third of its range)
    wander = [0.6, 1.0, 0.8, 0.9, 0.7] * 25
    assert run("staleness_high", {"staleness_mean": wander + [3.1] * 3}).active
    assert not run("staleness_high", {"staleness_mean": wander + [2.9] * 3}).active
    young = [0.6, 1.0, 0.8, 0.9, 0.7] * 18
    assert not run("staleness_high", {"staleness_mean": young + [3.1] * 3}).active
    assert run("staleness_high", {"staleness_mean": young + [4.1] * 3}).active
    assert not run("staleness_high", {"staleness_mean": young + [3.9] * 3}).active
    # after a resume (a bound can be lost there, settling at 1.5-2 times it) the twice-its-top reference holds
    assert run("staleness_high", {"staleness_mean": young + [3.1] * 3}, since_resume=50).active
    # no bound, but a ceiling the mean lag sat on (a quarter of those steps within 1% of their largest): that is the
    # run's own bound, and a tenth above it pages
    assert run("staleness_high", {"staleness_mean": [1.0] * 90 + [1.2] * 3}).active
    assert not run("staleness_high", {"staleness_mean": [1.0] * 90 + [1.05] * 3}).active
    assert not run("staleness_high", {"staleness_mean": [0.5] * 90 + [1.2] * 3}).active  # under a version: no bound
    # a swing anywhere within what the run has shown is quiet, however far from its median
    swinging = {"staleness_mean": [0.0, 4.0, 1.0, 3.0, 2.0] * 20 + [4.0] * 3}
    assert not run("staleness_high", swinging).active
    assert not run("staleness_high", {"staleness_mean": [1.0] * 50 + [1.8] * 3}).active


def test_staleness_high_no_bound_queue_full_at_its_own_bound_is_quiet():
    # no bound: the worst lag 3 over the run's first steps, then the queue fills to its own bound of 5 and sits full
    # (every sample at 5: the mean on the worst lag) - beyond the worst lag's record plus one, yet quiet
    full = {"staleness_max": [3.0] * 80 + [5.0] * 10, "staleness_mean": [2.0] * 80 + [5.0] * 10}
    assert not run("staleness_high", full).active
    # a bound lost at a resume settles at a ceiling of its own: no excuse once the run resumed
    assert run("staleness_high", full, since_resume=30).active
    # a stopped sync: every sample from the frozen weights, mean on the worst lag, but climbing a version a step
    climbing = {"staleness_max": [3.0] * 80 + [5.0, 6.0, 7.0, 8.0, 9.0], "staleness_mean": [2.0] * 80 + [5.0, 6.0, 7.0, 8.0, 9.0]}
    assert run("staleness_high", climbing).active
    # the worst lag flat but the mean well under it: samples spread over the versions, not a full queue
    spread = {"staleness_max": [3.0] * 80 + [6.0] * 10, "staleness_mean": [2.0] * 80 + [4.6] * 10}
    assert run("staleness_high", spread).active


def test_staleness_high_reads_the_worst_lag_when_a_run_sends_no_mean():
    # PipelineRL before stats/lag_mean: the oldest sample's lag alone, which sits at the bound in a healthy run
    healthy = {"staleness_max": [4.0, 3.0] * 25 + [5.0, 4.0, 5.0, 4.0]}
    quiet = run("staleness_high", healthy, config={"staleness_bound": 4})
    assert quiet is None or not quiet.active  # (the mean lag unknown: inactive)
    stuck = {"staleness_max": [4.0, 3.0] * 25 + [6.0, 7.0, 8.0]}  # the weight sync stopped: one version a step
    assert run("staleness_high", stuck, config={"staleness_bound": 4}).active
    quiet = run("staleness_high", stuck, config={"staleness_bound": 8})
    assert quiet is None or not quiet.active
    with_mean = {**stuck, "staleness_mean": [2.0] * 53}  # a run that sends its mean lag is judged by it
    assert not run("staleness_high", with_mean, config={"staleness_bound": 4}).active


def test_staleness_bound_read_from_the_frameworks_own_config_keys():
    # prime-rl's orchestrator.max_off_policy_steps (max_off_policy_steps when its orchestrator logs alone), AReaL's
    # rollout.max_head_offpolicyness, SkyRL's trainer.fully_async.max_staleness_steps: the run's bound, as the rules
    # read it (rule_config); a bound of 0 is a synchronous run's, and a run's own staleness_bound/max_staleness wins
    series = {"staleness_mean": [1.0] * 50 + [2.5] * 3}
    for config in ({"orchestrator": {"max_off_policy_steps": 2}}, {"max_off_policy_steps": 2},
                   {"rollout": {"max_head_offpolicyness": 2}}, {"trainer": {"fully_async": {"max_staleness_steps": 2}}}):
        assert rule_config(config)["staleness_bound"] == 2
        assert run("staleness_high", series, config=rule_config(config)).active  # 2.5 > 1.1 x 2, with no history
    assert not run("staleness_high", series, config=rule_config({"orchestrator": {"max_off_policy_steps": 4}})).active
    assert "staleness_bound" not in rule_config({"rollout": {"max_head_offpolicyness": 0}})
    assert "staleness_bound" not in rule_config({"max_staleness": 3, "orchestrator": {"max_off_policy_steps": 4}})
    assert rule_config({"staleness_bound": 3, "orchestrator": {"max_off_policy_steps": 4}})["staleness_bound"] == 3
    # the keys are the frameworks' own (ModeKey.bound): a config that names its framework is read for that one's only
    assert rule_config({"framework": "areal", "max_head_offpolicyness": 3})["staleness_bound"] == 3
    # PipelineRL's max_lag counts samples: over one step's samples (train_batch_size x gradient_accumulation_passes)
    sized = {"train_batch_size": 2, "gradient_accumulation_passes": 128}
    assert rule_config({"framework": "pipelinerl", "max_lag": 1024, "finetune": sized})["staleness_bound"] == 4
    assert rule_config({"finetune": {"max_lag": 640, **sized}})["staleness_bound"] == 2.5
    assert "staleness_bound" not in rule_config({"framework": "pipelinerl", "max_lag": 1024})  # no step size: none
    assert "staleness_bound" not in rule_config({"framework": "areal", "max_off_policy_steps": 4})
    assert rule_config({"framework": "prime-rl", "max_off_policy_steps": 4})["staleness_bound"] == 4


def test_stall_computes_the_balancing_gpu_ratio():
    series = {"stall_s": [0.0] * 40 + [30.0] * 6, "rollout_s": [20.0] * 40 + [60.0] * 6, "train_s": [30.0] * 46}
    ev = run("rollout_stall", series, config={"rollout_gpus": 6, "train_gpus": 2})
    assert ev.active and causes(ev) == ["unbalanced_groups"] and ev.value == 30.0
    # rollout takes 2x the training step: 6:2 x 60/30 = 6:1 balances the groups
    assert "rollout:train GPU ratio of 6.00:1 would balance the groups (now 3.00:1)" in ev.summary
    items = evidence(ev, "unbalanced_groups")
    assert items["median_over(stall_s, 5)"] == 30.0
    ratio = [v for k, v in items.items() if "rollout_gpus" in k]
    assert ratio == [6.0]
    assert "6.00:1" in ev.causes[0].advice
    # without rollout_s: rollout = train + stall
    ev = run("rollout_stall", {"stall_s": [0.0] * 40 + [30.0] * 6, "train_s": [30.0] * 46})
    assert "ratio of 2.00:1" in ev.summary
    # a run that sends only its wait (AReaL-like keys): the step is the run's pace from its reports' arrival
    stall_only = {"stall_s": [0.0] * 40 + [12.0] * 6, "staleness_mean": [3.0] * 46}
    assert run("rollout_stall", stall_only) is None  # no step time known: the share is unknown, not judged
    ev = run("rollout_stall", stall_only, report_interval=30.0)
    assert ev.active and "a step 30s" in ev.summary
    assert not run("rollout_stall", {**stall_only, "stall_s": [0.0] * 40 + [2.0] * 6}, report_interval=30.0).active


def test_low_mfu_cites_padding_and_length_spread():
    ev = run(
        "trainer_mfu_low",
        {
            "trainer_mfu": [0.4] * 50 + [0.2] * 5,
            "padding_ratio": [0.1] * 50 + [0.5] * 5,
            "response_length_mean": [800.0] * 55,
            "response_length_std": [300.0] * 50 + [1200.0] * 5,
        },
    )
    assert ev.active and causes(ev)[0] == "padding_imbalance"
    items = evidence(ev, "padding_imbalance")
    assert items["median_over(padding_ratio, 5)"] == 0.5
    assert items["median_over(response_length_std, 5)"] == 1200.0
    assert items["median_over(response_length_mean, 5)"] == 800.0
    assert "padding ratio 0.50 (baseline 0.10), response length std/mean 1.50" in ev.summary
    assert ev.causes[0].score == pytest.approx(1.0)


@pytest.mark.parametrize("mode, top", [("asynchronous", "unbalanced_groups"), ("synchronous", "padding_imbalance")])
def test_low_mfu_with_a_longer_wait_is_unbalanced_groups_only_where_the_wait_is_idle(mode, top):
    """MFU halves while the trainer waits 20 s (a fifth of its step) longer: in an asynchronous run that wait is
    idle time, the GPU groups out of balance; a synchronous trainer (its lag always 0) waits for its own
    generation, which has no groups to balance, so the longer wait says nothing and padding keeps its prior."""
    wait = [2.0] * 50 + [22.0] * 5 if mode == "asynchronous" else [60.0] * 50 + [80.0] * 5
    ev = run("trainer_mfu_low", {
        "trainer_mfu": [0.4] * 50 + [0.2] * 5,
        "step_s": [100.0] * 55,
        "stall_s": wait,
        "staleness_mean": [1.0 if mode == "asynchronous" else 0.0] * 55,
    })
    assert ev.active and causes(ev)[0] == top
    scores = {c.id: c.score for c in ev.causes}
    assert scores["unbalanced_groups"] == (1.0 if mode == "asynchronous" else 0.0)


def test_slowly_declining_mfu_and_entropy_are_quiet():
    mfu = [0.45 * (0.999**i) for i in range(200)]
    assert not run("trainer_mfu_low", {"trainer_mfu": mfu}).active
    entropy = [1.6 * (0.997**i) for i in range(200)]
    assert not run("entropy_collapse", {"entropy": entropy}).active


def _sparse(values, every=5):
    out = [None] * (len(values) * every)
    for i, v in enumerate(values):
        out[i * every + every - 1] = v
    return out


def test_exploration_collapse_needs_pass_at_1_holding():
    entropy = [1.2] * 70 + [0.5] * 10
    pk = _sparse([0.60, 0.62, 0.61, 0.63, 0.62, 0.64, 0.63, 0.65, 0.64, 0.66, 0.65, 0.66, 0.64, 0.55, 0.45, 0.40])
    p1 = _sparse([0.30, 0.31, 0.30, 0.32, 0.31, 0.33, 0.32, 0.34, 0.33, 0.35, 0.34, 0.35, 0.36, 0.38, 0.40, 0.41])
    falling = _sparse([0.30, 0.31, 0.30, 0.32, 0.31, 0.33, 0.32, 0.34, 0.33, 0.35, 0.34, 0.35, 0.30, 0.25, 0.20, 0.15])
    ev = run("exploration_collapse", {"entropy": entropy, "pass_at_k": pk, "pass_at_1": p1})
    assert ev.active and causes(ev) == ["exploration_collapse"]
    assert ev.value == pytest.approx(0.40 - 0.41)  # the alert's value is the pass@k - pass@1 gap
    assert "pass@8 0.4" in ev.summary and "gap -0.01" in ev.summary
    assert not run("exploration_collapse", {"entropy": entropy, "pass_at_k": pk, "pass_at_1": falling}).active


def test_exploration_collapse_when_pass_at_k_converges_onto_a_rising_pass_at_1():
    # pass@k never falls (a rising pass@1 lifts it), but the k-sample advantage vanishes while entropy collapses
    pk = _sparse([0.60, 0.61, 0.60, 0.62, 0.61, 0.62, 0.61, 0.63, 0.62, 0.63, 0.62, 0.63, 0.64, 0.64, 0.65, 0.65])
    p1 = _sparse([0.30, 0.31, 0.30, 0.32, 0.31, 0.33, 0.32, 0.34, 0.33, 0.35, 0.34, 0.35, 0.45, 0.55, 0.61, 0.63])
    collapsing = [1.2] * 62 + [1.2 * 0.8 ** (i + 1) for i in range(18)]
    ev = run("exploration_collapse", {"entropy": collapsing, "pass_at_k": pk, "pass_at_1": p1})
    assert ev.active and causes(ev) == ["exploration_collapse"]
    # the same evaluations with entropy declining slowly, as in normal training: the one-evaluation signal is
    # not enough, the two-evaluation one is (the gap fell from ~0.29 to 0.04 in two evaluations)
    slow = [1.2 * 0.999**i for i in range(80)]
    assert run("exploration_collapse", {"entropy": slow, "pass_at_k": pk, "pass_at_1": p1}).active
    # the gap shrinking slowly, as RL sharpening does in a healthy run: quiet
    p1_slow = _sparse([0.30, 0.31, 0.30, 0.32, 0.31, 0.33, 0.32, 0.34, 0.33, 0.35, 0.34, 0.35, 0.36, 0.36, 0.37, 0.37])
    assert not run("exploration_collapse", {"entropy": slow, "pass_at_k": pk, "pass_at_1": p1_slow}).active


def test_reward_hacking_needs_the_training_reward_rising():
    heldout = _sparse([0.30, 0.31, 0.32, 0.31, 0.33, 0.34, 0.33, 0.35, 0.36, 0.35, 0.37, 0.30, 0.22, 0.15])
    rising = [0.3 + 0.004 * i + (0.01 * (i - 55) if i > 55 else 0) + 0.01 * ((-1) ** i) for i in range(70)]
    falling = [0.3 + 0.004 * i - (0.02 * (i - 55) if i > 55 else 0) + 0.01 * ((-1) ** i) for i in range(70)]
    ev = run("reward_hacking", {"reward_train": rising, "reward_heldout": heldout})
    assert ev.active and causes(ev) == ["reward_hacking"]
    # the alert's value is the gap at the last evaluation: the training reward's mean since the previous one
    # (steps 65-69) minus the held-out score
    assert ev.value == pytest.approx(sum(rising[65:70]) / 5 - 0.15, abs=1e-6)
    assert not run("reward_hacking", {"reward_train": falling, "reward_heldout": heldout}).active


def test_reward_hacking_when_held_out_stays_flat_and_not_when_it_follows():
    # the widening gap: the training reward climbs steeply from step 55, the held-out score stays where it was
    flat = _sparse([0.30, 0.32, 0.31, 0.33, 0.32, 0.34, 0.33, 0.35, 0.34, 0.35, 0.36, 0.35, 0.36, 0.35])
    climbing = [0.3 + 0.001 * i + (0.02 * (i - 55) if i > 55 else 0) + 0.01 * ((-1) ** i) for i in range(70)]
    ev = run("reward_hacking", {"reward_train": climbing, "reward_heldout": flat})
    assert ev.active and causes(ev) == ["reward_hacking"]
    # the held-out score follows the training reward up (a healthy run learning fast): quiet
    follows = _sparse([0.30, 0.32, 0.31, 0.33, 0.32, 0.34, 0.33, 0.35, 0.34, 0.35, 0.36, 0.45, 0.55, 0.62])
    assert not run("reward_hacking", {"reward_train": climbing, "reward_heldout": follows}).active
    # fewer than 4 evaluations: quiet
    assert not run("reward_hacking", {"reward_train": climbing[56:], "reward_heldout": flat[56:]}).active


def _creeping_run(creep: float) -> dict[str, list]:
    """A healthy run's training reward learning from 0.05 towards 0.5 over 170 steps (per-step noise of 0.1 that
    cancels over each 5-step interval), its held-out score evaluated every 5 steps 0.02 below it; from step 170 the
    held-out score holds still for two evaluations while the training reward climbs ``creep`` a step faster."""
    wiggle = [0.1, -0.1, 0.06, -0.06, 0.0]
    train = [0.05 + 0.45 * (1 - math.exp(-i / 60)) + wiggle[i % 5] + (creep * (i - 169) if i > 169 else 0.0)
             for i in range(180)]
    held: list = [None] * 180
    for k, s in enumerate(range(4, 180, 5)):
        held[s] = sum(train[s - 4:s + 1]) / 5 - 0.02 + 0.002 * (-1) ** k if s < 170 else held[164]
    return {"reward_train": train, "reward_heldout": held}


@pytest.mark.parametrize("every", [1, 2, 3, 5, 10])
def test_a_steep_exploit_is_paged_at_every_evaluation_cadence(every):
    """The tests that count on one evaluation ask the training reward to hold the level the evaluation read (one
    step's spike lifts that mean and falls back); with evaluations under 5 steps apart the median of the last 5
    steps lags a climbing reward behind the interval's mean, so they are not asked there: an exploit climbing 0.02
    a step (the per-step noise) from step 120, with the held-out score flat, is paged within 20 steps at every
    cadence, every step included (a scraped gauge)."""
    rules = [RULES["reward_hacking"]]
    for seed in (1, 3):
        rng = random.Random(seed)
        train, held = {}, {}
        for s in range(200):
            train[s] = 0.3 + 0.001 * s + (0.02 * (s - 120) if s > 120 else 0) + rng.gauss(0, 0.02)
            if s % every == every - 1:
                held[s] = 0.28 + 0.001 * min(s, 120) + rng.gauss(0, 0.01)
        result = replay(rules, {"reward_train": train, "reward_heldout": held})
        fired = [t.step for t in result.transitions if t.to_state == "firing"]
        assert fired and 120 <= fired[0] <= 140, (seed, fired)


def test_reward_hacking_needs_a_widening_beyond_the_noise_of_the_training_rewards_interval_mean():
    # the training reward's per-step noise (0.11) gives its mean over a 5-step interval a noise of 0.05 when its steps
    # are independent; this run's wiggle cancels over each interval, so the gap's own noise reads 7 times less (0.007,
    # the held-out score's). +0.02 a step widens the gap by 0.06 at the first of the two evaluations: 9 of the gap's
    # own sigmas, 1.2 of the interval mean's: quiet (a real run's interval means swing that far); +0.01 a step too
    assert not run("reward_hacking", _creeping_run(0.01)).active
    assert not run("reward_hacking", _creeping_run(0.02)).active
    # +0.05 a step: 0.15 at the first evaluation and 0.40 at the second, 8 of the interval mean's sigmas: paged
    ev = run("reward_hacking", _creeping_run(0.05))
    assert ev.active and causes(ev) == ["reward_hacking"]


def _learning_run(dip: float, accelerate: float = 0.0) -> dict[str, list]:
    """A healthy run learning fast and steadily (+0.004 a step, small per-step noise), its held-out score evaluated
    every 5 steps 0.02 below the training reward's mean since the previous evaluation; at the last one (step 169)
    the held-out score lags by ``dip``, and from step 155 the training reward climbs ``accelerate`` a step faster."""
    wiggle = [0.01, -0.01, 0.006, -0.006, 0.0]
    train = [0.05 + 0.004 * i + wiggle[i % 5] + (accelerate * (i - 155) if i > 155 else 0.0) for i in range(170)]
    held: list = [None] * 170
    for k, s in enumerate(range(4, 170, 5)):
        held[s] = sum(train[s - 4:s + 1]) / 5 - 0.02 + 0.002 * (-1) ** k
    held[169] = held[164] - dip
    return {"reward_train": train, "reward_heldout": held}


def test_reward_hacking_at_one_evaluation_needs_the_training_reward_to_accelerate():
    # one evaluation whose held-out score lags a steady climb (0.07 below where it was, while the training reward
    # climbs as it always did): the training reward is up many of its sigmas, as at every evaluation of a run that
    # learns fast, so that climb is no coincidence: quiet (the toy-run false alarm of the 21001-21003 draw)
    assert not run("reward_hacking", _learning_run(0.07)).active
    # the same lag while the training reward speeds up (+0.006 a step more for the last 14 steps): paged
    ev = run("reward_hacking", _learning_run(0.07, accelerate=0.006))
    assert ev.active and causes(ev) == ["reward_hacking"]


def test_any_non_finite_watched_value_is_a_blowup():
    for metric in ("loss", "grad_norm", "kl", "entropy", "importance_weight_max", "reward_train"):
        ev = run("nonfinite_values", {metric: [1.0] * 10 + [float("nan")]})
        assert ev.active and causes(ev) == ["numerical_blowup"], metric
        assert {"expr": f"count_nonfinite({metric}, 5)", "metric": metric, "window": 5, "steps": [6, 10],
                "value": 1.0} in ev.causes[0].evidence
    assert not run("nonfinite_values", {"loss": [1.0] * 10}).active
    assert not run("nonfinite_values", {"loss": [1.0] * 10, "pass_at_k": [1.0, float("nan")]}).active  # not watched


def test_trainer_silent_waits_out_the_runs_own_pauses():
    rule = RULES["trainer_silent"]
    assert rule.on_timer
    fast = {"step_s": [10.0] * 30}
    # at least 15 minutes plus 6 step times (a restart: the step cut short, the first one after it waiting for a
    # whole generation, an evaluation or a checkpoint before the trainer reports again), whatever the step time
    assert not evaluate(rule, Ctx(fast, since_report=959.0)).active
    ev = evaluate(rule, Ctx(fast, since_report=961.0))
    assert ev.active and causes(ev) == ["trainer_silent"] and ev.value == 961.0
    # a resume whose first step took twice the pace after 15 minutes away, then evaluated for 3 steps' time before it
    # reported: 900 + 150 + 2 x 150 + 3 x 150 s is no death (a healthy PipelineRL run of the independent family, fresh
    # draw 47903: 1,725 s with steps of 255 s, paged against 15 minutes and 3 step times)
    restart = {"step_s": [150.0] * 30}
    assert not evaluate(rule, Ctx(restart, since_report=1790.0)).active
    assert evaluate(rule, Ctx(restart, since_report=1801.0)).active
    # 6 step times where the 15 minutes are configured away
    slow = {"step_s": [300.0] * 30}
    assert not evaluate(rule, Ctx(slow, since_report=1790.0, config={"silent_min_s": 0})).active
    assert evaluate(rule, Ctx(slow, since_report=1801.0, config={"silent_min_s": 0})).active
    # twice the longest pause the run took between two reports outside its evaluations (a checkpoint, a restart)
    assert not evaluate(rule, Ctx(fast, since_report=1900.0, longest_pause_outside_evals=1000.0)).active
    assert evaluate(rule, Ctx(fast, since_report=2001.0, longest_pause_outside_evals=1000.0)).active
    # mid-cadence, an evaluation's pause counts half as long again (an evaluation off the cadence, at the end of an
    # epoch, evaluates the same sets), not twice; when one is due it counts in full (below)
    assert not evaluate(rule, Ctx(fast, since_report=1490.0, longest_pause=1000.0,
                                  longest_pause_outside_evals=10.0)).active
    assert evaluate(rule, Ctx(fast, since_report=1510.0, longest_pause=1000.0, longest_pause_outside_evals=10.0)).active
    # an evaluation is due (held-out every 10 steps, the last at step 19, this is step 29): 45 minutes
    evals = {"step_s": [10.0] * 30, "reward_heldout": [0.5 if s % 10 == 9 else None for s in range(30)]}
    assert not evaluate(rule, Ctx(evals, step=28, since_report=2000.0)).active
    assert evaluate(rule, Ctx(evals, step=28, since_report=2701.0)).active
    assert evaluate(rule, Ctx(evals, step=24, since_report=1000.0)).active  # mid-cadence: 15 minutes + 6 steps
    # once the run has shown 5 evaluations, 6 times its longest pause when that is shorter: evaluations that took
    # under two minutes each are no reason to wait 45 (trainers that died one step before an evaluation was due,
    # in the synthetic and toy draws of session 26, were paged at 45 minutes, past 60 of their steps)
    five = {"step_s": [10.0] * 60, "reward_heldout": [0.5 if s % 10 == 9 else None for s in range(60)]}
    assert not evaluate(rule, Ctx(five, step=58, since_report=959.0, longest_pause=100.0)).active
    assert evaluate(rule, Ctx(five, step=58, since_report=961.0, longest_pause=100.0)).active  # 15 min + 6 steps
    assert not evaluate(rule, Ctx(five, step=58, since_report=2390.0, longest_pause=400.0)).active  # 6 x 400 s
    assert evaluate(rule, Ctx(five, step=58, since_report=2401.0, longest_pause=400.0)).active
    # a healthy independent run (fresh healthy seed 789) whose 7th evaluation took 1,327 s, 4.5 times the 293 s of
    # its longest wait before: not paged at 4 times it
    assert not evaluate(rule, Ctx(five, step=58, since_report=1330.0, longest_pause=293.0)).active
    assert evaluate(rule, Ctx(five, step=58, since_report=1760.0, longest_pause=293.0)).active
    assert not evaluate(rule, Ctx(five, step=58, since_report=2690.0, longest_pause=1000.0)).active  # 45 min at most
    assert evaluate(rule, Ctx(five, step=58, since_report=2701.0, longest_pause=1000.0)).active
    assert not evaluate(rule, Ctx(five, step=58, since_report=2690.0)).active  # no pause known: 45 minutes
    assert not evaluate(rule, Ctx(five, step=48, since_report=2690.0, longest_pause=100.0)).active  # 4 evaluations
    # at the run's last step an evaluation is due whatever the cadence: frameworks evaluate when training ends (a
    # healthy independent run, seed 1410, evaluated every 9 steps, took 20 minutes over its last step, 175 of 176)
    nine = {"step_s": [40.0] * 175, "reward_heldout": [0.5 if s % 9 == 0 else None for s in range(175)]}
    pauses = {"since_report": 1900.0, "longest_pause": 1233.0, "longest_pause_outside_evals": 200.0}
    assert not evaluate(rule, Ctx(nine, step=174, config={"total_steps": 176}, **pauses)).active
    assert evaluate(rule, Ctx(nine, step=174, config={"total_steps": 176}, since_report=2701.0,
                              longest_pause=1233.0)).active
    assert evaluate(rule, Ctx(nine, step=174, config={"total_steps": 300}, **pauses)).active  # mid-cadence
    # before the first evaluation, the interval the framework's config gives (verl's trainer.test_freq, SkyRL's
    # trainer.eval_interval, prime-rl's eval.interval, read as eval_every by rule_config, as the engine reads every run's config): at step 11
    # of an interval of 12 the first evaluation is due, 17 minutes are no death
    for config in ({"trainer": {"test_freq": 12}}, {"trainer": {"eval_interval": 12}}, {"eval_every": 12},
                   {"eval": {"interval": 12}}, {"orchestrator": {"eval": {"interval": 12}}}):  # (prime-rl: the last two)
        assert rule_config(config)["eval_every"] == 12
        assert not evaluate(rule, Ctx({"step_s": [10.0] * 12}, config=rule_config(config), since_report=1015.0)).active
        assert evaluate(rule, Ctx({"step_s": [10.0] * 12}, config=rule_config(config), since_report=2701.0)).active
    assert evaluate(rule, Ctx({"step_s": [10.0] * 12}, config=rule_config({"trainer": {"eval_interval": 50}}),
                              since_report=1015.0)).active  # not due yet
    # ... and after it, in a run that has sent no held-out metric, by that interval's schedule: evaluations come at
    # its multiples (before the step's report, as verl's, or after it, as Hugging Face's Trainer's), not at every
    # step past the first interval (a run whose evaluations never reach Parallax)
    no_evals, every_12 = {"step_s": [10.0] * 31}, rule_config({"eval_every": 12})
    for step in (23, 24):  # the next step, or this one, is a multiple of 12: due, 17 minutes are no death
        assert not evaluate(rule, Ctx(no_evals, step=step, config=every_12, since_report=1015.0)).active
    assert evaluate(rule, Ctx(no_evals, step=30, config=every_12, since_report=1015.0)).active
    assert "eval_every" not in rule_config({"trainer": {"test_freq": -1}})  # verl: no validation
    # heartbeats: a process that stopped them for 2 minutes, with no data either, died
    assert not evaluate(rule, Ctx(fast, since_report=100.0, heartbeat_age=100.0)).active
    ev = evaluate(rule, Ctx(fast, since_report=130.0, heartbeat_age=125.0))
    assert ev.active and "seconds since the last heartbeat: 125" in ev.summary
    # ... while a process that still beats is evaluating or checkpointing: 20 minutes before it counts as hung
    assert not evaluate(rule, Ctx(fast, since_report=1190.0, heartbeat_age=10.0)).active
    assert evaluate(rule, Ctx(fast, since_report=1201.0, heartbeat_age=10.0)).active
    # ... and 45 minutes when an evaluation is due
    assert not evaluate(rule, Ctx(evals, step=28, since_report=2000.0, heartbeat_age=10.0)).active
    assert evaluate(rule, Ctx(evals, step=28, since_report=2701.0, heartbeat_age=10.0)).active
    # a run whose last step reached its configured total ended normally
    assert not evaluate(rule, Ctx(fast, since_report=5000.0, config={"total_steps": 30})).active
    assert evaluate(rule, Ctx(fast, since_report=5000.0, config={"total_steps": 100})).active
    assert evaluate(rule, Ctx(fast, since_report=None)) is None  # not a running run
    # before its pace is known (5 reports), a run that sends no step_s steps at its training time plus its wait
    # (a synchronous trainer waits out the whole generation): 350 s + 746 s a step is no death 18 minutes after
    # its first report (a held-out run of session 12 was paged critical there), 15 minutes and 6 of those steps are
    long_steps = {"train_s": [350.0], "stall_s": [746.0]}
    assert not evaluate(rule, Ctx(long_steps, since_report=1100.0)).active
    assert not evaluate(rule, Ctx(long_steps, since_report=7400.0)).active
    ev = evaluate(rule, Ctx(long_steps, since_report=7500.0))
    assert ev.active and "seconds per step: 1.1e+03" in ev.summary
    assert not evaluate(rule, Ctx({"train_s": [350.0]}, since_report=2990.0)).active  # no wait sent: training alone
    assert evaluate(rule, Ctx({"train_s": [350.0]}, since_report=3010.0)).active
    # nothing gives the pace (no timer, too few reports to read it off): at least the 45 minutes an evaluation may
    # take (a held-out TRL run of 21-minute steps that sends no timer was paged 17 minutes after its first report)
    assert not evaluate(rule, Ctx({"loss": [0.1]}, since_report=2600.0)).active
    assert evaluate(rule, Ctx({"loss": [0.1]}, since_report=2701.0)).active
    assert evaluate(rule, Ctx({"loss": [0.1]}, since_report=1100.0, report_interval=30.0)).active  # pace known


def test_summary_shows_na_for_unknown_values():
    (rule,) = load_pack_text(
        "rules:\n  - name: a\n    expr: last(x) > 1\n    values: {y: last(y), b: x > 1}\n"
        "    summary: 'y={y:.2f} b={b} v={value:g} r={rule}'\n",
        "t.yaml",
    )
    ev = evaluate(rule, Ctx({"x": [2.0]}))
    assert ev.summary == "y=n/a b=yes v=2 r=a"


def test_an_unknown_value_drops_the_unit_written_after_it():
    (rule,) = load_pack_text(
        "rules:\n  - name: a\n    expr: last(x) > 1\n    values: {y: last(y), r: last(x)}\n"
        "    summary: 'idle {y:.3g}s per step, {y}% padded, ratio {y:.2f}:1; {r:.3g}s, {y} steps'\n",
        "t.yaml",
    )
    assert evaluate(rule, Ctx({"x": [2.0]})).summary == "idle n/a per step, n/a padded, ratio n/a; 2s, n/a steps"
