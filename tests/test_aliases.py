"""Framework key aliases: key sets from each framework of the reference table come out under canonical names, right units."""

from __future__ import annotations

import pytest

from tests.conftest import new_run, write
from ingest import aliases
from ingest.aliases import CAPPED_IMPORTANCE_WEIGHT_MAX, RunAliasing, framework_named, run_aliasing
from ingest.names import CANONICAL_METRICS, INDICATORS, is_valid_name
from ingest.points import Batch

# Per framework: keys it logs (reference §B, from its source) with a value, and what each
# canonical name must then hold. Values are distinct so a wrong mapping shows.
FRAMEWORK_KEYS: dict[str, tuple[dict[str, float], dict[str, float]]] = {
    "verl": (
        {
            "rollout_corr/rollout_is_max": 3.0,
            "training/off_policy/trajectory_staleness/mean": 1.5,
            "training/off_policy/trajectory_staleness/max": 4.0,
            "fully_async/trainer/idle_ratio": 0.25,
            "timing_s/step": 12.0,
            "timing_s/gen": 7.0,
            "timing_s/update_actor": 4.0,
            "perf/mfu/actor": 0.41,
            "val-core/gsm8k/acc/best@8/mean": 0.8,
            "val-core/gsm8k/acc/mean@8": 0.55,
            "actor/entropy": 1.7,
            "critic/score/mean": 0.6,
            "actor/pg_clipfrac": 0.1,
            "actor/grad_norm": 2.5,
        },
        {
            CAPPED_IMPORTANCE_WEIGHT_MAX: 3.0,  # token mode (the default): logged after truncation
            "staleness_mean": 1.5,
            "staleness_max": 4.0,
            "stall_s": 3.0,  # idle ratio x step time
            "step_s": 12.0,
            "rollout_s": 7.0,
            "train_s": 4.0,
            "trainer_mfu": 0.41,
            "pass_at_k": 0.8,
            'pass_at_k{k="8"}': 0.8,
            "pass_at_1": 0.55,
            "reward_heldout": 0.55,
            "entropy": 1.7,
            "reward_train": 0.6,
            "clip_frac": 0.1,
            "grad_norm": 2.5,
        },
    ),
    "openrlhf": (
        {
            "train/timing/step_total": 20.0,
            "train/timing/make_experience": 9.0,
            "train/timing/ppo_train": 6.0,
            "train/timing/broadcast": 1.0,
            "train/timing/generation": 8.0,
            "eval/eval_math_500_pass1": 0.4,
            "eval/eval_math_500_pass8": 0.7,
            "train/entropy_loss": 1.1,
            "train/rollout/reward_mean": 0.35,
            "train/ppo_clip_ratio": 0.05,
        },
        {
            "stall_s": 4.0,  # 20 - 9 - 6 - 1
            "step_s": 20.0,
            "rollout_s": 8.0,
            "train_s": 6.0,
            "pass_at_1": 0.4,
            "pass_at_k": 0.7,
            "reward_heldout": 0.4,
            "entropy": 1.1,
            "reward_train": 0.35,
            "clip_frac": 0.05,
        },
    ),
    "trl": (
        {
            "train/sampling/importance_sampling_ratio/max": 3.0,
            "train/sampling/sampling_logp_difference/max": 0.9,
            "train/queue_wait_time_s": 2.5,
            "train/entropy": 0.8,
            "train/reward": 0.45,
            "eval/reward": 0.3,
            "train/completions/mean_length": 512.0,
        },
        {
            CAPPED_IMPORTANCE_WEIGHT_MAX: 3.0,
            "logprob_diff_max": 0.9,
            "stall_s": 2.5,
            "entropy": 0.8,
            "reward_train": 0.45,
            "reward_heldout": 0.3,
            "response_length_mean": 512.0,
        },
    ),
    "areal": (
        {
            "ppo_actor/update/behave_imp_weight/max": 5.5,
            "ppo_actor/update/version_stats/sample_staleness_theta_avg": 1.2,
            "ppo_actor/update/version_stats/sample_staleness_theta_max": 3.0,
            "timeperf/rollout": 2.0,
            "timeperf/train_step": 6.0,
            "ppo_actor/update/entropy/avg": 1.4,
            "rollout/reward": 0.5,
            "eval-rollout/reward": 0.42,
        },
        {
            "importance_weight_max": 5.5,
            "staleness_mean": 1.2,
            "staleness_max": 3.0,
            "stall_s": 2.0,
            "train_s": 6.0,
            "entropy": 1.4,
            "reward_train": 0.5,
            "reward_heldout": 0.42,
        },
    ),
    "pipelinerl": (
        {
            "stats/lag_mean": 1.1,
            "stats/lag_max": 3.0,
            "throughput/sec_per_step": 9.0,
            "actor/test_success_mean": 0.33,
            "actor/test_reward_mean": 0.31,
            "rl/entropy": 0.95,
            "actor/reward_mean": 0.6,
        },
        {
            "staleness_mean": 1.1,
            "staleness_max": 3.0,
            "step_s": 9.0,
            "pass_at_1": 0.33,
            "reward_heldout": 0.31,
            "entropy": 0.95,
            "reward_train": 0.6,
        },
    ),
    "prime-rl": (
        {
            "off_policy/mean": 2.0,
            "off_policy/max": 6.0,
            "time/wait_for_batch": 1.5,
            "time/step": 10.0,
            "perf/mfu": 38.0,
            "eval/aime/effective/default/pass@8": 0.6,
            "eval/aime/effective/default/pass@1": 0.2,
            "eval/aime/effective/default/avg@16": 0.21,
            "entropy/all/mean": 0.7,
            "train/agg/all/default/reward/mean": 0.4,
        },
        {
            "staleness_mean": 2.0,
            "staleness_max": 6.0,
            "stall_s": 1.5,
            "step_s": 10.0,
            "trainer_mfu": 0.38,  # percent -> fraction
            "pass_at_k": 0.6,
            "pass_at_1": 0.2,
            "reward_heldout": 0.21,
            "entropy": 0.7,
            "reward_train": 0.4,
        },
    ),
    "slime": (
        {
            "perf/train_wait_time": 3.5,
            "perf/train_time": 20.0,
            "perf/step_time": 24.0,
            "passrate/pass@8": 0.75,
            "passrate/pass@1": 0.4,
            "eval/aime": 0.3,
            "eval/step": 40.0,  # the x axis, not a metric
            "train/entropy_loss": 0.6,
            "rollout/raw_reward": 0.45,
        },
        {
            "stall_s": 3.5,
            "train_s": 20.0,
            "step_s": 24.0,
            "pass_at_k": 0.75,
            "pass_at_1": 0.4,
            "reward_heldout": 0.3,
            "entropy": 0.6,
            "reward_train": 0.45,
        },
    ),
    "miles": (
        {
            "rollout/fully_async/avg_staleness": 0.8,
            "rollout/fully_async/max_staleness": 2.0,
            "perf/train_wait_time": 1.0,
            "perf/actor_train_mfu": 0.22,
            "rollout/tito_session_mismatch_rate/v1": 0.01,
            "passrate/pass@8": 0.7,
            "train/entropy_loss": 0.5,
            "rollout/raw_reward": 0.4,
            "eval/aime": 0.25,
        },
        {
            "staleness_mean": 0.8,
            "staleness_max": 2.0,
            "stall_s": 1.0,
            "trainer_mfu": 0.22,
            "token_mismatch_rate": 0.01,
            "pass_at_k": 0.7,
            "entropy": 0.5,
            "reward_train": 0.4,
            "reward_heldout": 0.25,
        },
    ),
    "skyrl": (
        {
            "policy/loss_metrics/is_ratio_max": 7.0,
            "async/staleness_mean": 0.9,
            "async/staleness_max": 2.0,
            "timing/wait_for_generation_buffer": 4.0,
            "timing/step": 30.0,
            "eval/all/pass_at_8": 0.66,
            "eval/all/avg_score": 0.4,
            "policy/policy_entropy": 1.3,
            "reward/avg_raw_reward": 0.55,
        },
        {
            "importance_weight_max": 7.0,  # raw: clipped only at e^20
            "staleness_mean": 0.9,
            "staleness_max": 2.0,
            "stall_s": 4.0,
            "step_s": 30.0,
            "pass_at_k": 0.66,
            "reward_heldout": 0.4,
            "entropy": 1.3,
            "reward_train": 0.55,
        },
    ),
    "roll": (
        {
            "actor/ratio_max@max": 9.0,  # the PPO ratio: must not become importance_weight_max
            "time/step_generate": 5.0,
            "time/step_train": 7.0,
            "time/step_total": 13.0,
            "val_correct/all/mean": 0.37,
            "val_score/all/mean": 0.39,
            "critic/entropy/mean": 1.05,
            "critic/score/mean": 0.52,
        },
        {
            "rollout_s": 5.0,
            "train_s": 7.0,
            "step_s": 13.0,
            "pass_at_1": 0.37,
            "reward_heldout": 0.39,
            "entropy": 1.05,
            "reward_train": 0.52,
        },
    ),
    "tinker-cookbook": (
        {
            "sampling_client/step_mean": 7.0,
            "sampling_client/step_min": 5.0,
            "time/train": 3.0,
            "optim/entropy": 0.9,
            "env/all/reward/total": 0.47,
            "test/env/all/reward/total": 0.41,
        },
        {
            "staleness_mean": 3.0,  # step 10 - 7
            "staleness_max": 5.0,  # step 10 - 5
            "train_s": 3.0,
            "entropy": 0.9,
            "reward_train": 0.47,
            "reward_heldout": 0.41,
        },
    ),
}

STEP = 10


def aliased(keys: dict[str, float], run: RunAliasing, step: int = STEP) -> Batch:
    batch = Batch.of([(k, step, v, 0, 1.0) for k, v in keys.items()])
    aliases.apply(batch, run)
    return batch


def value(batch: Batch, name: str) -> float:
    samples = batch.groups[name]
    assert len(samples) == 1, name
    return samples[0][1]


@pytest.mark.parametrize("framework", sorted(FRAMEWORK_KEYS))
@pytest.mark.parametrize("how", ["declared", "detected"])
def test_each_framework_comes_out_under_canonical_names_with_the_right_unit(framework, how):
    keys, expected = FRAMEWORK_KEYS[framework]
    fw = framework_named(framework) if how == "declared" else None
    batch = aliased(keys, RunAliasing(fw))
    for name, want in expected.items():
        assert name in batch.groups, f"{framework}: {name} missing"
        assert value(batch, name) == pytest.approx(want), f"{framework}: {name}"
    for key, v in keys.items():  # the raw keys stay, unchanged
        assert value(batch, key) == v
    # No canonical name was made up that the framework's keys do not give.
    made = {n for n in batch.groups if n not in keys and not n.startswith("pass_at_k{")}
    assert made <= set(expected), made - set(expected)
    if "pass_at_k" in expected:
        assert 'pass_at_k{k="8"}' in batch.groups
    if how == "detected":
        found, score = aliases.detect(keys)
        assert found is not None and (found.name == framework or (framework == "slime" and found.name == "miles"))


def test_every_indicator_is_reachable_from_some_framework():
    reached = set()
    for keys, expected in FRAMEWORK_KEYS.values():
        reached |= set(expected)
    assert set(INDICATORS) <= reached


def test_capped_keys_never_feed_the_raw_max():
    trl = framework_named("trl")
    batch = aliased({"sampling/importance_sampling_ratio/max": 3.0}, RunAliasing(trl))
    assert "importance_weight_max" not in batch.groups and value(batch, CAPPED_IMPORTANCE_WEIGHT_MAX) == 3.0
    # TRL's raw ratio (PR #5243) is the real max, and wins over nothing else.
    batch = aliased({"sampling/raw_importance_sampling_ratio/max": 40.0, "sampling/importance_sampling_ratio/max": 3.0}, RunAliasing(trl))
    assert value(batch, "importance_weight_max") == 40.0 and value(batch, CAPPED_IMPORTANCE_WEIGHT_MAX) == 3.0
    # verl: truncated in token mode (the default); sequence-level IS logs the unclamped max.
    verl = run_aliasing({"framework": "verl"})
    assert CAPPED_IMPORTANCE_WEIGHT_MAX in aliased({"rollout_corr/rollout_is_max": 2.0}, verl).groups
    seq = run_aliasing({"framework": "verl", "algorithm": {"rollout_correction": {"rollout_is": "sequence"}}})
    batch = aliased({"rollout_corr/rollout_is_max": 25.0}, seq)
    assert value(batch, "importance_weight_max") == 25.0 and CAPPED_IMPORTANCE_WEIGHT_MAX not in batch.groups
    assert run_aliasing({"framework": "verl", "algorithm.rollout_correction.rollout_is": "sequence"}).sequence_is


def test_pass_at_k_follows_the_runs_k_and_every_k_is_kept_labelled():
    keys = {"passrate/pass@1": 0.3, "passrate/pass@4": 0.5, "passrate/pass@16": 0.8}
    batch = aliased(keys, run_aliasing({"framework": "slime", "k": 16}))
    assert value(batch, "pass_at_k") == 0.8 and value(batch, "pass_at_1") == 0.3
    assert value(batch, 'pass_at_k{k="4"}') == 0.5 and value(batch, 'pass_at_k{k="16"}') == 0.8
    assert all(is_valid_name(n) for n in batch.groups)
    batch = aliased(keys, run_aliasing({"framework": "slime"}))  # default k = 8: not logged
    assert "pass_at_k" not in batch.groups and 'pass_at_k{k="4"}' in batch.groups


def test_a_canonical_name_sent_directly_is_never_overwritten():
    batch = aliased({"actor/entropy": 1.0, "entropy": 2.0}, RunAliasing(framework_named("verl")))
    assert value(batch, "entropy") == 2.0


def test_the_first_rule_wins_when_several_keys_feed_one_name():
    batch = aliased({"critic/rewards/mean": 0.1, "critic/score/mean": 0.9}, RunAliasing(framework_named("verl")))
    assert value(batch, "reward_train") == 0.9  # the raw verifier score comes first in the table
    batch = aliased({"stats/lag": 5.0}, RunAliasing(framework_named("pipelinerl")))
    assert value(batch, "staleness_max") == 5.0 and "staleness_mean" not in batch.groups  # old stats/lag was a max


def test_cumulative_counters_become_per_step_deltas():
    pipelinerl = RunAliasing(framework_named("pipelinerl"))
    batch = Batch.of([("stats/time_waiting_for_data", s, v, 0, 1.0) for s, v in [(3, 10.0), (1, 4.0), (2, 6.5), (4, 2.0)]])
    aliases.apply(batch, pipelinerl, previous=lambda key, step: 3.0 if step == 1 else None)
    # 4 - 3, 6.5 - 4, 10 - 6.5; at step 4 the counter restarted (a resume): the new value is the increment.
    assert [(s, v) for s, v, _, _ in batch.groups["stall_s"]] == [(1, 1.0), (2, 2.5), (3, 3.5), (4, 2.0)]
    first = Batch.of([("stats/time_waiting_for_data", 0, 5.0, 0, 1.0)])
    aliases.apply(first, pipelinerl, previous=lambda key, step: None)
    assert "stall_s" not in first.groups  # nothing to diff against yet


def test_keys_of_no_framework_cost_nothing_and_add_nothing():
    batch = Batch.of([(f"m{i}", s, 1.0, 0, 1.0) for i in range(8) for s in range(100)])
    before = batch.count
    added, fw, _ = aliases.apply(batch, RunAliasing(None))
    assert (added, fw, batch.count) == (0, None, before)
    assert aliases.detect(["entropy", "loss", "kl"]) == (None, 0)  # canonical names alone say nothing


def test_config_names_and_unknown_frameworks():
    assert framework_named("Prime-RL").name == "prime-rl" and framework_named("tinker").name == "tinker-cookbook"
    assert framework_named("OpenRLHF").name == "openrlhf" and framework_named("nope") is None
    assert run_aliasing({"framework": "nope", "k": "x"}) == RunAliasing(None, 8, False)
    assert all(t in CANONICAL_METRICS or t == CAPPED_IMPORTANCE_WEIGHT_MAX for t in aliases.ALIAS_TARGETS)


# -- through the API and the store --------------------------------------------------------------


def test_json_ingest_stores_raw_and_canonical_names(client):
    run = new_run(client, config={"framework": "prime-rl"})
    pts = [{"step": s, "metrics": {"perf/mfu": 40.0, "entropy/all/mean": 0.5 + s}} for s in range(3)]
    r = client.post(f"/api/v1/runs/{run}/metrics", json={"points": pts})
    assert r.status_code == 200 and r.json() == {"accepted": 6, "replaced": 0, "non_finite": 0, "aliased": 6}
    s = client.get(f"/api/v1/runs/{run}/series", params={"metric": ["trainer_mfu", "perf/mfu", "entropy"]}).json()["series"]
    assert s["trainer_mfu"]["values"] == [0.4, 0.4, 0.4] and s["perf/mfu"]["values"] == [40.0, 40.0, 40.0]
    assert s["entropy"]["steps"] == [0, 1, 2] and s["entropy"]["values"] == [0.5, 1.5, 2.5]
    # A retried batch changes nothing, aliases included.
    assert client.post(f"/api/v1/runs/{run}/metrics", json={"points": pts}).json()["replaced"] == 0


def test_detected_framework_without_config(client):
    run = new_run(client, name="undeclared")
    pts = [{"step": 1, "metrics": {"actor/entropy": 1.25, "critic/score/mean": 0.5, "timing_s/step": 3.0}}]
    assert client.post(f"/api/v1/runs/{run}/metrics", json={"points": pts}).json()["aliased"] == 3
    latest = {m["name"]: m["value"] for m in client.get(f"/api/v1/runs/{run}/metrics").json()["metrics"]}
    assert latest["entropy"] == 1.25 and latest["reward_train"] == 0.5 and latest["step_s"] == 3.0


def test_cumulative_counter_across_batches_uses_the_stored_previous_value(client):
    run = new_run(client, name="pipelinerl", config={"framework": "pipelinerl"})
    post = lambda pts: client.post(f"/api/v1/runs/{run}/metrics", json={"points": pts})  # noqa: E731
    post([{"step": s, "metrics": {"stats/time_waiting_for_data": w}} for s, w in [(0, 1.0), (1, 3.0)]])
    post([{"step": 2, "metrics": {"stats/time_waiting_for_data": 7.0}}])
    post([{"step": 2, "metrics": {"stats/time_waiting_for_data": 7.0}}])  # a retry: same delta again
    s = client.get(f"/api/v1/runs/{run}/series", params={"metric": "stall_s"}).json()["series"]["stall_s"]
    assert s["steps"] == [1, 2] and s["values"] == [2.0, 4.0]


def test_aliases_table_endpoint(client):
    doc = client.get("/api/v1/aliases").json()
    names = [f["framework"] for f in doc["frameworks"]]
    assert {"verl", "trl", "openrlhf", "areal", "pipelinerl", "prime-rl", "slime", "miles", "skyrl", "roll", "tinker-cookbook"} <= set(names)
    prime = next(f for f in doc["frameworks"] if f["framework"] == "prime-rl")
    mfu = next(r for r in prime["rules"] if r["key"] == "perf/mfu")
    assert mfu["canonical"] == "trainer_mfu" and "percent" in mfu["unit"]
    trl = next(f for f in doc["frameworks"] if f["framework"] == "trl")
    capped = next(r for r in trl["rules"] if r["key"] == "sampling/importance_sampling_ratio/max")
    assert capped["canonical"] == CAPPED_IMPORTANCE_WEIGHT_MAX


def test_store_values_before(store):
    run, _ = store.create_run("p", "r", {}, [])
    write(store, run.id, [("c", s, float(s * 10), 0, 1.0) for s in (1, 3, 5)] + [("d", 2, None, 1, 1.0)])
    got = store.values_before(run.id, ["c", "d", "absent"], 5)
    assert got["c"].step == 3 and got["c"].value == 30.0
    assert got["d"].nonfinite == 1 and "absent" not in got
    assert store.values_before(run.id, ["c"], 1) == {}
