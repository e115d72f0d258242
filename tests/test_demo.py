"""`parallax demo`: the toy async RL loop behind it, and every faulty run diagnosed with its injected cause."""

from __future__ import annotations

import subprocess
import sys

import httpx
import numpy as np
import pytest

from parallax.ingest import toyrl
from parallax.ingest.toyrl import AsyncTrainer, Config, Policy, Rollouts, render_for_trainer, sample
from parallax.server.demo import RUNS, run_demo, select_runs
from tests.servers import free_port, parallax_server


def _rollouts(n: int = 64, seed: int = 0) -> tuple[Policy, Rollouts]:
    rng = np.random.default_rng(seed)
    policy = Policy(rng)
    obs = rng.integers(0, toyrl.N_OBS, size=(n, toyrl.TURNS))
    return policy, sample(policy, obs, rng, np.zeros(n, dtype=np.int64))


def test_episodes_are_well_formed_multi_turn_sequences():
    _, ro = _rollouts()
    for b in range(len(ro.obs)):
        toks = ro.tokens[b, : ro.length[b]]
        assert (ro.tokens[b, ro.length[b]:] == toyrl.BOS).all()
        obs_pos = np.flatnonzero(~ro.action[b, : ro.length[b]])
        assert list(toks[obs_pos]) == list(ro.obs[b])  # one observation per turn, in order
        answers = [t for t in toks if toyrl.ANS0 <= t < toyrl.THINK0]
        assert len(answers) == toyrl.TURNS  # each turn ends with exactly one answer
    assert (ro.logp[ro.action] <= 0).all() and (ro.logp[ro.action] > -20).all()


def test_exact_template_reproduces_the_rollout_logprobs():
    """The trainer scoring the rollout's own tokens with the rollout's weights gets importance weights of 1."""
    policy, ro = _rollouts()
    tokens, action, turn, src = render_for_trainer(ro, "exact")
    b, p = np.nonzero(action)
    z = policy.logits(ro.obs[b, turn[b, p]], tokens[b, p - 1], p, turn[b, p])
    z[toyrl.think_count(tokens, action)[b, p] >= toyrl.MAX_THINK, toyrl.N_OBS:] = -np.inf
    lp = toyrl._log_softmax(z.astype(np.float64))[np.arange(len(b)), tokens[b, p] - toyrl.ANS0]
    np.testing.assert_allclose(lp, ro.logp[b, src[b, p]], atol=1e-5)


def test_a_template_that_drops_reasoning_shortens_the_history_and_keeps_the_last_turn():
    _, ro = _rollouts()
    tokens, action, turn, src = render_for_trainer(ro, "drop_reasoning")
    thinks_before_last = ((ro.tokens >= toyrl.THINK0) & (ro.tokens < toyrl.BOS) & (ro.turn < toyrl.TURNS - 1)).sum(1)
    assert ((tokens != toyrl.BOS).sum(1) == ro.length - thinks_before_last).all()
    assert thinks_before_last.sum() > 0
    b, p = np.nonzero(action)
    assert (tokens[b, p] == ro.tokens[b, src[b, p]]).all()  # each kept action token maps to its rollout position
    retok, _, _, _ = render_for_trainer(ro, "retokenize")
    changed = retok != ro.tokens
    assert changed.any() and set(np.unique(ro.tokens[changed])) <= set(toyrl.RETOKENIZED)


def test_metrics_come_from_the_loop():
    steps = dict(AsyncTrainer(Config(seed=3)).steps(12))
    assert set(steps) == set(range(12))
    m = steps[9]  # an evaluation step
    for name in ("importance_weight_max", "staleness_mean", "stall_s", "trainer_mfu", "pass_at_k", "pass_at_1",
                 "entropy", "reward_train", "reward_heldout"):
        assert np.isfinite(m[name]), name
    assert 0 <= m["pass_at_1"] <= m["pass_at_k"] <= 1
    assert m["staleness_mean"] >= 1 and m["staleness_max"] >= m["staleness_mean"]
    assert "pass_at_k" not in steps[8]  # held-out evaluations every 5 steps only
    assert m["step_s"] == pytest.approx(m["train_s"] + m["stall_s"])


@pytest.mark.parametrize(
    ("fault", "metric", "direction"),
    [
        ("stale_rollouts", "staleness_mean", +1),
        ("unbalanced_groups", "stall_s", +1),
        ("padding_imbalance", "padding_ratio", +1),
        ("token_mismatch", "prefix_break_rate", +1),
        ("retokenize", "token_mismatch_rate", +1),
    ],
)
def test_each_fault_moves_its_own_indicator(fault, metric, direction):
    healthy = dict(AsyncTrainer(Config(seed=1)).steps(40))
    faulty = dict(AsyncTrainer(Config(fault=fault, onset=20, seed=1)).steps(40))
    before = np.mean([faulty[s][metric] for s in range(10, 20)])
    assert before == pytest.approx(np.mean([healthy[s][metric] for s in range(10, 20)]))  # same run until the onset
    after = np.mean([faulty[s][metric] for s in range(30, 40)])
    assert direction * (after - before) > 0.01, (before, after)


def test_numerical_blowup_gives_non_finite_values():
    steps = dict(AsyncTrainer(Config(fault="numerical_blowup", onset=5, seed=0)).steps(10))
    assert all(np.isfinite(steps[s]["loss"]) for s in range(5))
    assert not np.isfinite(steps[9]["entropy"]) and not np.isfinite(steps[9]["loss"])


def test_run_selection():
    assert [r.name for r in select_runs(None)] == [r.name for r in RUNS]
    assert [r.name for r in select_runs("2")] == ["healthy", "stale-rollouts"]
    assert [r.name for r in select_runs("padding,retokenize")] == ["healthy", "padding", "retokenize"]
    with pytest.raises(ValueError, match="unknown run nope"):
        select_runs("nope")
    with pytest.raises(ValueError, match="between 1 and 8"):
        select_runs("0")
    assert {r.transport for r in RUNS} == {"client", "pushgateway"}


def test_every_faulty_run_is_diagnosed_with_its_cause_and_the_healthy_run_stays_quiet(tmp_path):
    """The shortened CI demo: all eight runs concurrently, lockstep (--speed 0), against a real server."""
    with parallax_server(tmp_path) as server:
        project, outcomes = run_demo(server.url, RUNS, steps=240, speed=0)
        runs = httpx.get(f"{server.url}/api/v1/runs", params={"project": project}).json()["runs"]
        events = {  # a run's end event (server.lifecycle) aside
            r["name"]: [e for e in httpx.get(f"{server.url}/api/v1/runs/{r['id']}/events").json()["events"] if e["kind"] != "end"]
            for r in runs
        }
    assert {r["name"] for r in runs} == {r.name for r in RUNS}
    assert all(r["status"] == "finished" for r in runs)
    for o in outcomes:
        assert o.error is None, (o.run.name, o.error)
        assert o.steps_sent == 240
        if o.run.fault is None:
            assert o.fired == [], f"the healthy run raised {o.fired}"
            assert events[o.run.name] == []
            continue
        assert o.top_cause == o.run.expected, (o.run.name, o.fired)
        assert o.run.onset <= o.first_step <= o.run.onset + 100, (o.run.name, o.fired)
        assert [(e["kind"], e["step"]) for e in events[o.run.name]] == [("demo_fault", o.run.onset)]
    assert all(o.ok for o in outcomes)


def test_demo_command_starts_its_own_server_and_exits(tmp_path):
    port = free_port()
    out = subprocess.run(
        [sys.executable, "-m", "parallax.server.cli", "demo", "--runs", "1", "--steps", "12", "--speed", "0", "--exit",
         "--port", str(port), "--database-url", f"sqlite:///{tmp_path / 'demo.db'}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "healthy" in out.stdout and "✓" in out.stdout
    assert (tmp_path / "demo.db").exists()
    bad = subprocess.run([sys.executable, "-m", "parallax.server.cli", "demo", "--runs", "nope"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unknown run nope" in bad.stderr
