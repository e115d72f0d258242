"""The independent labelled-run family: deterministic per seed, labels consistent, key sets as documented."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from parallax.alerts.suites import CAUSES, ENDS, T0, Scenario
from parallax.alerts.suites import independent as ind

CANONICAL = {
    "importance_weight_max", "staleness_mean", "staleness_max", "stall_s", "rollout_s", "train_s", "step_s",
    "trainer_mfu", "pass_at_k", "pass_at_1", "entropy", "reward_train", "reward_heldout", "padding_ratio",
    "response_length_mean", "response_length_std", "logprob_diff_max", "token_mismatch_rate", "prefix_break_rate",
    "kl", "clip_frac", "grad_norm", "loss", "policy_version",
}


@pytest.fixture(scope="module")
def suites() -> dict[int, list[Scenario]]:
    return {seed: ind.generate(seed) for seed in (0, 1, 1001)}


def _fingerprint(suite: list[Scenario]) -> list[tuple]:
    # repr keeps NaN/inf comparable (nan != nan, but repr(nan) == repr(nan))
    return [(s.name, s.cause, s.onset, s.variant, repr(s.series), repr(s.times), repr(s.config), s.events,
             repr(s.silent_from), s.symptom, s.end, s.family) for s in suite]


def test_same_seed_same_suite(suites):
    assert _fingerprint(ind.generate(0)) == _fingerprint(suites[0])


def test_another_seed_another_suite(suites):
    a, b = _fingerprint(suites[0]), _fingerprint(suites[1])
    assert a != b
    assert {x[4] for x in a}.isdisjoint({x[4] for x in b})  # no run's series repeats across seeds


def test_sizes_and_every_cause(suites):
    for suite in suites.values():
        counts = Counter(s.cause for s in suite)
        assert counts[None] == 40
        assert {c: counts[c] for c in CAUSES} == {c: 8 for c in CAUSES}
        assert set(counts) == set(CAUSES) | {None}
        assert len({s.name for s in suite}) == len(suite)
        for cause in CAUSES:  # several variants of each fault
            assert len({s.variant for s in suite if s.cause == cause}) >= min(3, len(ind.VARIANTS[cause]))
    small = ind.generate(7, healthy=3, per_cause=2)
    counts = Counter(s.cause for s in small)
    assert counts[None] == 3 and all(counts[c] == 2 for c in CAUSES)


def test_labels_consistent(suites):
    for suite in suites.values():
        for s in suite:
            assert s.family == "independent"
            assert (s.onset is None) == (s.cause is None), s.name
            assert s.symptom == {"exploration_collapse": "pass_at_k", "reward_hacking": "reward_heldout"}.get(s.cause)
            assert s.series and all(s.series.values()), s.name
            steps = {st for pts in s.series.values() for st in pts}
            assert steps <= set(s.times), f"{s.name}: steps with data but no time"
            assert set(s.times) == set(range(s.last_step + 1)), s.name
            ordered = [s.times[i] for i in sorted(s.times)]
            assert all(b > a for a, b in zip(ordered, ordered[1:])), s.name
            assert T0 <= ordered[0] < T0 + 2 * 3600
            assert all(0 <= st <= s.last_step and kind == "resume" for st, kind in s.events)
            assert 150 <= s.last_step + 1 <= 600 or s.cause == "trainer_silent"
            if s.cause == "trainer_silent":
                assert s.silent_from is not None and s.silent_from > max(s.times.values())
                assert s.last_step == s.onset - 1, "a dead trainer sends nothing from the onset on"
                assert s.onset >= 60
                total = ind.total_steps_of(s.config)
                assert total is None or total >= s.onset + 60
            else:
                assert s.silent_from is None
                assert s.end in ENDS
                if s.cause is not None:
                    assert 60 <= s.onset <= s.last_step + 1 - 60, s.name
                if s.end == "total_steps":
                    assert ind.total_steps_of(s.config) == s.last_step + 1, s.name


def test_dead_trainers_with_and_without_a_total(suites):
    silent = [s for suite in suites.values() for s in suite if s.cause == "trainer_silent"]
    with_total = [s for s in silent if ind.total_steps_of(s.config) is not None]
    assert with_total and len(with_total) < len(silent)
    ends = Counter(s.end for suite in suites.values() for s in suite if s.cause != "trainer_silent")
    assert ends["finished"] and ends["total_steps"]


def test_non_finite_values_only_in_blowups_from_the_onset(suites):
    for suite in suites.values():
        for s in suite:
            bad = [st for pts in s.series.values() for st, v in pts.items() if not math.isfinite(v)]
            if s.cause == "numerical_blowup":
                assert bad and min(bad) >= s.onset, s.name
            else:
                assert not bad, s.name


def test_framework_key_sets(suites):
    used = Counter()
    for suite in suites.values():
        fw_runs = [s for s in suite if s.config.get("framework")]
        assert 0.25 <= len(fw_runs) / len(suite) <= 0.55
        for s in suite:
            fw = s.config.get("framework")
            used[fw] += 1
            if fw is None:
                extra = [k for k in s.series if k not in CANONICAL and not k.startswith("heldout/")]
                assert not extra, f"{s.name}: {extra}"
                continue
            for key in s.series:
                known, canonical = ind.framework_key(fw, key)
                assert known, f"{s.name}: {key} is not in the {fw} key set"
                if canonical is not None and canonical != key:
                    assert canonical not in s.series, f"{s.name}: {key} sent with its canonical twin {canonical}"
        assert set(ind.FRAMEWORKS) <= {s.config.get("framework") for s in suite}
    assert used[None] > 0


def test_framework_key_matching_prefers_the_specific_template():
    assert ind.framework_key("slime", "eval/aime-pass@8") == (True, "pass_at_k")
    assert ind.framework_key("slime", "eval/aime") == (True, "reward_heldout")
    assert ind.framework_key("prime-rl", "eval/math-env/effective/default/pass@1") == (True, "pass_at_1")
    assert ind.framework_key("prime-rl", "eval/math-env/effective/default/pass@8") == (True, "pass_at_k")
    assert ind.framework_key("verl", "val-core/openai/gsm8k/acc/best@8/mean") == (True, "pass_at_k")
    assert ind.framework_key("skyrl", "eval/all/avg_score") == (True, "reward_heldout")
    assert ind.framework_key("trl", "entropy") == (True, "entropy")
    assert ind.framework_key("trl", "actor/entropy") == (False, None)


def test_faults_carry_their_evidence(suites):
    """A fault run logs the metric its symptom shows in (canonically, or under a framework key)."""
    evidence = {
        "stale_rollouts": {"staleness_mean", "staleness_max"},
        "token_mismatch": {"importance_weight_max", "logprob_diff_max", "token_mismatch_rate", "prefix_break_rate",
                           "training/rollout_probs_diff_max", "sampling/importance_sampling_ratio/max",
                           "ppo_actor/update/behave_imp_weight/max", "mismatch_kl/all/max",
                           "train/train_rollout_logprob_abs_diff"},
        "unbalanced_groups": {"stall_s", "timeperf/rollout", "perf/train_wait_time"},
        "padding_imbalance": {"trainer_mfu"},
        "exploration_collapse": {"pass_at_k"},
        "reward_hacking": {"reward_heldout", "pass_at_1"},
        "numerical_blowup": {"loss", "grad_norm"},
    }
    for suite in suites.values():
        for s in suite:
            if s.cause not in evidence:
                continue
            fw = s.config.get("framework")
            names = set(s.series) | ({ind.framework_key(fw, k)[1] for k in s.series} if fw else set())
            assert names & evidence[s.cause], s.name
            if s.cause == "exploration_collapse":
                assert "entropy" in names and names & {"pass_at_1", "reward_heldout"}, s.name


def test_modes_marked_as_users_do(suites):
    runs = [s for suite in suites.values() for s in suite]
    canonical_sync = [s for s in runs if s.config.get("framework") is None and not any(
        v for k, v in s.series.get("staleness_mean", {}).items()) and "staleness_bound" not in s.config
        and "mode" not in s.config]
    assert any(s.config.get("synchronous") is True for s in canonical_sync)
    assert any("synchronous" not in s.config for s in canonical_sync)
    canonical_async = [s for s in runs if s.config.get("framework") is None and "staleness_mean" in s.series
                       and any(v > 0 for v in s.series["staleness_mean"].values())]
    assert any("staleness_bound" in s.config for s in canonical_async)
    assert any("staleness_bound" not in s.config for s in canonical_async)
    assert any(s.events for s in runs)


def test_unbalanced_groups_idle_the_trainer_as_documented(suites):
    """rho is generation over the trainer's whole busy time, so the trainer idles 1 - 1/rho (23..55%) of a step once
    the queue drained: relative to training alone, a run whose log-probs and weight sync took as long as its training
    came out balanced, a fault with no symptom."""
    from parallax.alerts.eval import canonical_series

    shares = []
    for suite in suites.values():
        for s in suite:
            if s.cause != "unbalanced_groups":
                continue
            series = canonical_series(s)
            if "stall_s" not in series or "step_s" not in series:
                continue
            last = sorted(series["stall_s"])[-15:]  # the run ends 60+ steps after the onset: the queue drained
            shares.append(sorted(series["stall_s"][k] / series["step_s"][k] for k in last)[7])
    assert len(shares) >= 12
    assert min(shares) > 0.2, shares
