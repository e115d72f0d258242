"""The toyrl labelled-run family (the real toy RL loop swept over configurations) and the loop knobs it needs.

A full default ``generate`` takes tens of seconds: the sweep's configurations are checked at the defaults
without running them (``draw_specs``), and the runs themselves on small sizes.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from parallax.alerts.suites import CAUSES, ENDS, T0, Scenario
from parallax.alerts.suites import toyrl as fam
from parallax.ingest.toyrl import EXPECTED_CAUSE, FAULTS, AsyncTrainer, Config

MISMATCH = set(fam.MISMATCH_METRICS)


def _fingerprint(suite: list[Scenario]) -> list[tuple]:
    # repr keeps NaN/inf comparable (nan != nan, but repr(nan) == repr(nan))
    return [(s.name, s.cause, s.onset, s.variant, repr(s.series), repr(s.times), repr(s.config), s.events,
             repr(s.silent_from), s.symptom, s.end, s.family) for s in suite]


def _spec_key(spec: fam.Spec) -> str:
    return repr((sorted(spec.loop.items()), sorted(spec.config.items()), spec.steps, spec.onset, spec.cause,
                 spec.mismatch_metrics, spec.send_staleness, spec.end))


# -- the loop's knobs ---------------------------------------------------------------------------------------


def _run(n: int, **kw) -> dict[int, dict[str, float]]:
    return dict(AsyncTrainer(Config(**kw)).steps(n))


@pytest.mark.parametrize("bound", [1, 3, 6])
def test_lazy_weight_sync_swings_within_the_staleness_bound(bound):
    steps = _run(80, seed=2, weight_sync="lazy", lazy_sync_p=0.3, staleness_bound=bound, rollout_workers=8,
                 batch_workers=True, eval_every=1000)
    lag_max = [steps[s]["staleness_max"] for s in range(1, 80)]
    lag_mean = [steps[s]["staleness_mean"] for s in range(1, 80)]
    assert max(lag_max) == bound  # reaches the bound...
    assert min(lag_mean) >= 1  # ...never below one step off-policy...
    if bound > 1:
        assert len(set(lag_mean)) > 5  # ...and swings in between


def test_eager_weight_sync_is_bounded_too():
    assert max(m["staleness_max"] for m in _run(40, seed=1, staleness_bound=1).values()) == 1
    assert max(m["staleness_max"] for m in _run(40, seed=1, staleness_bound=4).values()) == 2  # in flight: one behind


def test_a_lagging_sync_breaks_the_bound():
    steps = _run(70, seed=0, fault="stale_rollouts", onset=30, weight_sync="lazy", staleness_bound=3,
                 stale_sync_every=10, batch_workers=True, eval_every=1000)
    assert max(steps[s]["staleness_max"] for s in range(30)) <= 3
    assert max(steps[s]["staleness_max"] for s in range(30, 70)) == 11
    assert np.mean([steps[s]["staleness_mean"] for s in range(30, 70)]) > 3


def test_synchronous_mode_is_on_policy_and_sends_no_stall():
    steps = _run(30, seed=4, synchronous=True, rollout_workers=6, batch_workers=True)
    for m in steps.values():
        assert m["staleness_mean"] == m["staleness_max"] == 0
        assert "stall_s" not in m
        assert m["step_s"] == pytest.approx(m["rollout_s"] + m["train_s"])
        assert m["importance_weight_max"] == pytest.approx(1.0, abs=1e-4)
        assert m["token_mismatch_rate"] == m["prefix_break_rate"] == 0
    assert "pass_at_k" in steps[4]
    faulty = _run(40, seed=4, synchronous=True, fault="token_mismatch", onset=20)
    assert max(faulty[s]["importance_weight_max"] for s in range(20, 40)) > 1.5


def test_batching_workers_keeps_task_groups_and_bounds():
    """Workers with the same weights sample as one batch; the rows come back in task order (GRPO groups)."""
    trainer = AsyncTrainer(Config(seed=3, weight_sync="lazy", staleness_bound=5, rollout_workers=16,
                                  batch_workers=True, group_size=8))
    for step in range(25):
        ro, _ = trainer._rollout(step)
        groups = ro.obs.reshape(-1, 8, ro.obs.shape[1])
        assert (groups == groups[:, :1]).all()
        assert ((step - ro.version) <= 5).all()
        trainer._train(step, ro)
        trainer.s.versions[step + 1] = trainer.s.policy.copy()
    assert len(set(ro.version.tolist())) > 1


def test_lost_workers_make_the_trainer_wait():
    steps = _run(60, seed=0, fault="unbalanced_groups", onset=30, rollout_workers=8, workers_lost=0.75,
                 eval_every=1000)
    assert all(steps[s]["stall_s"] == 0 for s in range(30))
    assert np.mean([steps[s]["stall_s"] / steps[s]["step_s"] for s in range(30, 60)]) > 0.2  # rollout:train 0.4 -> 1.5


def test_invalid_configurations_are_refused():
    for kw in ({"synchronous": True, "fault": "stale_rollouts"}, {"synchronous": True, "fault": "unbalanced_groups"},
               {"staleness_bound": 0}, {"weight_sync": "sometimes"}, {"workers_lost": 1.0}):
        with pytest.raises(ValueError):
            Config(**kw)
    Config(synchronous=True, staleness_bound=0)  # a synchronous run has no bound to respect
    assert set(EXPECTED_CAUSE) == set(FAULTS)


# -- the sweep, at the defaults (not run) ------------------------------------------------------------------


@pytest.fixture(scope="module")
def default_specs() -> dict[int, list[fam.Spec]]:
    return {seed: fam.draw_specs(seed) for seed in (0, 1, 2, 1001, 1002)}


def test_the_default_sweep_has_48_distinct_configurations(default_specs):
    for seed, specs in default_specs.items():
        assert len(specs) == 48
        assert len({_spec_key(s) for s in specs}) == 48
        assert len({s.loop["seed"] for s in specs}) == 48
        counts = Counter(s.cause for s in specs)
        assert counts[None] == 16 and all(counts[c] == 4 for c in CAUSES)
        assert len({s.name for s in specs}) == 48
    assert fam.draw_specs(0) == default_specs[0]  # deterministic
    assert {_spec_key(s) for s in default_specs[0]}.isdisjoint({_spec_key(s) for s in default_specs[1]})


def test_the_sweep_varies_every_dimension(default_specs):
    for specs in default_specs.values():
        loops = [s.loop for s in specs]
        asyncs = [s for s in specs if not s.loop["synchronous"]]
        assert 5 <= sum(1 for lp in loops if lp["synchronous"]) <= 30
        assert {s.loop["weight_sync"] for s in asyncs} == {"eager", "lazy"}
        assert len({s.loop["staleness_bound"] for s in asyncs}) >= 4
        for key, least in (("tasks_per_step", 4), ("group_size", 3), ("k", 3), ("rollout_workers", 5),
                           ("eval_tasks", 3), ("lr", 40), ("entropy_coef", 40), ("eval_every", 10)):
            assert len({lp[key] for lp in loops}) >= least, key
        assert all(5 <= lp["eval_every"] <= 50 for lp in loops)
        assert min(lp["eval_every"] for lp in loops) <= 6 and max(lp["eval_every"] for lp in loops) >= 35
        assert all(0.006 <= lp["lr"] <= 0.03 and 0.025 <= lp["entropy_coef"] <= 0.1 for lp in loops)
        assert all(64 <= lp["tasks_per_step"] * lp["group_size"] <= 384 for lp in loops)
        assert all(150 <= s.steps <= 400 for s in specs)
        assert max(s.steps for s in specs) - min(s.steps for s in specs) >= 150
        assert {s.mismatch_metrics for s in specs} == {True, False}
        assert {s.end for s in specs} == set(ENDS)
        assert len({round(s.checks["ratio"], 2) for s in specs}) >= 30  # timings


def test_configs_say_what_runs_log(default_specs):
    sync_marked = sync_total = 0
    for specs in default_specs.values():
        for s in specs:
            Config(**s.loop)  # valid
            assert s.config["k"] == s.loop["k"]
            for leaked in ("fault", "onset", "cause"):
                assert leaked not in s.config and leaked not in str(s.config.get("algorithm"))
            if s.loop["synchronous"]:
                sync_total += 1
                sync_marked += s.config.get("synchronous") is True
                assert "staleness_bound" not in s.config
            else:
                assert s.config.get("synchronous") in (None, False)
                if "staleness_bound" in s.config:
                    assert s.config["staleness_bound"] == s.loop["staleness_bound"]
        asyncs = [s for s in specs if not s.loop["synchronous"]]
        with_bound = sum("staleness_bound" in s.config for s in asyncs)
        assert len(asyncs) / 2 < with_bound < len(asyncs)  # most, not all
        assert 0 < sum("rollout_gpus" in s.config for s in specs) < len(specs)
    assert 0.3 <= sync_marked / sync_total <= 0.7  # about half of the synchronous runs say so


def test_faults_are_drawn_where_their_mechanism_acts(default_specs):
    for specs in default_specs.values():
        for s in specs:
            if s.cause is None:
                assert s.onset is None and s.loop["fault"] is None
                continue
            assert fam.MIN_ONSET <= s.onset <= s.steps - fam.MIN_TAIL
            loop = s.loop
            assert EXPECTED_CAUSE.get(loop["fault"], "trainer_silent") == s.cause
            if s.cause in fam.ASYNC_ONLY:
                assert not loop["synchronous"]
            if s.cause == "stale_rollouts":  # staleness climbs to period + 1, its mean (period + 3) / 2: over the bound
                assert (loop["stale_sync_every"] + 3) / 2 > loop["staleness_bound"] + 1
            if s.cause == "unbalanced_groups":
                assert s.checks["faulty_ratio"] >= 1.45
            if s.cause in fam.SPARSE_SYMPTOM:
                every = loop["eval_every"]
                evals = [t for t in range(s.steps) if t % every == every - 1]
                assert sum(t >= s.onset for t in evals) >= fam.MIN_EVALS_AFTER
                assert sum(t < s.onset for t in evals) >= fam.MIN_EVALS_BEFORE
                assert s.onset * loop["lr"] >= fam.LEARNED  # the policy has learned something to lose
            if s.cause == "reward_hacking":
                assert s.steps - s.onset >= fam.HACK_TAIL
            if s.cause == "token_mismatch":
                assert loop["fault"] in ("token_mismatch", "retokenize")
        tm = [s for s in specs if s.cause == "token_mismatch"]
        assert {s.loop["fault"] for s in tm} == {"token_mismatch", "retokenize"}
        assert any(not s.mismatch_metrics for s in tm) and any(s.mismatch_metrics for s in tm)


# -- generated runs (small sizes) --------------------------------------------------------------------------

SMALL = dict(healthy=4, per_cause=1)


@pytest.fixture(scope="module")
def small() -> list[Scenario]:
    return fam.generate(3, **SMALL)


def test_same_seed_same_runs_whatever_the_scheduling(small):
    assert _fingerprint(fam.generate(3, **SMALL)) == _fingerprint(small)
    specs = fam.draw_specs(3, **SMALL)
    picked = sorted(range(len(specs)), key=lambda i: fam._cost(specs[i]))[:2]
    inline = fam.run_specs([specs[i] for i in picked], workers=1)  # in this process, one by one
    assert _fingerprint(inline) == _fingerprint([small[i] for i in picked])


def test_labels_are_consistent(small):
    specs = fam.draw_specs(3, **SMALL)
    assert [s.name for s in small] == [s.name for s in specs]
    assert Counter(s.cause for s in small) == Counter({None: 4} | {c: 1 for c in CAUSES})
    for sc, spec in zip(small, specs):
        assert sc.family == "toyrl" and sc.task == "toyrl" and sc.events == []
        assert sc.end in ENDS
        assert (sc.onset is None) == (sc.cause is None)
        assert sc.symptom == {"exploration_collapse": "pass_at_k", "reward_hacking": "reward_heldout"}.get(sc.cause)
        steps = sorted(sc.times)
        assert steps == list(range(sc.last_step + 1))
        assert T0 <= sc.times[0] <= T0 + 120
        assert all(b > a for a, b in zip([sc.times[s] for s in steps], [sc.times[s] for s in steps[1:]]))
        for name, points in sc.series.items():
            assert set(points) <= set(steps), name
            assert all(isinstance(v, float) for v in points.values())
        if sc.cause == "trainer_silent":
            assert sc.silent_from is not None and sc.silent_from >= sc.times[sc.last_step]
            assert sc.last_step == sc.onset - 1  # no data from the onset on
            assert sc.end == "finished"
            if "total_steps" in sc.config:
                assert sc.config["total_steps"] > sc.last_step + 1
        else:
            assert sc.silent_from is None
            assert sc.last_step + 1 == spec.steps
            if sc.end == "total_steps" or "total_steps" in sc.config:  # a finished run may announce it too
                assert sc.config["total_steps"] == sc.last_step + 1
        # non-finite values only from a numerical blow-up, and only from its onset
        bad = [s for pts in sc.series.values() for s, v in pts.items() if not math.isfinite(v)]
        if sc.cause == "numerical_blowup":
            assert bad and min(bad) >= sc.onset
        else:
            assert not bad


def test_series_follow_the_mode_and_the_metrics_sent(small):
    specs = fam.draw_specs(3, **SMALL)
    for sc, spec in zip(small, specs):
        names = set(sc.series)
        assert names.isdisjoint(MISMATCH) != spec.mismatch_metrics
        if spec.mismatch_metrics:
            assert MISMATCH <= names
        if spec.loop["synchronous"]:
            assert "stall_s" not in names
            if spec.send_staleness:
                assert set(sc.series["staleness_max"].values()) == {0.0}
            else:
                assert "staleness_mean" not in names
        else:
            assert "stall_s" in names and "staleness_mean" in names
        for s, t in sc.series["step_s"].items():  # the wall clock advances by the loop's step time and more
            if s > 0:
                assert sc.times[s] - sc.times[s - 1] > t


def test_staleness_bound_holds_in_healthy_async_runs_and_breaks_in_stale_ones():
    """A couple of full-length runs: the healthy lazy runs with the largest bounds, and the stale-rollout runs."""
    specs = fam.draw_specs(0)
    healthy = sorted((s for s in specs if s.cause is None and not s.loop["synchronous"]
                      and s.loop["weight_sync"] == "lazy"), key=lambda s: -s.loop["staleness_bound"])[:2]
    stale = [s for s in specs if s.cause == "stale_rollouts"][:2]
    runs = fam.run_specs(healthy + stale)
    for spec, sc in zip(healthy + stale, runs):
        bound = spec.loop["staleness_bound"]
        lag = sc.series["staleness_max"]
        if spec.cause is None:
            assert max(lag.values()) <= bound
            assert max(lag.values()) == bound  # the lag swings up to the bound
        else:
            assert max(v for s, v in lag.items() if s < spec.onset) <= bound
            assert max(v for s, v in lag.items() if s >= spec.onset) > bound + 2
            settled = spec.onset + spec.loop["stale_sync_every"]
            after = [v for s, v in sc.series["staleness_mean"].items() if s >= settled]
            assert np.mean(after) > bound


def test_small_sizes_are_cheap():
    out = fam.generate(5, healthy=1, per_cause=0)
    assert len(out) == 1 and out[0].cause is None
    assert fam.generate(5, healthy=0, per_cause=0) == []
