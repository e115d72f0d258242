"""The engine: incremental evaluation, the timer, resume hold-back, reloads, and the rules CLI."""

import random
from collections import Counter
from pathlib import Path

import pytest

import parallax.alerts.engine as engine_mod
from parallax.alerts.engine import AlertEngine, HeldSeries, SeriesContext, hold_spans, replay
from parallax.alerts.lifecycle import Transition
from parallax.alerts.rules import evaluate, load_pack_text, load_rules
from parallax.server.cli import main
from tests.conftest import make_client, new_run

PACK = """
rules:
  - name: a_high
    expr: last(a) > 5
    severity: warning
    causes: [{id: numerical_blowup, score: 1, evidence: [], advice: look at a}]
  - name: b_high
    expr: last(b) > 5
    for: 2
    hold_after_resume: 3
    severity: warning
    causes: [{id: stale_rollouts, score: 1, evidence: [], advice: look at b}]
  - name: silent
    expr: absent_for() > 300
    severity: critical
    causes: [{id: trainer_silent, score: 1, evidence: [], advice: "is the trainer alive?"}]
"""


class MemoryStore:
    """The AlertStore protocol in memory, for driving the live engine with a fake clock."""

    def __init__(self):
        self.points: dict[str, list[tuple[int, float]]] = {}
        self.status, self.last_seen, self.last_step, self.resume = "running", 0.0, None, ()
        self.heartbeat_at: float | None = None
        self.saved: list[Transition] = []
        self.context_reads = 0

    def open_alerts(self, run_id):
        return []

    def save_transitions(self, transitions):
        self.saved += transitions
        return transitions

    def recent_points(self, run_id, windows):
        return {m: self.points.get(m, [])[-n:] for m, n in windows.items()}

    def run_context(self, run_id):
        self.context_reads += 1
        return {}, self.status, self.last_seen, self.last_step, self.resume, self.heartbeat_at

    def running_runs(self):
        return [1] if self.status == "running" else []

    def send(self, engine, step, now, **values):
        for m, v in values.items():
            self.points.setdefault(m, []).append((step, v))
        self.last_step, self.last_seen = step, now
        return engine.observe(1, {m: [(step, v, 0, now)] for m, v in values.items()}, step, now=now)


@pytest.fixture
def counted(monkeypatch):
    calls = Counter()
    real = engine_mod.evaluate

    def counting(rule, ctx):
        calls[rule.name] += 1
        return real(rule, ctx)

    monkeypatch.setattr(engine_mod, "evaluate", counting)
    return calls


def test_a_batch_evaluates_only_the_rules_reading_its_metrics(counted):
    store = MemoryStore()
    eng = AlertEngine(load_pack_text(PACK, "test"), store)
    moves = store.send(eng, 1, 10.0, a=10.0)
    assert [(m.rule, m.to_state) for m in moves] == [("a_high", "pending"), ("a_high", "firing")]
    assert counted == {"a_high": 1}
    store.send(eng, 2, 20.0, b=1.0)
    store.send(eng, 3, 30.0, b=1.0)
    assert counted == {"a_high": 1, "b_high": 2}
    assert store.context_reads == 1  # the run's context is read once, then kept


def test_timer_fires_trainer_silent_and_leaves_finished_runs_alone():
    store = MemoryStore()
    eng = AlertEngine(load_pack_text(PACK, "test"), store, clock=lambda: 0.0)
    store.send(eng, 1, 1000.0, a=1.0)
    assert eng.tick(now=1200.0) == []
    fired = eng.tick(now=1400.0)
    assert [(m.rule, m.to_state, m.top_cause) for m in fired] == [("silent", "pending", "trainer_silent"), ("silent", "firing", "trainer_silent")]
    resolved = store.send(eng, 2, 1410.0, a=1.0)  # the trainer is back: the next tick resolves
    assert resolved == []
    assert [(m.rule, m.to_state) for m in eng.tick(now=1420.0)] == [("silent", "resolved")]
    store.status = "finished"
    eng.forget_context(1)
    assert eng.tick(now=99999.0) == []


def test_replay_holds_back_after_a_resume():
    rules = load_pack_text(PACK, "test")
    b = {s: (9.0 if s >= 10 else 1.0) for s in range(20)}
    plain = replay(rules, {"b": b})
    assert [(f.rule, f.started_step) for f in plain.firing] == [("b_high", 12)]
    held = replay(rules, {"b": b}, events=[(9, "resume")])
    assert [(f.rule, f.active_since_step, f.started_step) for f in held.firing] == [("b_high", 12, 14)]


#: A resume's transient in the worst importance weight (steps 60-69), still high the step the hold of 10 ends.
TAIL = [10.0, 9.0, 8.0, 7.0, 6.0, 5.0, 5.0, 4.5, 4.0, 4.0]


def _resumed_run(from_resume: list[float]) -> dict[str, dict[int, float]]:
    """120 steps of a healthy run's weights and lag, ``from_resume`` written over the weights from step 60."""
    rng = random.Random(7)
    iw = {s: 1.1 + rng.uniform(-0.05, 0.05) for s in range(120)}
    lag = {s: 0.5 + rng.uniform(-0.1, 0.1) for s in range(120)}
    iw.update({60 + i: v for i, v in enumerate(from_resume)})
    return {"importance_weight_max": iw, "staleness_mean": lag}


def _sorted_series(series: dict[str, dict[int, float]]) -> dict[str, tuple[list[int], list[float]]]:
    """A run's ``{metric: {step: value}}`` as the engine holds it: ``{metric: ([steps], [values])}``, by step."""
    return {m: (sorted(pts), [pts[s] for s in sorted(pts)]) for m, pts in series.items()}


def test_a_resume_transient_is_left_out_of_the_held_rules_windows():
    rules = load_rules()
    series = _resumed_run(TAIL)
    assert [f.rule for f in replay(rules, series).firing] == ["importance_weight_spike"]  # no resume: a spike
    # the hold alone ends at step 70 with 3 of the 5 newest weights still at 4-5: it would page there
    data = _sorted_series(series)
    spike = next(r for r in rules if r.name == "importance_weight_spike")
    assert evaluate(spike, SeriesContext(data, step=70, resume_step=60)).active
    # its windows read the steps before the resume and after the hold instead: quiet
    assert not evaluate(spike, SeriesContext(HeldSeries(data, [(60, 70)]), step=70, resume_step=60)).active
    assert replay(rules, series, events=[(60, "resume")]).transitions == []


def test_a_fault_that_begins_with_a_resume_pages_once_three_steps_after_the_hold_agree():
    held = replay(load_rules(), _resumed_run([9.0] * 60), events=[(60, "resume")])  # a mismatch deployed at restart
    (first, *_) = held.firing
    assert (first.rule, first.started_step, first.top_cause) == ("importance_weight_spike", 72, "token_mismatch")


@pytest.mark.parametrize("shared", [False, True], ids=["one-process", "leader"])
@pytest.mark.parametrize("batch", [1, 7, 40])
def test_the_live_engine_leaves_the_hold_out_as_replay_does(batch, shared):
    rules = load_rules()
    fired = 0
    for series, resumes in ((_resumed_run(TAIL), (60,)), (_resumed_run([9.0] * 60), (60,)),
                            (_resumed_run(TAIL + [3.0] * 50), (60,)), (_resumed_run(CHAIN), (60, 63)),
                            (_resumed_run(CHAIN + [9.0] * 50), (60, 63)),
                            (_resumed_run(TAIL + [1.1, 10.0, 9.0, 8.0, 7.0]), (60, 71))):
        want = [(t.rule, t.step, t.to_state, t.top_cause)
                for t in replay(rules, series, events=[(r, "resume") for r in resumes]).transitions]
        store = MemoryStore()
        store.run_context = lambda run_id, st=store: (st.config, st.status, st.last_seen, st.last_step, st.resume, None)
        store.points_after = lambda run_id, after, st=store: _points_after(st, run_id, after)
        eng = AlertEngine(rules, store)
        got = []
        for i in range(0, 120, batch):
            steps = list(range(i, min(120, i + batch)))
            if any(r in steps for r in resumes):  # the trainer restarted: its resume is announced before its points
                store.resume = tuple(r for r in resumes if r <= steps[-1])
                eng.forget_context(1)
            got += _send_batch(store, eng, series, steps, float(i), {}, shared)
        assert [(t.rule, t.step, t.to_state, t.top_cause) for t in got] == want
        fired += bool(want)
    # the fault from the resume, the level that stays at 3 and the fault after a chain page; the transients do not
    assert fired == 3


#: A restart that fell over in its first steps (60-62) and the one after it (63), each with its transient.
CHAIN = [10.0, 9.0, 8.0] + TAIL


def test_each_resume_of_a_chain_is_held():
    rules = load_rules()
    series = _resumed_run(CHAIN)
    assert hold_spans((60, 63), 10, 0) == ((60, 73),)
    assert hold_spans((60, 70), 10, 0) == ((60, 80),)  # holds that meet are one
    assert hold_spans((60, 75), 10, 0) == ((60, 70), (75, 85))  # the steps between are the run's own
    assert hold_spans((20, 60, 63), 10, 40) == ((60, 73),)  # a hold the windows no longer reach
    data = _sorted_series(series)
    spike = next(r for r in rules if r.name == "importance_weight_spike")
    # leaving out the last resume's hold alone, the first try's transient fills the windows the step it ends
    assert evaluate(spike, SeriesContext(HeldSeries(data, [(63, 73)]), step=73, resume_step=63)).active
    assert not evaluate(spike, SeriesContext(HeldSeries(data, [(60, 73)]), step=73, resume_step=63)).active
    assert replay(rules, series, events=[(60, "resume"), (63, "resume")]).transitions == []
    # a second restart a step after the first one's hold (70 healthy): both transients are left out
    apart = _resumed_run(TAIL + [1.1] + [10.0, 9.0, 8.0, 7.0])
    data = _sorted_series(apart)
    assert evaluate(spike, SeriesContext(HeldSeries(data, [(71, 81)]), step=81, resume_step=71)).active
    assert hold_spans((60, 71), 10, 0) == ((60, 70), (71, 81))
    assert not evaluate(spike, SeriesContext(HeldSeries(data, [(60, 70), (71, 81)]), step=81, resume_step=71)).active
    assert replay(rules, apart, events=[(60, "resume"), (71, "resume")]).transitions == []


def test_replay_timer_after_silence():
    rules = load_pack_text(PACK, "test")
    data = {"a": {s: 1.0 for s in range(5)}}
    assert replay(rules, data).firing == []  # no silence, no timer
    result = replay(rules, data, silent_from=40.0)
    assert [(f.rule, f.started_step, f.top_cause) for f in result.firing] == [("silent", 4, "trainer_silent")]
    fired = [t for t in result.transitions if t.to_state == "firing"][0]
    assert 300 < fired.time - 40.0 <= 330  # the first 30-s tick past 300 s of silence


def test_reload_with_an_invalid_file_keeps_the_rules(sqlite_url, tmp_path):
    good = tmp_path / "mine.yaml"
    good.write_text(PACK)
    with make_client(database_url=sqlite_url, rules=[str(good)], alert_timer_seconds=0) as c:
        before = [r["name"] for r in c.get("/api/v1/rules").json()["rules"]]
        assert "a_high" in before
        good.write_text(PACK.replace("last(a) > 5", "last(a) >"))
        r = c.post("/api/v1/rules/reload")
        assert r.status_code == 422 and "mine.yaml" in r.json()["detail"] and "a_high" in r.json()["detail"]
        assert [x["name"] for x in c.get("/api/v1/rules").json()["rules"]] == before
        run = new_run(c)
        c.post(f"/api/v1/runs/{run}/metrics", json={"points": [{"step": 1, "metrics": {"a": 10.0}}]})
        assert [a["rule"] for a in c.get("/api/v1/alerts", params={"state": "firing"}).json()["alerts"]] == ["a_high"]
        good.write_text(PACK.replace("name: a_high", "name: a_higher"))
        assert "a_higher" in c.post("/api/v1/rules/reload").json()["rules"]
        # The renamed rule's old alert does not stay open forever.
        assert c.get("/api/v1/alerts", params={"state": "firing"}).json()["alerts"] == []
        assert [a["rule"] for a in c.get("/api/v1/alerts", params={"state": "resolved"}).json()["alerts"]] == ["a_high"]


def test_rules_cli_check_and_test(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  - name: x\n    expr: last(a) > > 1\n    causes: [{id: no_such_cause, score: 1}]\n")
    assert main(["rules", "check", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "bad.yaml:3" in err and "rule x" in err
    good = tmp_path / "good.yaml"
    good.write_text(PACK)
    assert main(["rules", "check", str(good)]) == 0
    tests = tmp_path / "good.test.yaml"
    tests.write_text(
        "rule_files: [good.yaml]\n"
        "tests:\n"
        "  - name: a fires\n"
        "    series: {a: '1x3 9 9'}\n"
        "    expect:\n"
        "      - {at_step: 2, firing: []}\n"
        "      - {at_step: 4, firing: [{rule: a_high, top_cause: numerical_blowup}]}\n"
        "  - name: wrong on purpose\n"
        "    series: {a: '1x5'}\n"
        "    expect: [{at_step: 4, firing: [{rule: a_high}]}]\n"
    )
    capsys.readouterr()
    assert main(["rules", "test", str(tests)]) == 1
    out = capsys.readouterr().out
    assert "PASS" in out and "a fires" in out and "FAIL" in out and "1 failed" in out


@pytest.mark.parametrize("case, message", [
    # a misspelt key: its checks would never run and the test would pass asserting nothing
    ("  - name: typo\n    series: {a: '1x3 9 9'}\n    alerts: [{at_step: 4, firing: []}]\n", "unknown key 'alerts'"),
    ("  - name: bare\n    series: {a: '1x3 9 9'}\n", "nothing to check"),
    ("  - name: step\n    series: {a: '1x3 9 9'}\n    expect: [{firing: []}]\n", "needs 'at_step'"),
    ("  - name: inner\n    series: {a: '1x3 9 9'}\n    expect: [{at_step: 4, fring: []}]\n", "unknown key 'fring'"),
])
def test_a_rule_test_that_would_check_nothing_is_refused(tmp_path, capsys, case, message):
    (tmp_path / "good.yaml").write_text(PACK)
    tests = tmp_path / "t.test.yaml"
    tests.write_text("rule_files: [good.yaml]\ntests:\n" + case)
    assert main(["rules", "test", str(tests)]) == 1
    out = capsys.readouterr()
    assert message in out.err and "PASS" not in out.out


def test_rule_test_series_tokens():
    # promtool's notation: '_' no point, '_xN' N steps without one, 'AxN' A repeated, 'A+BxN' a ramp of N+1 values
    import math

    from parallax.alerts.ruletest import RuleTestError, expand_series

    got = expand_series("1 _x3 2x2 0+1x2 _ nan -inf")
    assert got[:9] == [1.0, None, None, None, 2.0, 2.0, 0.0, 1.0, 2.0] and got[9] is None
    assert math.isnan(got[10]) and got[11] == -math.inf and len(got) == 12
    for bad in ("_xa", "x3", "1x", "_x"):
        with pytest.raises(RuleTestError, match="_xN"):
            expand_series(bad)


def test_default_pack_ships_with_passing_tests(capsys):
    default_tests = Path(__file__).parent.parent / "alerts" / "rules" / "default.test.yaml"
    assert default_tests.exists()
    assert main(["rules", "test", str(default_tests)]) == 0, capsys.readouterr().out


def test_a_failed_save_does_not_lose_the_alert():
    store = MemoryStore()
    eng = AlertEngine(load_pack_text(PACK, "test"), store)
    real_save, calls = store.save_transitions, []

    def flaky(transitions):
        calls.append(len(transitions))
        if len(calls) == 1:
            raise RuntimeError("database is locked")
        return real_save(transitions)

    store.save_transitions = flaky
    with pytest.raises(RuntimeError):
        store.send(eng, 1, 10.0, a=10.0)
    moves = store.send(eng, 2, 20.0, a=10.0)  # memory did not run ahead: the alert fires now
    assert [(m.rule, m.to_state) for m in moves] == [("a_high", "pending"), ("a_high", "firing")]
    assert [m.to_state for m in store.saved] == ["pending", "firing"]


def test_stopping_a_run_resolves_its_alerts(sqlite_url, tmp_path):
    rules = tmp_path / "mine.yaml"
    rules.write_text(PACK)
    with make_client(database_url=sqlite_url, rules=[str(rules)], alert_timer_seconds=0) as c:
        run = new_run(c)
        c.post(f"/api/v1/runs/{run}/metrics", json={"points": [{"step": 3, "metrics": {"a": 10.0}}]})
        assert [a["state"] for a in c.get("/api/v1/alerts", params={"run_id": run}).json()["alerts"]] == ["firing"]
        assert c.patch(f"/api/v1/runs/{run}", json={"status": "failed"}).status_code == 200
        found = c.get("/api/v1/alerts", params={"run_id": run}).json()["alerts"]
        assert [(a["state"], a["ended_step"]) for a in found] == [("resolved", 3)]


def _send_batch(store, engine, series, steps, now, config, shared=False):
    """One request holding every point of ``series`` at ``steps`` (as the importer or a buffered client sends).
    ``shared``: as the leader of several processes learns of it (the steps announced, the points read back)."""
    groups: dict[str, list[tuple]] = {}
    for m, pts in series.items():
        samples = [(s, pts[s], 0, now) for s in steps if s in pts]
        if samples:
            groups[m] = samples
            store.points.setdefault(m, []).extend((s, v) for s, v, *_ in samples)
    store.last_step, store.last_seen = max(steps), now
    store.config = config
    if shared:
        return engine.observe_stored(1, list(groups), (min(steps), max(steps)), now=now)
    return engine.observe(1, groups, max(steps), now=now)


def _points_after(store, run_id, after):
    return {m: [(s, v) for s, v in store.points.get(m, []) if s > step][-n:] for m, (step, n) in after.items()}


def test_a_new_leader_catching_up_on_a_step_judges_again_the_later_steps_it_judged_first():
    """A new leader judged its own first batch (step 32) on its request before it caught up on step 31, announced
    while it followed: the fault at 31 fires there and resolves at 32, where the next step's value says it ended -
    not at the step of the next batch to come (33), which the one request judging 32 as the newest left it for.
    The race tests/test_leader.py's SIGKILL handover met on a loaded machine."""
    store = MemoryStore()
    store.points_after = lambda run_id, after: _points_after(store, run_id, after)
    spike = "rules:\n  - {name: spike, expr: last(a) > 10, for: 0, keep_firing_for: 0, severity: critical}\n"
    eng = AlertEngine(load_pack_text(spike, "test"), store)
    for step in range(31):
        _send_batch(store, eng, {"a": {step: 1.0}}, [step], float(step), {}, shared=True)
    store.points["a"] += [(31, 50.0), (32, 1.0)]  # both stored; only 32's request was judged, as the newest
    store.last_step = 32
    assert eng.observe_stored(1, ["a"], (32, 32), now=32.0) == []
    moves = eng.observe_stored(1, ["a"], (31, 31), now=32.0, every_step=True)
    assert [(t.step, t.to_state) for t in moves] == [(31, "pending"), (31, "firing"), (32, "resolved")]


@pytest.fixture(scope="module")
def replayed() -> list[tuple[object, list[tuple]]]:
    """The synthetic runs of the batch test, each with the transitions replay gives it step by step (the same for
    every batch size and mode: computed once)."""
    from parallax.alerts.rules import load_rules
    from parallax.alerts.suites.synthetic import generate

    rules = load_rules()
    scenarios = [s for s in generate(seed=3, healthy=2, per_cause=2) if not s.events and s.silent_from is None]
    return [(sc, [(t.rule, t.step, t.to_state, t.top_cause) for t in
                  replay(rules, sc.series, times=sc.times, config=sc.config).transitions]) for sc in scenarios]


@pytest.mark.parametrize("shared", [False, True], ids=["one-process", "leader"])
@pytest.mark.parametrize("batch", [1, 7, 40, 10_000])
def test_a_batch_of_many_steps_is_judged_at_each_step_as_replay_judges_it(batch, shared, replayed):
    """An imported history (one request of thousands of steps) or a buffered client's batch fires where the
    fault happened, with the transitions replay gives step by step — not once at the batch's last step."""
    from parallax.alerts.rules import load_rules

    rules = load_rules()
    scenarios = [sc for sc, _ in replayed]
    assert len(scenarios) >= 6
    fired = 0
    for sc, want in replayed:
        store = MemoryStore()
        store.run_context = lambda run_id, st=store: (st.config, st.status, st.last_seen, st.last_step, st.resume, None)
        store.points_after = lambda run_id, after, st=store: _points_after(st, run_id, after)
        eng = AlertEngine(rules, store)
        steps = sorted({s for pts in sc.series.values() for s in pts})
        got = []
        for i in range(0, len(steps), batch):
            got += _send_batch(store, eng, sc.series, steps[i:i + batch], float(i), sc.config, shared)
        assert [(t.rule, t.step, t.to_state, t.top_cause) for t in got] == want, sc.name
        fired += any(t.to_state == "firing" for t in got)
    assert fired >= len(scenarios) - 2  # the faulty runs fire (so the comparison is not between two empty lists)


def test_a_batch_of_contexts_gives_each_window_the_value_one_context_gives():
    """The engine's contexts for a batch's steps hand windows over as finite floats when they can (one slice and
    one sum a window): every window function, over values with gaps, NaN, infinities, None and sums that
    overflow, equals what a context of its own computes from (step, value) pairs."""
    from parallax.alerts.engine import SeriesContext
    from parallax.alerts.expr import parse_expr
    from tests.test_expr import TRICKY

    nan, inf = float("nan"), float("inf")
    raw = [1.0, 2.5, 1e308, 1e308, -3.0, nan, 4.0, None, 2.0, inf, 1.5, -inf, 0.5] + [float(i % 7) for i in range(60)]
    series = {"x": (list(range(0, 2 * len(raw), 2)), raw), "sparse": ([5, 50, 51, 120], [0.1, 0.2, nan, 0.4]),
              "gaps": ([1, 2, 3], [1.0, None, 3.0]), "spiky": (list(range(40)), [1.0] * 20 + [50.0] + [1.0] * 19)}
    sources = TRICKY + ["last(x)", "exists(x)", "last(gaps)"] + [f"{fn}(x, {n})" for fn in ("mean_over", "max_over", "min_over", "median_over",
                                                   "sum_over", "std_over", "noise", "slope", "delta", "count_nonfinite",
                                                   "count_over") for n in (1, 3, 8) if n >= {"std_over": 2, "noise": 3, "slope": 2}.get(fn, 1)]
    sources += ["baseline(x, 6, 2)", "baseline(x, 1, 0)", "baseline(sparse, 4, 1)", "last(x) > baseline(x, 20, 5)"]
    steps = list(range(-1, 2 * len(raw) + 3))
    for source in sources:
        e = parse_expr(source.replace("step() / 10", "1").replace("config('a.b', 2)", "2"))
        alone = [e.evaluate(SeriesContext(series, step=s)) for s in steps]
        pairs: dict = {}
        batch = e.evaluate_many([SeriesContext(series, step=s, pairs=pairs) for s in steps])
        assert batch == alone, source


def test_the_default_trainer_silent_reads_heartbeats_and_pauses_in_the_live_engine():
    from parallax.alerts.rules import load_rules

    silent = [r for r in load_rules() if r.name == "trainer_silent"]
    store = MemoryStore()
    eng = AlertEngine(silent, store, clock=lambda: 0.0)
    store.send(eng, 1, 1000.0, step_s=10.0)
    store.send(eng, 2, 1010.0, step_s=10.0)
    store.send(eng, 3, 1600.0, step_s=10.0)  # a 590 s pause (an evaluation): the run's longest so far
    store.heartbeat_at = 1600.0 + 200.0  # the process beat 200 s after its last point, then stopped
    assert eng.tick(now=1600.0 + 300.0) == []  # heartbeat 100 s old: alive
    fired = eng.tick(now=1600.0 + 330.0)  # 130 s without a heartbeat, 330 s without data: it died
    assert [(m.rule, m.to_state) for m in fired] == [("trainer_silent", "pending"), ("trainer_silent", "firing")]
    # without heartbeats the same silence waits out twice the run's longest pause (and 15 minutes)
    quiet = MemoryStore()
    eng = AlertEngine(silent, quiet, clock=lambda: 0.0)
    for step, t in ((1, 1000.0), (2, 1010.0), (3, 1600.0)):
        quiet.send(eng, step, t, step_s=10.0)
    assert eng.tick(now=1600.0 + 1170.0) == []  # 2 x 590 = 1180 s
    assert [m.to_state for m in eng.tick(now=1600.0 + 1190.0)] == ["pending", "firing"]


@pytest.mark.parametrize("eval_every,eval_s,wait", [(1, 0.0, (60, 120)), (10, 700.0, (2700, 2760)),
                                                    (10, 0.0, (60, 120))])
def test_trainer_silent_waits_for_a_due_evaluation_only_when_evaluations_are_sparse(eval_every, eval_s, wait):
    """A scraped gauge repeats pass@k at every step: no evaluation is ever 'due', so a crash pages after the run's
    silence floor (a minute here), not the 45 minutes a due evaluation may take; sparse evaluations that took 700 s
    each keep that wait (4 x 700 s is longer); sparse evaluations that took no time, 6 of them, do not."""
    from parallax.alerts.rules import load_rules

    rules = [r for r in load_rules() if r.name == "trainer_silent"]
    steps = range(60)
    evals = [s for s in steps if s % eval_every == 0]
    data = {"loss": {s: 0.1 for s in steps}, "step_s": {s: 1.0 for s in steps},
            "pass_at_k": {s: 0.5 for s in evals}}
    # a step a second, as Prometheus scrapes, and each evaluation's time before its step's report
    times = {s: 1_000.0 + s + eval_s * sum(1 for e in evals if 0 < e <= s) for s in steps}
    last = times[59]
    config = {"silent_min_s": 60, "total_steps": 10_000, "eval_every": eval_every}  # the first one due too
    result = replay(rules, data, times=times, config=config, silent_from=last + 1)
    fired = [t for t in result.transitions if t.to_state == "firing"]
    assert [t.rule for t in fired] == ["trainer_silent"]
    assert wait[0] <= fired[0].time - last <= wait[1]


def _evaluated_run(after: bool, checkpoint_s: float) -> tuple[dict, dict]:
    """46 steps of 10 s; an evaluation every 10 steps that pauses the trainer 800 s, before its step's report
    (verl) or, ``after``, before the next one (Hugging Face's Trainer: the step reported, then evaluated); a
    checkpoint at step 25 that pauses it ``checkpoint_s``."""
    steps = range(46)
    data = {"loss": {s: 0.1 for s in steps}, "step_s": {s: 10.0 for s in steps},
            "reward_heldout": {s: 0.5 for s in steps if s and s % 10 == 0}}
    t, times = 5_000.0, {}
    for s in steps:
        t += 10.0 + (800.0 if s and (s - after) % 10 == 0 and s > after else 0.0)
        t += checkpoint_s if s == 25 else 0.0
        times[s] = t
    return data, times


@pytest.mark.parametrize("after", [False, True])
@pytest.mark.parametrize("checkpoint_s,wait", [(0.0, 1.5 * (800.0 + 10.0)), (700.0, 2 * (700.0 + 10.0))])
def test_trainer_silent_waits_out_evaluations_only_when_one_is_due(after, checkpoint_s, wait):
    """A trainer that hangs mid-cadence (its last report at step 45, the evaluations at multiples of 10 taking
    800 s each) is not given twice an evaluation's pause: no evaluation is due, so half as long again as its
    longest pause, or twice its longest pause outside evaluations (a checkpoint), whichever is longer. (Independent
    hangs of seeds 45802, 45902 and 45903 whose evaluations took 17-20 minutes were paged 66-76 step times after
    they hung.)
    The live engine tells an evaluation's pause by the report that carries its metric, as replay does."""
    from parallax.alerts.rules import load_rules

    rules = [r for r in load_rules() if r.name == "trainer_silent"]
    data, times = _evaluated_run(after, checkpoint_s)
    last = times[45]
    result = replay(rules, data, times=times, config={"total_steps": 10_000}, silent_from=last + 1)
    fired = [t for t in result.transitions if t.to_state == "firing"]
    assert [t.rule for t in fired] == ["trainer_silent"]
    assert wait <= fired[0].time - last <= wait + 30.0
    store = MemoryStore()
    eng = AlertEngine(rules, store, clock=lambda: 0.0)
    for s in sorted(times):
        store.send(eng, s, times[s], **{m: pts[s] for m, pts in data.items() if s in pts})
    assert eng.tick(now=last + wait - 10.0) == []
    assert [m.to_state for m in eng.tick(now=last + wait + 30.0)] == ["pending", "firing"]


def test_the_step_clock_reads_the_typical_seconds_per_step_off_the_reports():
    from parallax.alerts.engine import STEP_CLOCK_MIN, StepClock

    clock = StepClock()
    clock.report(0, 0.0)
    for i in range(1, STEP_CLOCK_MIN):
        clock.report(i, 100.0 * i)
    assert clock.interval() is None  # too few reports to say
    clock.report(STEP_CLOCK_MIN, 100.0 * STEP_CLOCK_MIN)
    assert clock.interval() == 100.0
    at = 100.0 * STEP_CLOCK_MIN
    clock.report(STEP_CLOCK_MIN, at + 50.0)  # the same step again (its evaluation sent apart): not a step
    clock.report(STEP_CLOCK_MIN + 10, at + 1000.0)  # a batch of ten steps: 100 s each
    clock.report(STEP_CLOCK_MIN + 11, at + 1000.0)  # imported with it, no wall time between: not an interval
    clock.report(STEP_CLOCK_MIN + 12, at + 2200.0)  # a long pause (an evaluation, a restart) is one among many
    assert clock.interval() == 100.0
    for i in range(3 * STEP_CLOCK_MIN):  # then the run slows down: the median follows
        at += 10_000.0
        clock.report(STEP_CLOCK_MIN + 13 + i, at)
    assert clock.interval() > 1000.0


def _sparse_run(steps: int, every: float) -> tuple[dict, dict]:
    """A run that reports no step_s (AReaL's, SkyRL's keys give none), a step every ``every`` seconds."""
    return {"loss": {s: 0.1 for s in range(steps)}}, {s: 5_000.0 + every * s for s in range(steps)}


def test_trainer_silent_waits_out_a_restart_and_six_step_times_read_off_the_reports():
    """Without step_s the step time was taken as 60 s: a run of 100-s steps was paged after 15 minutes of
    silence, inside one of its restarts. Now its own pace counts: 15 minutes plus 6 of its step times (a restart
    cuts a step short, the first step after it waits for a whole generation before it trains, and the trainer may
    evaluate or save a checkpoint as it comes back, before it reports), and at least 6 of them where the
    15 minutes are configured away (silent_min_s 0: a run of 300-s steps)."""
    from parallax.alerts.rules import load_rules

    rules = [r for r in load_rules() if r.name == "trainer_silent"]
    for every, wait, config in ((100.0, 900.0 + 6 * 100.0, {}), (300.0, 900.0 + 6 * 300.0, {}),
                                (300.0, 6 * 300.0, {"silent_min_s": 0})):
        data, times = _sparse_run(40, every)
        last = times[39]
        result = replay(rules, data, times=times, config={"total_steps": 10_000, **config}, silent_from=last + 1)
        fired = [t for t in result.transitions if t.to_state == "firing"]
        assert [t.rule for t in fired] == ["trainer_silent"]
        assert wait <= fired[0].time - last <= wait + 30.0, (every, config)
    # the live engine reads the same clock off the reports it receives
    data, times = _sparse_run(40, 100.0)
    last = times[39]
    store = MemoryStore()
    eng = AlertEngine(rules, store, clock=lambda: 0.0)
    for s in range(40):
        store.send(eng, s, times[s], loss=0.1)
    # 24.8 minutes: a restart of 15 minutes, the step it cut short, a first step twice as long as the others and
    # an evaluation of 3 step times before it reports
    assert eng.tick(now=last + 1490.0) == []
    assert [m.to_state for m in eng.tick(now=last + 1530.0)] == ["pending", "firing"]
