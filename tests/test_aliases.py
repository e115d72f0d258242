"""Framework key aliases: each framework's per-step dicts (tests/framework_fixtures.py, shaped as its source logs
them) come out under the canonical names with the right units, modes and held-out aggregation."""

from __future__ import annotations

import dataclasses

from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import new_run, write
from tests.framework_fixtures import Fixture, all_fixtures, pipelinerl, verl
from parallax.ingest import aliases
from parallax.ingest.aliases import CAPPED_IMPORTANCE_WEIGHT_MAX, RunAliasing, framework_named, run_aliasing, run_mode
from parallax.ingest.names import CANONICAL_METRICS, INDICATORS, is_valid_name, split_name
from parallax.ingest.points import Batch
from parallax.server.aliasing import AliasService

FIXTURES = {f.name: f for f in all_fixtures()}


class History:
    """What the store answers the alias service: the run's config and the points of earlier batches."""

    def __init__(self, config: dict) -> None:
        self.config = config
        self.points: dict[str, dict[int, float]] = {}

    def get_run(self, run_id: int) -> SimpleNamespace:
        return SimpleNamespace(config=self.config)

    def values_before(self, run_id: int, keys: list[str], step: int) -> dict[str, SimpleNamespace]:
        found = {k: self.previous(k, step) for k in keys}
        return {k: SimpleNamespace(step=p[0], value=p[1], nonfinite=0) for k, p in found.items() if p is not None}

    def add(self, batch: Batch) -> None:
        for name, samples in batch.groups.items():
            for s, v, f, _ in samples:
                if v is not None:
                    self.points.setdefault(name, {})[s] = v

    def previous(self, key: str, step: int) -> tuple[int, float] | None:
        before = [s for s in self.points.get(key, {}) if s < step]
        return (max(before), self.points[key][max(before)]) if before else None


def run_fixture(fx: Fixture, *, declared: bool = True, one_batch: bool = False) -> dict[str, dict[int, float | None]]:
    """Every canonical name's values by step after aliasing the fixture's dicts, one batch per logged dict (as a
    trainer's client sends them) or all in one batch; the raw keys must come back unchanged."""
    config = dict(fx.config) if declared else {k: v for k, v in fx.config.items() if k != "framework"}
    history = History(config)
    service = AliasService(history)  # as the server applies them: what a run's batches made sure is kept
    out: dict[str, dict[int, float | None]] = {}
    chunks = [fx.steps] if one_batch else [[item] for item in fx.steps]
    for chunk in chunks:
        rows = [(k, s, v, 0, 1.0) for s, d in chunk for k, v in d.items()]
        batch = Batch.of(rows)
        service.apply(1, batch)
        for k, s, v, _, _ in rows:
            assert (s, v, 0, 1.0) in batch.groups[k], f"{fx.name}: raw {k} changed"
        history.add(batch)
        for name, samples in batch.groups.items():
            if name in CANONICAL_METRICS or name == CAPPED_IMPORTANCE_WEIGHT_MAX or split_name(name)[1]:
                for s, v, _, _ in samples:
                    out.setdefault(name, {})[s] = v
    return out


@pytest.mark.parametrize("name", sorted(FIXTURES))
@pytest.mark.parametrize("how", ["declared", "detected", "one batch"])
def test_each_framework_feeds_the_indicators_right(name, how):
    fx = FIXTURES[name]
    got = run_fixture(fx, declared=how != "detected", one_batch=how == "one batch")
    for metric, by_step in fx.expected.items():
        assert metric in got, f"{name}: {metric} missing"
        for step, want in by_step.items():
            assert got[metric].get(step) == pytest.approx(want), f"{name}: {metric} at step {step}"
        extra = set(got[metric]) - set(by_step)
        assert not extra, f"{name}: {metric} at unexpected steps {sorted(extra)}"
    for metric in fx.absent + fx.also_absent:
        assert metric not in got, f"{name}: {metric} must not be fed ({got.get(metric)})"
    assert all(is_valid_name(n) for n in got)


def test_detection_finds_each_framework():
    for fx in FIXTURES.values():
        keys = {k for _, d in fx.steps for k in d}
        found, _ = aliases.detect(keys)
        assert found is not None and (found.name == fx.framework or (fx.framework == "slime" and found.name == "miles")), fx.name


def test_every_indicator_is_fed_by_some_framework_and_importance_weight_only_raw():
    fed = {i for fx in FIXTURES.values() for i in fx.feeds}
    assert fed == set(INDICATORS)
    raw = {fx.framework for fx in FIXTURES.values() if "importance_weight_max" in fx.feeds}
    assert raw == {"verl", "skyrl"}  # the others log no maximum, or only a capped one


def test_the_readme_lists_what_each_framework_feeds_panel_by_panel():
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    section = readme[readme.index("### What each framework feeds, panel by panel"):]
    rows = {}
    for line in section.splitlines():
        if line.startswith("| ") and not line.startswith("| framework") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0]] = cells[1:]
        elif rows and not line.startswith("|"):
            break
    columns = [{"importance_weight_max"}, {"staleness_mean", "staleness_max"}, {"stall_s"}, {"trainer_mfu"}, {"pass_at_k"},
               {"pass_at_1"}, {"entropy"}, {"reward_train", "reward_heldout"}]
    fed: dict[str, set[str]] = {}
    for fx in FIXTURES.values():
        title = framework_named(fx.framework).title
        if fx.framework == "trl":
            title = "TRL AsyncGRPOTrainer" if fx.config["trainer_class"].startswith("Async") else "TRL GRPOTrainer"
        fed.setdefault(title, set()).update(fx.expected)
    assert set(rows) == set(fed)
    for title, cells in rows.items():
        for i, names in enumerate(columns):
            if names & fed[title]:
                assert not cells[i].startswith("—"), (title, names)
            elif i == 0 and CAPPED_IMPORTANCE_WEIGHT_MAX in fed[title]:
                assert "capped" in cells[i], (title, cells[i])
            elif i != 2:  # the timing column lists rollout, train and step time too
                assert cells[i].startswith("—"), (title, names, cells[i])


# -- units -----------------------------------------------------------------------------------------


def test_pipelinerl_lag_in_samples_becomes_steps():
    fx = pipelinerl()
    got = run_fixture(fx)
    raw = {s: d["stats/lag"] for s, d in fx.steps if "stats/lag" in d}
    for s, lag in raw.items():
        assert got["staleness_max"][s] == pytest.approx(lag / 64)  # 64 samples per optimizer step
        assert got["staleness_max"][s] <= 4


def test_pipelinerl_lag_in_samples_becomes_steps_by_the_configs_step_size():
    # without stats/samples and stats/completed_steps in the logs, one step's samples come from the config, as
    # PipelineRL computes them (actor.py): finetune.train_batch_size x finetune.gradient_accumulation_passes
    fx = pipelinerl()
    counters = ("stats/samples", "stats/completed_steps")
    bare = dataclasses.replace(fx, steps=[(s, {k: v for k, v in d.items() if k not in counters}) for s, d in fx.steps])
    got = run_fixture(bare)
    raw = {s: d["stats/lag"] for s, d in fx.steps if "stats/lag" in d}
    assert raw and {s: got["staleness_max"][s] for s in raw} == {s: pytest.approx(lag / 64) for s, lag in raw.items()}
    unsized = dataclasses.replace(bare, config={"framework": "pipelinerl"})
    assert "staleness_max" not in run_fixture(unsized)  # samples with no step size are no lag in steps


def test_cumulative_counters_become_increase_per_step():
    run = RunAliasing(framework_named("pipelinerl"))
    batch = Batch.of([("stats/time_waiting_for_data", s, v, 0, 1.0) for s, v in [(3, 10.0), (1, 4.0), (2, 6.5), (6, 2.0), (8, 6.0)]])
    aliases.apply(batch, run, previous=lambda key, step: (0, 3.0) if step == 1 else None)
    # 4 - 3, 6.5 - 4, 10 - 6.5; at step 6 the counter restarted (a resume): the new value is the increase;
    # logged every 2 steps from then on: (6 - 2) / 2 per step.
    assert [(s, v) for s, v, _, _ in batch.groups["stall_s"]] == [(1, 1.0), (2, 2.5), (3, 3.5), (6, 2.0), (8, 2.0)]
    first = Batch.of([("stats/time_waiting_for_data", 0, 5.0, 0, 1.0)])
    aliases.apply(first, run, previous=lambda key, step: None)
    assert "stall_s" not in first.groups  # nothing to diff against yet


def test_percent_and_one_step_late_keys():
    batch = Batch.of([("perf/mfu", 3, 42.0, 0, 1.0), ("trainer_mfu_percent", 4, 40.0, 0, 1.0)])
    aliases.apply(batch, RunAliasing(framework_named("prime-rl")))
    assert batch.groups["trainer_mfu"][0][1] == pytest.approx(0.42)
    batch = Batch.of([("time/step_total", 5, 61.0, 0, 1.0)])
    aliases.apply(batch, RunAliasing(framework_named("roll")))
    assert [(s, v) for s, v, _, _ in batch.groups["step_s"]] == [(4, 61.0)]


def test_capped_keys_never_feed_the_raw_max():
    for fw, key in (("trl", "sampling/importance_sampling_ratio/max"), ("areal", "ppo_actor/update/behave_imp_weight/max"),
                    ("verl", "rollout_corr/rollout_is_max")):
        batch = Batch.of([(key, 1, 3.0, 0, 1.0)])
        aliases.apply(batch, run_aliasing({"framework": fw}))
        assert "importance_weight_max" not in batch.groups and batch.groups[CAPPED_IMPORTANCE_WEIGHT_MAX][0][1] == 3.0, fw
    # TRL's raw ratio (an open PR, not in any release) is not mapped to anything.
    batch = Batch.of([("sampling/raw_importance_sampling_ratio/max", 1, 40.0, 0, 1.0)])
    aliases.apply(batch, run_aliasing({"framework": "trl"}))
    assert "importance_weight_max" not in batch.groups
    seq = run_aliasing({"framework": "verl", "algorithm": {"rollout_correction": {"rollout_is": "sequence"}}})
    batch = Batch.of([("rollout_corr/rollout_is_max", 1, 25.0, 0, 1.0)])
    aliases.apply(batch, seq)
    assert batch.groups["importance_weight_max"][0][1] == 25.0 and CAPPED_IMPORTANCE_WEIGHT_MAX not in batch.groups
    assert run_aliasing({"framework": "verl", "algorithm.rollout_correction.rollout_is": "sequence"}).sequence_is


def test_keys_in_no_source_are_not_mapped():
    gone = {"trl": ["sampling/raw_importance_sampling_ratio/max", "queue_wait_time_s", "step_time"],
            "tinker-cookbook": ["time/waiting_for_stragglers", "time/train"], "roll": ["val_score/all/mean"],
            "areal": ["rollout/reward/avg"], "prime-rl": ["reward/all/mean"], "slime": ["rollout/rewards"],
            "pipelinerl": ["throughput/sec_per_pass"]}
    for fw, keys in gone.items():
        for key in keys:
            assert not aliases.resolve(framework_named(fw), key), (fw, key)


# -- held-out and train pass rates ------------------------------------------------------------------


def test_several_heldout_datasets_are_averaged_and_each_kept():
    run = run_aliasing({"framework": "verl"})
    batch = Batch.of([("val-core/openai/gsm8k/acc/mean@8", 5, 0.5, 0, 1.0), ("val-core/lighteval/MATH/acc/mean@8", 5, 0.3, 0, 1.0),
                      ("val-core/openai/gsm8k/acc/best@8/mean", 5, 0.9, 0, 1.0), ("val-core/lighteval/MATH/acc/best@8/mean", 5, 0.7, 0, 1.0),
                      ("val-aux/openai/gsm8k/reward/mean@8", 5, 0.55, 0, 1.0)])
    aliases.apply(batch, run)
    v = {n: s[0][1] for n, s in batch.groups.items()}
    assert v["pass_at_1"] == pytest.approx(0.4) and v["pass_at_k"] == pytest.approx(0.8)
    assert v['pass_at_1{dataset="openai/gsm8k"}'] == 0.5 and v['pass_at_k{dataset="lighteval/MATH",k="8"}'] == 0.7
    # held-out reward: the reward variable where the score function logs it, else acc (per dataset)
    assert v['reward_heldout{dataset="openai/gsm8k"}'] == 0.55 and v['reward_heldout{dataset="lighteval/MATH"}'] == 0.3
    assert v["reward_heldout"] == pytest.approx((0.55 + 0.3) / 2)


def test_a_frameworks_own_aggregate_wins_over_the_mean():
    batch = Batch.of([("eval/all/avg_score", 2, 0.4, 0, 1.0), ("eval/a/avg_score", 2, 0.9, 0, 1.0), ("eval/b/avg_score", 2, 0.1, 0, 1.0)])
    aliases.apply(batch, RunAliasing(framework_named("skyrl")))
    assert batch.groups["reward_heldout"][0][1] == 0.4 and batch.groups['reward_heldout{dataset="a"}'][0][1] == 0.9
    assert 'reward_heldout{dataset="all"}' not in batch.groups


def test_train_rollout_pass_rates_stay_apart_from_heldout():
    for fw, keys in (("slime", {"passrate/pass@8": 0.7, "passrate/pass@1": 0.3}), ("skyrl", {"reward/avg_pass_at_8": 0.6})):
        batch = Batch.of([(k, 3, v, 0, 1.0) for k, v in keys.items()])
        aliases.apply(batch, run_aliasing({"framework": fw}))
        assert "pass_at_k" not in batch.groups and "pass_at_1" not in batch.groups, fw
        assert batch.groups["pass_at_k_train"][0][1] == keys[next(k for k in keys if k.endswith("8"))]
    assert batch.groups['pass_at_k_train{k="8"}'][0][1] == 0.6


def test_pass_at_k_follows_the_runs_k_and_every_k_is_kept_labelled():
    keys = {"eval/aime-pass@1": 0.3, "eval/aime-pass@4": 0.5, "eval/aime-pass@16": 0.8}
    batch = Batch.of([(k, 1, v, 0, 1.0) for k, v in keys.items()])
    aliases.apply(batch, run_aliasing({"framework": "slime", "k": 16}))
    v = {n: s[0][1] for n, s in batch.groups.items()}
    assert v["pass_at_k"] == 0.8 and v["pass_at_1"] == 0.3 and v['pass_at_k{k="4"}'] == 0.5 and v['pass_at_k{k="16"}'] == 0.8
    batch = Batch.of([(k, 1, v, 0, 1.0) for k, v in keys.items()])
    aliases.apply(batch, run_aliasing({"framework": "slime"}))  # default k = 8: not logged
    assert "pass_at_k" not in batch.groups and 'pass_at_k{k="4"}' in batch.groups


# -- modes ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config, mode",
    [
        ({}, None),
        ({"synchronous": True, "async_training": {"staleness_threshold": 0.1}}, True),  # Parallax's own keys first
        ({"mode": "async", "colocate": True}, False),
        ({"framework": "verl", "async_training": {"staleness_threshold": 0.1, "trigger_parameter_sync_step": 4}}, False),
        ({"framework": "verl", "trainer": {"use_v1": True, "v1": {"trainer_mode": "separate_async"}}}, False),
        ({"framework": "verl", "trainer": {"use_v1": True, "v1": {"trainer_mode": "sync"}}}, True),
        ({"framework": "verl", "trainer": {"use_v1": False, "v1": {"trainer_mode": "colocate_async"}}}, True),
        ({"framework": "verl", "actor_rollout_ref": {"rollout": {"mode": "async"}}}, None),  # the rollout server's mode
        ({"framework": "openrlhf", "train": {"async_enable": True}}, False),
        ({"framework": "openrlhf", "train.async_enable": False}, True),
        ({"framework": "areal", "rollout": {"max_head_offpolicyness": 2}}, False),
        ({"framework": "areal", "rollout": {"max_head_offpolicyness": 0}}, True),
        ({"framework": "slime", "colocate": True}, True),
        ({"framework": "slime", "colocate": False}, None),
        ({"framework": "miles", "colocate": True}, True),
        ({"framework": "roll", "async_generation_ratio": 2}, False),
        ({"framework": "roll", "async_generation_ratio": 0}, True),
        ({"framework": "prime-rl"}, False),
        ({"framework": "prime-rl", "orchestrator": {"max_off_policy_steps": 0}}, True),
        ({"framework": "pipelinerl"}, False),
        ({"framework": "tinker", "async_config": {"max_steps_off_policy": 2}}, False),
        ({"framework": "tinker", "async_config": None}, None),
        ({"framework": "trl", "trainer_class": "GRPOTrainer"}, True),
        ({"framework": "trl", "trainer_class": "AsyncGRPOTrainer"}, False),
        ({"framework": "trl"}, None),
        ({"trainer_class": "AsyncGRPOTrainer"}, None),  # a class name means something to TRL only
        ({"train": {"async_enable": True}}, False),  # no framework named: every framework's keys
        ({"rollout": {"max_head_offpolicyness": 3}}, False),
    ],
)
def test_run_mode_reads_each_frameworks_config(config, mode):
    assert run_mode(config) is mode


def test_synchronous_runs_never_derive_a_stall_from_generation_timers():
    timers = {
        "verl": {"timing_s/gen": 30.0, "timing_s/step": 60.0},
        "openrlhf": {"train/timing/generation": 20.0, "train/timing/make_experience": 5.0, "train/timing/ppo_train": 10.0,
                     "train/timing/broadcast": 1.0, "train/timing/step_total": 36.0},
        "areal": {"timeperf/rollout": 12.0, "timeperf/train_step": 8.0},
        "slime": {"perf/train_wait_time": 25.0, "perf/train_time": 40.0},
        "miles": {"perf/train_wait_time": 25.0, "perf/train_time": 40.0},
        "roll": {"time/step_generate": 30.0, "time/step_train": 20.0},
        "prime-rl": {"time/wait_for_batch": 9.0, "time/step": 20.0},
    }
    for fw, keys in timers.items():
        for config, stalls in (({"framework": fw, "synchronous": True}, False), ({"framework": fw, "mode": "async"}, fw != "roll")):
            batch = Batch.of([(k, 2, v, 0, 1.0) for k, v in keys.items()])
            aliases.apply(batch, run_aliasing(config))
            assert ("stall_s" in batch.groups) is stalls, (fw, config)
            if not stalls:
                assert "rollout_s" in batch.groups, fw


def test_keys_only_async_runs_log_make_the_mode():
    keys = {"timing_s/gen": 4.0, "timing_s/step": 50.0, "fully_async/count/current_param_version": 7.0}
    batch = Batch.of([(k, 3, v, 0, 1.0) for k, v in keys.items()])
    done = aliases.apply(batch, run_aliasing({"framework": "verl"}))
    assert done.synchronous is False and batch.groups["stall_s"][0][1] == 4.0 and "rollout_s" not in batch.groups
    batch = Batch.of([(k, 3, v, 0, 1.0) for k, v in keys.items() if not k.startswith("fully_async")])
    assert aliases.apply(batch, run_aliasing({"framework": "verl"})).synchronous is True


# -- precedence, cost --------------------------------------------------------------------------------


def test_a_canonical_name_sent_directly_is_never_overwritten():
    batch = Batch.of([("actor/entropy", 1, 1.0, 0, 1.0), ("entropy", 1, 2.0, 0, 1.0)])
    aliases.apply(batch, RunAliasing(framework_named("verl")))
    assert batch.groups["entropy"] == [(1, 2.0, 0, 1.0)]


def test_the_first_rule_wins_when_several_keys_feed_one_name():
    batch = Batch.of([("critic/rewards/mean", 1, 0.1, 0, 1.0), ("critic/score/mean", 1, 0.9, 0, 1.0)])
    aliases.apply(batch, RunAliasing(framework_named("verl")))
    assert batch.groups["reward_train"][0][1] == 0.9  # the raw verifier score comes first in the table


def test_unchanged_copies_share_the_raw_list_and_are_recorded_as_links():
    batch = Batch.of([("actor/entropy", s, 1.0, 0, 1.0) for s in range(3)] + [("perf/mfu/actor", 1, 0.3, 0, 1.0)])
    added = aliases.apply(batch, RunAliasing(framework_named("verl"))).added
    assert added == 4 and batch.groups["entropy"] is batch.groups["actor/entropy"]
    assert batch.links == {"entropy": "actor/entropy", "trainer_mfu": "perf/mfu/actor"}
    batch = Batch.of([("perf/mfu", 1, 30.0, 0, 1.0)])
    aliases.apply(batch, RunAliasing(framework_named("prime-rl")))
    assert not batch.links  # converted: a value of its own


def test_keys_of_no_framework_cost_nothing_and_add_nothing():
    batch = Batch.of([(f"m{i}", s, 1.0, 0, 1.0) for i in range(8) for s in range(100)])
    before = batch.count
    done = aliases.apply(batch, RunAliasing(None))
    assert (done.added, done.framework, batch.count) == (0, None, before)
    assert aliases.detect(["entropy", "loss", "kl"]) == (None, 0)  # canonical names alone say nothing


def test_config_names_and_unknown_frameworks():
    assert framework_named("Prime-RL").name == "prime-rl" and framework_named("tinker").name == "tinker-cookbook"
    assert framework_named("OpenRLHF").name == "openrlhf" and framework_named("nope") is None
    assert run_aliasing({"framework": "nope", "k": "x"}) == RunAliasing(None, 8, False, None)
    assert all(t in CANONICAL_METRICS or t == CAPPED_IMPORTANCE_WEIGHT_MAX for t in aliases.ALIAS_TARGETS)


def test_every_row_names_its_source_file():
    for fw in aliases.table():
        assert fw["repository"] and fw["commit"]
        for row in fw["rules"] + fw["derived"]:
            assert row["source"] and ("/" in row["source"] or row["source"].endswith(".py")), (fw["framework"], row)


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


def test_a_verl_run_through_the_api(client):
    fx = verl()
    run = new_run(client, name="verl-fixture", config=fx.config)
    for s, d in fx.steps:
        r = client.post(f"/api/v1/runs/{run}/metrics", json={"points": [{"step": s, "metrics": d}]})
        assert r.status_code == 200, r.text
    names = ["pass_at_k", "pass_at_1", "reward_heldout", 'reward_heldout{dataset="openai/gsm8k"}', "rollout_s", "entropy"]
    series = client.get(f"/api/v1/runs/{run}/series", params={"metric": names}).json()["series"]
    for name in names:
        want = fx.expected[name]
        assert series[name]["steps"] == sorted(want), name
        assert series[name]["values"] == pytest.approx([want[s] for s in sorted(want)]), name
    latest = {m["name"] for m in client.get(f"/api/v1/runs/{run}/metrics").json()["metrics"]}
    assert "stall_s" not in latest and "importance_weight_max_capped" in latest


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
    post([{"step": 3, "metrics": {"stats/time_waiting_for_data": 7.0}}])
    post([{"step": 3, "metrics": {"stats/time_waiting_for_data": 7.0}}])  # a retry: same delta again
    s = client.get(f"/api/v1/runs/{run}/series", params={"metric": "stall_s"}).json()["series"]["stall_s"]
    assert s["steps"] == [1, 3] and s["values"] == [2.0, 2.0]


def test_an_undeclared_run_learns_it_is_asynchronous(client):
    run = new_run(client, name="verl-async")
    post = lambda s, d: client.post(f"/api/v1/runs/{run}/metrics", json={"points": [{"step": s, "metrics": d}]})  # noqa: E731
    post(1, {"timing_s/gen": 2.0, "timing_s/step": 30.0, "actor/entropy": 1.0, "fully_async/count/current_param_version": 1.0})
    post(2, {"timing_s/gen": 3.0, "timing_s/step": 30.0, "actor/entropy": 1.0})  # no marker in this batch
    s = client.get(f"/api/v1/runs/{run}/series", params={"metric": "stall_s"}).json()["series"]["stall_s"]
    assert s["steps"] == [1, 2]


def test_an_undeclared_slime_run_whose_wait_stays_idle_short_is_read_as_asynchronous(client):
    # train_async.py: the trainer's wait is ~0 while rollouts keep ahead, and the config names no mode
    run = new_run(client, name="slime-async", config={"framework": "slime"})
    post = lambda s, d: client.post(f"/api/v1/runs/{run}/metrics", json={"points": [{"step": s, "metrics": d}]})  # noqa: E731
    waits = {1: 30.0, 2: 0.3, 3: 0.3, 4: 0.2, 5: 0.3, 6: 0.3, 7: 40.0, 8: 0.3}  # step 1: the queue fills
    for s, w in waits.items():
        post(s, {"perf/train_wait_time": w, "perf/train_time": 50.0})
        got = client.get(f"/api/v1/runs/{run}/series", params={"metric": ["stall_s", "rollout_s"]}).json()["series"]
        # until the 5th idle-short wait (step 6) the mode is unknown: the wait is neither a generation nor a stall
        assert got["stall_s"]["steps"] == ([] if s < 6 else list(range(1, s + 1))) and not got["rollout_s"]["steps"], s
    # then the wait is the stall, every one of them: the queue filling at step 1, the long wait at step 7
    assert got["stall_s"]["steps"] == list(waits) and got["stall_s"]["values"] == list(waits.values())


def test_a_synchronous_slime_run_is_read_as_synchronous_at_its_tenth_generation_wait():
    # train.py: the trainer waits for the whole generation at every step; a short one now and then decides nothing
    service = AliasService(History({"framework": "slime"}))
    waits = [35.0, 1.0, 36.0, 34.0, 1.0, 35.0, 33.0, 37.0, 1.0, 35.0, 34.0, 36.0, 35.0, 34.0]
    for s, w in enumerate(waits, 1):
        batch = Batch.of([("perf/train_wait_time", s, w, 0, 1.0), ("perf/train_time", s, 50.0, 0, 1.0)])
        service.apply(1, batch)
        # three short waits, then the 10th long one at step 13: synchronous from then on, the wait its generation
        assert "stall_s" not in batch.groups and ("rollout_s" in batch.groups) is (s >= 13), s
    assert service.run(1).synchronous is True
    # the decision is made in step order inside a batch too (an import, a catch-up): here the 10th long wait
    # comes before the 5th short one, so the batch is read as synchronous, as step-by-step batches would be
    rows = [r for s, w in enumerate(waits + [0.2] * 5, 1) for r in
            (("perf/train_wait_time", s, w, 0, 1.0), ("perf/train_time", s, 50.0, 0, 1.0))]
    assert aliases.apply(Batch.of(rows), aliases.run_aliasing({"framework": "slime"})).learned is True


def test_aliases_table_endpoint(client):
    doc = client.get("/api/v1/aliases").json()
    names = [f["framework"] for f in doc["frameworks"]]
    assert {"verl", "trl", "openrlhf", "areal", "pipelinerl", "prime-rl", "slime", "miles", "skyrl", "roll", "tinker-cookbook"} <= set(names)
    prime = next(f for f in doc["frameworks"] if f["framework"] == "prime-rl")
    mfu = next(r for r in prime["rules"] if r["key"] == "perf/mfu")
    assert mfu["canonical"] == "trainer_mfu" and "percent" in mfu["unit"] and mfu["source"] == "src/prime_rl/trainer/rl/train.py"
    trl = next(f for f in doc["frameworks"] if f["framework"] == "trl")
    capped = next(r for r in trl["rules"] if r["key"] == "sampling/importance_sampling_ratio/max")
    assert capped["canonical"] == CAPPED_IMPORTANCE_WEIGHT_MAX and capped["source"] == "trl/trainer/grpo_trainer.py"
    verl_ = next(f for f in doc["frameworks"] if f["framework"] == "verl")
    gen = [r for r in verl_["rules"] if r["key"] == "timing_s/gen"]
    assert {r["canonical"]: r["mode"] for r in gen} == {"rollout_s": "synchronous runs only", "stall_s": "asynchronous runs only"}
    assert verl_["modes"]["config_keys"][0]["key"] == "async_training"


def test_store_values_before(store):
    run, _ = store.create_run("p", "r", {}, [])
    write(store, run.id, [("c", s, float(s * 10), 0, 1.0) for s in (1, 3, 5)] + [("d", 2, None, 1, 1.0)])
    got = store.values_before(run.id, ["c", "d", "absent"], 5)
    assert got["c"].step == 3 and got["c"].value == 30.0
    assert got["d"].nonfinite == 1 and "absent" not in got
    assert store.values_before(run.id, ["c"], 1) == {}
