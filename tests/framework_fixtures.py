"""Per-step dicts of each RL framework, shaped as its source logs them, with what the eight indicators must show.

Each fixture is one run: the config the framework logs (what tells its mode),
the dicts it logs step by step (its whole key set for a step, held-out
evaluations every few steps in the same dict or on their own, as the framework
does) and, per canonical name, the value each step must show. Values follow
simple curves of the step so that a wrong key, unit or aggregation shows.
The source file of each key set is named beside it (paths in the framework's
repository, the snapshot of ingest/aliases/frameworks.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from parallax.ingest.names import INDICATORS

STEPS = 12
EVAL_EVERY = 4


@dataclass
class Fixture:
    name: str  # fixture id: framework[-variant]
    framework: str
    config: dict
    steps: list[tuple[int, dict[str, float]]]
    expected: dict[str, dict[int, float]]  # canonical name -> step -> value
    #: indicators the framework does not feed in this mode: nothing may appear under them
    absent: tuple[str, ...] = ()
    also_absent: tuple[str, ...] = ()  # other canonical names that must not appear (a stall in a synchronous run...)
    feeds: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        self.feeds = tuple(i for i in INDICATORS if i in self.expected)
        missing = set(INDICATORS) - set(self.feeds) - set(self.absent)
        assert not missing, f"{self.name}: say whether {sorted(missing)} are fed"


def _expect(expected: dict[str, dict[int, float]], name: str, step: int, value: float) -> None:
    expected.setdefault(name, {})[step] = value


def _curve(step: int, start: float, slope: float) -> float:
    return round(start + slope * step, 6)


# -- verl ---------------------------------------------------------------------------------------


def _verl_step(s: int, *, asynchronous: bool, sequence_is: bool) -> tuple[dict[str, float], dict[str, float]]:
    """verl/trainer/ppo/ray_trainer.py fit(): compute_data_metrics + compute_timing_metrics + compute_throughout_metrics
    (metric_utils.py), the actor's update metrics (workers/utils/losses.py), perf/mfu/actor, rollout_corr/* when
    algorithm.rollout_correction is set (rollout_corr_helper.py); v1 trainers add training/off_policy/* (v1/trainer_base.py)."""
    gen, update, step_t = 20.0 + s, 9.0 + 0.5 * s, 40.0 + 2 * s
    d = {
        "training/global_step": float(s), "training/epoch": 0.0,
        "actor/entropy": _curve(s, 1.2, -0.02), "actor/pg_loss": -0.01 * s, "actor/pg_clipfrac": 0.002 * s,
        "actor/pg_clipfrac_lower": 0.0, "actor/ppo_kl": 0.0005 * s, "actor/grad_norm": 0.3 + 0.01 * s, "actor/lr": 1e-6,
        "actor/kl_loss": 0.001 * s, "actor/kl_coef": 0.001,
        "critic/score/mean": _curve(s, 0.30, 0.02), "critic/score/max": 1.0, "critic/score/min": 0.0,
        "critic/rewards/mean": _curve(s, 0.29, 0.02), "critic/rewards/max": 1.0, "critic/rewards/min": 0.0,
        "critic/advantages/mean": 0.0, "critic/advantages/max": 2.0, "critic/advantages/min": -2.0,
        "critic/returns/mean": 0.0, "critic/returns/max": 2.0, "critic/returns/min": -2.0,
        "response_length/mean": 300.0 + 5 * s, "response_length/max": 1024.0, "response_length/min": 20.0,
        "response_length/clip_ratio": 0.01 * s, "response/aborted_ratio": 0.0,
        "prompt_length/mean": 120.0, "prompt_length/max": 400.0, "prompt_length/min": 30.0, "prompt_length/clip_ratio": 0.0,
        "timing_s/gen": gen, "timing_s/reward": 1.5, "timing_s/old_log_prob": 3.0, "timing_s/ref": 2.5,
        "timing_s/adv": 0.1, "timing_s/update_actor": update, "timing_s/step": step_t,
        "timing_per_token_ms/gen": 0.05, "timing_per_token_ms/update_actor": 0.02, "timing_per_token_ms/adv": 0.0001,
        "perf/total_num_tokens": 400_000.0, "perf/time_per_step": step_t, "perf/throughput": 1250.0,
        "perf/mfu/actor": _curve(s, 0.30, 0.005), "perf/max_memory_allocated_gb": 60.0, "perf/max_memory_reserved_gb": 70.0,
        "perf/cpu_memory_used_gb": 120.0,
        "global_seqlen/min": 9000.0, "global_seqlen/max": 11000.0, "global_seqlen/minmax_diff": 2000.0,
        "global_seqlen/balanced_min": 9900.0, "global_seqlen/balanced_max": 10100.0, "global_seqlen/mean": 10000.0,
        "rollout_corr/rollout_is_mean": 1.0, "rollout_corr/rollout_is_max": 2.0 if not sequence_is else 4.0 + s,
        "rollout_corr/rollout_is_min": 0.5, "rollout_corr/rollout_is_std": 0.1,
        "rollout_corr/rollout_is_ratio_fraction_high": 0.001, "rollout_corr/rollout_is_ratio_fraction_low": 0.0,
        "rollout_corr/rollout_is_eff_sample_size": 0.98, "rollout_corr/log_ppl_diff_max": 0.2,
        "training/rollout_probs_diff_max": 0.4, "training/rollout_probs_diff_mean": 0.01,
    }
    want = {
        "entropy": d["actor/entropy"], "reward_train": d["critic/score/mean"], "trainer_mfu": d["perf/mfu/actor"],
        "step_s": step_t, "train_s": update, "response_length_mean": d["response_length/mean"],
        "truncated_frac": d["response_length/clip_ratio"], "clip_frac": d["actor/pg_clipfrac"], "grad_norm": d["actor/grad_norm"],
        "kl": d["actor/kl_loss"], "loss": d["actor/pg_loss"], "prob_diff_mean": d["training/rollout_probs_diff_mean"],
    }
    if sequence_is:
        want["importance_weight_max"] = d["rollout_corr/rollout_is_max"]
    else:
        want["importance_weight_max_capped"] = d["rollout_corr/rollout_is_max"]
    if asynchronous:  # v1 separate_async trainer
        d.update({
            "training/off_policy/trajectory_staleness/mean": 0.5 + 0.1 * s, "training/off_policy/trajectory_staleness/max": 2.0,
            "training/off_policy/trajectory_staleness/min": 0.0,
            "training/off_policy/trajectory_staleness_worst/mean": 0.9, "training/off_policy/trajectory_staleness_worst/max": 3.0,
            "training/off_policy/trajectory_staleness_worst/min": 0.0,
            "training/off_policy/trajectory_spans/mean": 1.2, "training/off_policy/evicted_samples": 0.0,
        })
        want.update({"stall_s": gen, "staleness_mean": 0.5 + 0.1 * s, "staleness_max": 3.0})
    else:
        want["rollout_s"] = gen
    return d, want


def _verl_val(s: int) -> tuple[dict[str, float], dict[str, float]]:
    """_val_metrics_update: val-core/{data_source}/{var}/{metric} for the core variable (reward: the score function
    returns no acc here) at the largest n, val-aux for the rest. Two data sources, named as verl's examples name them."""
    d, want = {}, {}
    by_ds = {"openai/gsm8k": (0.40 + 0.02 * s, 0.70 + 0.01 * s), "lighteval/MATH": (0.20 + 0.01 * s, 0.45 + 0.01 * s)}
    for ds, (mean, best4) in by_ds.items():
        d |= {
            f"val-core/{ds}/reward/mean@4": mean, f"val-aux/{ds}/reward/std@4": 0.3,
            f"val-aux/{ds}/reward/best@2/mean": (mean + best4) / 2, f"val-aux/{ds}/reward/best@2/std": 0.05,
            f"val-aux/{ds}/reward/worst@2/mean": mean / 2, f"val-aux/{ds}/reward/worst@2/std": 0.05,
            f"val-core/{ds}/reward/best@4/mean": best4, f"val-aux/{ds}/reward/best@4/std": 0.04,
            f"val-aux/{ds}/reward/worst@4/mean": mean / 3, f"val-aux/{ds}/reward/worst@4/std": 0.04,
        }
        want[f'reward_heldout{{dataset="{ds}"}}'] = mean
        want[f'pass_at_1{{dataset="{ds}"}}'] = mean
        want[f'pass_at_k{{dataset="{ds}",k="4"}}'] = best4
    means = [m for m, _ in by_ds.values()]
    bests = [b for _, b in by_ds.values()]
    want |= {
        "reward_heldout": sum(means) / 2, "pass_at_1": sum(means) / 2, "pass_at_k": sum(bests) / 2,
        'pass_at_k{k="4"}': sum(bests) / 2,
    }
    d |= {"val-aux/num_turns/min": 1.0, "val-aux/num_turns/max": 1.0, "val-aux/num_turns/mean": 1.0, "timing_s/testing": 30.0}
    return d, want


def verl(asynchronous: bool = False) -> Fixture:
    if asynchronous:
        config = {"framework": "verl", "k": 4, "trainer": {"use_v1": True, "v1": {"trainer_mode": "separate_async"},
                  "total_training_steps": STEPS}, "algorithm": {"rollout_correction": {"rollout_is": "sequence"}}}
    else:
        config = {"framework": "verl", "k": 4, "trainer": {"use_v1": True, "v1": {"trainer_mode": "sync"},
                  "total_training_steps": STEPS, "test_freq": EVAL_EVERY}, "algorithm": {"rollout_correction": {"rollout_is": "token"}}}
    steps, expected = [], {}
    val, want = _verl_val(0)  # verl validates before the first step, logged at step 0
    steps.append((0, val))
    for name, v in want.items():
        _expect(expected, name, 0, v)
    for s in range(1, STEPS + 1):
        d, want = _verl_step(s, asynchronous=asynchronous, sequence_is=asynchronous)
        if s % EVAL_EVERY == 0:
            val, more = _verl_val(s)
            d |= val
            want |= more
        steps.append((s, d))
        for name, v in want.items():
            _expect(expected, name, s, v)
    return Fixture(
        "verl-async" if asynchronous else "verl", "verl", config, steps, expected,
        absent=() if asynchronous else ("importance_weight_max", "staleness_mean", "stall_s"),
        also_absent=("rollout_s",) if asynchronous else ("stall_s",),
    )


# -- OpenRLHF -----------------------------------------------------------------------------------


def openrlhf(asynchronous: bool = False) -> Fixture:
    """openrlhf/utils/logging_utils.py prefixes train keys with train/ and eval keys with eval/; ppo_trainer.py
    (sync) sums the phases into timing/step_total, ppo_trainer_async.py logs the wall clock of the iteration."""
    config = {"framework": "openrlhf", "train": {"async_enable": asynchronous, "colocate_all": not asynchronous},
              "actor": {"entropy_coef": 0.0}, "rollout": {"n_samples_per_prompt": 8}}
    steps, expected = [], {}
    for s in range(1, STEPS + 1):
        make_exp, ppo, bcast, gen = 6.0, 10.0 + 0.2 * s, 1.0, 14.0 + s
        total = make_exp + ppo + bcast + gen if not asynchronous else make_exp + ppo + bcast + 2.0 + 0.1 * s
        d = {
            "train/policy_loss": 0.01, "train/actor_lr": 1e-6, "train/entropy_loss": _curve(s, 0.9, -0.01),
            "train/kl": 0.002 * s, "train/ppo_clip_ratio": 0.01, "train/actor_grad_norm": 0.2,
            "train/reward": _curve(s, 0.25, 0.02), "train/return": 0.0, "train/response_length": 500.0, "train/total_length": 700.0,
            "train/rollout/reward_mean": _curve(s, 0.26, 0.02), "train/rollout/response_length_mean": 480.0 + s,
            "train/rollout/truncated_rate": 0.02, "train/group_reward_std": 0.3,
            "train/timing/make_experience": make_exp, "train/timing/ppo_train": ppo, "train/timing/broadcast": bcast,
            "train/timing/generation": gen, "train/timing/step_total": total, "train/global_step": float(s),
        }
        steps.append((s, d))
        for name, v in {
            "entropy": d["train/entropy_loss"], "reward_train": d["train/rollout/reward_mean"], "step_s": total,
            "rollout_s": gen, "train_s": ppo, "kl": d["train/kl"], "clip_frac": 0.01, "grad_norm": 0.2, "loss": 0.01,
            "response_length_mean": 480.0 + s, "truncated_frac": 0.02,
        }.items():
            _expect(expected, name, s, v)
        if asynchronous:
            _expect(expected, "stall_s", s, 2.0 + 0.1 * s)
        if s % EVAL_EVERY == 0:
            # log_eval: eval/ prefix, eval_{datasource}_pass1 / _pass{n_samples_per_prompt} (compute_eval_metrics)
            ev = {"eval/eval_math500_pass1": 0.3 + 0.01 * s, "eval/eval_math500_pass8": 0.6 + 0.01 * s,
                  "eval/eval_aime24_pass1": 0.1, "eval/eval_aime24_pass8": 0.3,
                  "eval/eval_math500_response_length_mean": 600.0, "eval/eval_aime24_truncated_rate": 0.1,
                  "eval/eval_response_length_mean": 650.0, "eval/eval_truncated_rate": 0.05, "eval/global_step": float(s)}
            steps.append((s, ev))
            for name, v in {
                "pass_at_1": (0.4 + 0.01 * s) / 2, "reward_heldout": (0.4 + 0.01 * s) / 2, "pass_at_k": (0.9 + 0.01 * s) / 2,
                'reward_heldout{dataset="math500"}': 0.3 + 0.01 * s, 'pass_at_k{dataset="aime24",k="8"}': 0.3,
            }.items():
                _expect(expected, name, s, v)
    return Fixture(
        "openrlhf-async" if asynchronous else "openrlhf", "openrlhf", config, steps, expected,
        absent=("importance_weight_max", "staleness_mean", "trainer_mfu") + (() if asynchronous else ("stall_s",)),
        also_absent=() if asynchronous else ("stall_s",),
    )


# -- TRL ------------------------------------------------------------------------------------------


def trl(asynchronous: bool = False) -> Fixture:
    """What GRPOTrainer.log (trl/trainer/grpo_trainer.py) hands to on_log every logging step: the Trainer's loss,
    grad_norm, learning_rate, epoch plus the averaged _metrics; eval_-prefixed after evaluate(). AsyncGRPOTrainer
    (trl/experimental/async_grpo/async_grpo_trainer.py) logs perf/*, sample/*, batch/* and per-sample rewards."""
    config = {"framework": "trl", "trainer_class": "AsyncGRPOTrainer" if asynchronous else "GRPOTrainer", "max_steps": STEPS,
              "num_generations": 8, "beta": 0.04}
    steps, expected = [], {}
    for s in range(1, STEPS + 1):
        d = {"loss": 0.01, "grad_norm": 0.5, "learning_rate": 1e-6, "epoch": s / STEPS, "num_tokens": 1000.0 * s,
             "entropy": _curve(s, 0.8, -0.01), "kl": 0.001 * s, "clip_ratio/low_mean": 0.0, "clip_ratio/high_mean": 0.0,
             "clip_ratio/region_mean": 0.003, "clip_ratio/low_min": 0.0, "clip_ratio/high_max": 0.0}
        if asynchronous:
            d |= {"reward": _curve(s, 0.2, 0.03), "reward_std": 0.4, "rewards/accuracy": _curve(s, 0.2, 0.03),
                  "ratio": 1.0, "sample/staleness_mean": 0.5 + 0.05 * s, "sample/staleness_max": 2.0,
                  "sample/rollout_queue_size": 5.0, "sample/time_in_queue_s": 3.0, "sample/dropped_stale_total": 0.0,
                  "perf/fwd_bwd_s": 4.0, "perf/fwd_s": 1.5, "perf/optimizer_s": 0.2, "perf/step_s": 6.0 + 0.1 * s,
                  "perf/rollout_wait_s": 0.5 + 0.05 * s, "perf/mfu_fwd_bwd": 35.0, "perf/mfu_wall_clock": 20.0,
                  "perf/forwarded_tok_s_fwd_bwd": 9000.0, "perf/weight_sync_s": 2.0,
                  "batch/samples_per_step": 64.0, "batch/pad_frac": 0.1, "completions/mean_length": 200.0,
                  "completions/clipped_ratio": 0.05}
            want = {"stall_s": 0.5 + 0.05 * s, "step_s": 6.0 + 0.1 * s, "train_s": 4.0, "trainer_mfu": 0.35,
                    "staleness_mean": 0.5 + 0.05 * s, "staleness_max": 2.0, 'reward_train{reward="accuracy"}': d["rewards/accuracy"]}
        else:
            d |= {"completions/mean_length": 200.0, "completions/min_length": 10.0, "completions/max_length": 256.0,
                  "completions/clipped_ratio": 0.05, "completions/mean_terminated_length": 190.0,
                  "completions/min_terminated_length": 10.0, "completions/max_terminated_length": 250.0,
                  "rewards/accuracy_reward/mean": _curve(s, 0.2, 0.03), "rewards/accuracy_reward/std": 0.4,
                  "rewards/format_reward/mean": 0.9, "rewards/format_reward/std": 0.1,
                  "reward": _curve(s, 1.1, 0.03), "reward_std": 0.45, "frac_reward_zero_std": 0.25, "step_time": 0.4,
                  "sampling/sampling_logp_difference/mean": 0.01, "sampling/sampling_logp_difference/max": 0.8 + 0.01 * s,
                  "sampling/importance_sampling_ratio/min": 0.5, "sampling/importance_sampling_ratio/mean": 1.0,
                  "sampling/importance_sampling_ratio/max": 3.0}
            want = {"importance_weight_max_capped": 3.0, "logprob_diff_max": 0.8 + 0.01 * s, "zero_std_frac": 0.25,
                    'reward_train{reward="format_reward"}': 0.9}
        want |= {"entropy": d["entropy"], "reward_train": d["reward"], "reward_std": d["reward_std"], "kl": d["kl"],
                 "clip_frac": 0.003, "grad_norm": 0.5, "loss": 0.01, "response_length_mean": 200.0, "truncated_frac": 0.05}
        steps.append((s, d))
        for name, v in want.items():
            _expect(expected, name, s, v)
        if s % EVAL_EVERY == 0 and not asynchronous:
            ev = {"eval_loss": 0.0, "eval_reward": 0.9 + 0.01 * s, "eval_reward_std": 0.3,
                  "eval_rewards/accuracy_reward/mean": 0.1 + 0.01 * s, "eval_rewards/format_reward/mean": 0.8,
                  "eval_completions/mean_length": 190.0, "eval_entropy": 0.5, "eval_runtime": 3.0,
                  "eval_samples_per_second": 10.0, "eval_steps_per_second": 1.0, "epoch": s / STEPS}
            steps.append((s, ev))
            _expect(expected, "reward_heldout", s, 0.9 + 0.01 * s)
            _expect(expected, 'reward_heldout{reward="accuracy_reward"}', s, 0.1 + 0.01 * s)
    return Fixture(
        "trl-async" if asynchronous else "trl", "trl", config, steps, expected,
        absent=("importance_weight_max", "pass_at_k", "pass_at_1")
        + (() if asynchronous else ("staleness_mean", "stall_s", "trainer_mfu")),
        also_absent=() if asynchronous else ("step_s", "stall_s", "rollout_s"),
    )


# -- AReaL ----------------------------------------------------------------------------------------


def areal(asynchronous: bool = True) -> Fixture:
    """stats_tracker exports <scope>/<key>/{avg,min,max} for stat() and <scope>/<key> for scalar()
    (areal/utils/stats_tracker.py): ppo_actor/* from areal/trainer/ppo/actor.py, timeperf/* from
    areal/trainer/rl_trainer.py, rollout/* and eval-rollout/* from the workflows."""
    config = {"framework": "areal", "rollout": {"max_head_offpolicyness": 4 if asynchronous else 0},
              "actor": {"rejection_sampling": {"upper": 5.0}}, "total_train_steps": STEPS}
    steps, expected = [], {}
    for s in range(1, STEPS + 1):
        d = {}
        for key, (avg, lo, hi) in {
            "ppo_actor/update/behave_imp_weight": (1.0, 0.4, 4.5), "ppo_actor/update/behave_approx_kl": (0.001, -0.5, 0.9),
            "ppo_actor/update/importance_weight": (1.0, 0.8, 1.2), "ppo_actor/update/approx_kl": (0.0, -0.1, 0.1),
            "ppo_actor/update/entropy": (_curve(s, 1.0, -0.02), 0.0, 5.0), "ppo_actor/update/actor_loss": (0.0, -1.0, 1.0),
            "ppo_actor/update/clip_ratio": (0.01, 0.0, 1.0), "ppo_actor/update/dual_clip_ratio": (0.0, 0.0, 0.0),
            "ppo_actor/update/new_logp": (-1.0, -9.0, 0.0), "ppo_actor/update/old_logp": (-1.0, -9.0, 0.0),
            "ppo_actor/task_reward": (_curve(s, 0.35, 0.01), 0.0, 1.0), "ppo_actor/seq_len": (900.0 + s, 200.0, 2048.0),
            "ppo_actor/prompt_len": (300.0, 100.0, 500.0), "ppo_actor/no_eos_ratios": (0.03, 0.0, 1.0),
            "ppo_actor/advantages": (0.0, -2.0, 2.0), "ppo_actor/kl_rewards": (0.0, 0.0, 0.0), "ppo_actor/final_reward": (0.3, 0.0, 1.0),
        }.items():
            d |= {f"{key}/avg": avg, f"{key}/min": lo, f"{key}/max": hi}
        d |= {
            "ppo_actor/update/version_stats/sample_staleness_theta_avg": (0.8 + 0.1 * s) if asynchronous else 0.0,
            "ppo_actor/update/version_stats/sample_staleness_theta_max": 4.0 if asynchronous else 0.0,
            "ppo_actor/update/version_stats/sample_staleness_theta_min": 0.0,
            "ppo_actor/update/version_stats/sample_staleness_proximal_avg": 0.5,
            "ppo_actor/update/version_stats/v_theta": float(s), "ppo_actor/update/rs_filtered_fraction": 0.001,
            "ppo_actor/eps_clip": 0.2, "ppo_actor/use_dual_clip": 0.0, "ppo_actor/rs_upper": 5.0,
            "timeperf/rollout": 3.0 + 0.2 * s, "timeperf/recompute_logp": 2.0, "timeperf/compute_advantage": 0.1,
            "timeperf/train_step": 12.0, "timeperf/update_weights": 1.5, "timeperf/save": 0.0,
            "rollout/reward": _curve(s, 0.33, 0.01), "rollout/accepted": 64.0, "rollout/rejected": 0.0,
        }
        steps.append((s, d))
        want = {
            "importance_weight_max_capped": 4.5, "entropy": d["ppo_actor/update/entropy/avg"], "reward_train": d["rollout/reward"],
            "train_s": 12.0, "response_length_mean": 600.0 + s, "truncated_frac": 0.03, "clip_frac": 0.01,
            "staleness_mean": d["ppo_actor/update/version_stats/sample_staleness_theta_avg"],
            "staleness_max": d["ppo_actor/update/version_stats/sample_staleness_theta_max"],
            ("stall_s" if asynchronous else "rollout_s"): 3.0 + 0.2 * s,
        }
        for name, v in want.items():
            _expect(expected, name, s, v)
        if s % EVAL_EVERY == 0:
            steps.append((s, {"eval-rollout/reward": 0.3 + 0.01 * s, "timeperf/eval": 20.0}))
            _expect(expected, "reward_heldout", s, 0.3 + 0.01 * s)
    return Fixture(
        "areal" if asynchronous else "areal-sync", "areal", config, steps, expected,
        absent=("importance_weight_max", "trainer_mfu", "pass_at_k", "pass_at_1") + (() if asynchronous else ("stall_s",)),
        also_absent=("rollout_s",) if asynchronous else ("stall_s",),
    )


# -- PipelineRL ----------------------------------------------------------------------------------


def pipelinerl() -> Fixture:
    """pipelinerl/finetune_loop.py logs stats/* (versions counted in samples, time_waiting_for_data cumulative) and
    throughput/* every log step; rl/* from pipelinerl/finetune/rl; actor/* from pipelinerl/actor.py (its own process)."""
    samples_per_step = 64  # train_batch_size 1 x gradient_accumulation_passes 64
    config = {"framework": "pipelinerl", "finetune": {"train_batch_size": 1, "gradient_accumulation_passes": samples_per_step}}
    steps, expected = [], {}
    waited = 100.0  # a resumed run: the counter does not start at 0
    for s in range(1, STEPS + 1):
        waited += 0.5 + 0.1 * s
        lag = samples_per_step * (2 + (s % 3))  # 2..4 steps behind, in samples
        d = {
            "stats/lr": 1e-6, "stats/grad_norm": 0.4, "stats/samples": float(samples_per_step * s),
            "stats/tokens": 50_000.0 * s, "stats/samples_too_old_to_queue": 0.0, "stats/samples_too_old_to_train": 0.0,
            "stats/passes": 64.0 * s, "stats/completed_steps": float(s), "stats/epoch": 0.0,
            "stats/min_actor_version": float(samples_per_step * s - lag), "stats/max_actor_version": float(samples_per_step * s),
            "stats/queue/batches": 3.0, "stats/time_waiting_for_data": waited, "stats/lag": float(lag),
            "throughput/tokens_perGPU_per_sec": 3000.0, "throughput/tokens_per_step": 50_000.0, "throughput/micro_batches_per_step": 64.0,
            "throughput/min_tokens_per_micro_batch": 500.0, "throughput/max_tokens_per_micro_batch": 1500.0,
            "throughput/tokens_per_micro_batch": 800.0, "throughput/tokens_per_sec": 6000.0, "throughput/real_tokens_per_sec": 5000.0,
            "throughput/sec_per_pass": 0.25, "throughput/steps_per_sec": 0.05, "throughput/samples_per_sec": 3.0,
            "throughput/sec_per_step": 20.0 + s, "throughput/max_sequences_per_micro_batch": 1.0,
            "rl/loss": 0.01, "rl/entropy": _curve(s, 0.7, -0.01), "rl/reward": _curve(s, 0.5, 0.01), "rl/kl": 0.002,
            "rl/ratio_new_old": 1.0, "rl/ess": 0.95, "rl/max_token_weight": 1.5,
            "actor/reward_mean": _curve(s, 0.51, 0.01), "actor/success_mean": 0.5, "actor/output_tokens_mean": 700.0 + s,
            "actor/model_version_mean": float(samples_per_step * (s - 1)),
        }
        steps.append((s, d))
        want = {"staleness_max": lag / samples_per_step, "entropy": d["rl/entropy"], "reward_train": d["actor/reward_mean"],
                "step_s": 20.0 + s, "train_s": 16.0, "grad_norm": 0.4, "kl": 0.002, "response_length_mean": 700.0 + s}
        if s > 1:  # the first point of a counter has nothing to diff against
            want["stall_s"] = 0.5 + 0.1 * s
        for name, v in want.items():
            _expect(expected, name, s, v)
        if s % EVAL_EVERY == 0:
            steps.append((s, {"actor/test_success_mean": 0.4 + 0.01 * s, "actor/test_reward_mean": 0.41 + 0.01 * s,
                              "actor/test_output_tokens_mean": 720.0}))
            _expect(expected, "pass_at_1", s, 0.4 + 0.01 * s)
            _expect(expected, "reward_heldout", s, 0.41 + 0.01 * s)
    return Fixture("pipelinerl", "pipelinerl", config, steps, expected,
                   absent=("importance_weight_max", "staleness_mean", "trainer_mfu", "pass_at_k"))


# -- prime-rl -------------------------------------------------------------------------------------


def prime_rl() -> Fixture:
    """Trainer (src/prime_rl/trainer/rl/train.py: perf/*, optim/*, time/*, tensor stats) and orchestrator
    (src/prime_rl/orchestrator/orchestrator.py + metrics.py: off_policy/*, train/agg/..., eval/{env}/...) logged
    against the same step."""
    config = {"framework": "prime-rl", "orchestrator": {"max_off_policy_steps": 4}, "max_steps": STEPS}
    steps, expected = [], {}
    for s in range(1, STEPS + 1):
        d = {
            "perf/throughput": 20000.0, "perf/throughput_per_gpu": 2500.0, "perf/mfu": 30.0 + s, "perf/peak_memory": 60.0,
            "optim/lr": 1e-6, "optim/grad_norm": 0.3, "entropy/all/mean": _curve(s, 0.6, -0.01), "entropy/all/std": 0.2,
            "entropy/all/max": 5.0, "mismatch_kl/all/mean": 0.001, "mismatch_kl/all/max": 0.05, "loss/mean": 0.01,
            "time/step": 30.0, "time/wait_for_batch": 2.0 + 0.1 * s, "time/load_data": 0.1, "time/broadcast_weights": 1.0,
            "time/save_ckpt": 0.0, "time/forward_backward": 25.0,
            "train/agg/all/default/reward/mean": _curve(s, 0.4, 0.01), "train/agg/effective/default/reward/mean": _curve(s, 0.42, 0.01),
            "train/agg/all/num_output_tokens/mean": 800.0, "train/agg/all/is_truncated/mean": 0.04,
            "off_policy/mean": 1.0 + 0.1 * s, "off_policy/max": 4.0, "off_policy/in_flight/mean": 0.5, "off_policy/in_queue/mean": 0.5,
            "off_policy/dropped": 0.0, "progress/total_tokens": 1e6 * s, "time/wait_for_policy": 0.5,
        }
        steps.append((s, d))
        for name, v in {
            "trainer_mfu": (30.0 + s) / 100, "entropy": d["entropy/all/mean"], "stall_s": 2.0 + 0.1 * s, "step_s": 30.0,
            "train_s": 25.0, "staleness_mean": 1.0 + 0.1 * s, "staleness_max": 4.0,
            "reward_train": d["train/agg/effective/default/reward/mean"], "response_length_mean": 800.0, "truncated_frac": 0.04,
            "mismatch_kl_max": 0.05,
        }.items():
            _expect(expected, name, s, v)
        if s % EVAL_EVERY == 0:
            ev = {}
            for env, base in (("aime2024", 0.1), ("math500", 0.5)):
                for subset in ("all", "effective"):
                    ev[f"eval/{env}/{subset}/default/avg@8"] = base + 0.01 * s
                ev |= {f"eval/{env}/effective/default/pass@1": base + 0.01 * s, f"eval/{env}/effective/default/pass@2": base + 0.1,
                       f"eval/{env}/effective/default/pass@4": base + 0.2, f"eval/{env}/effective/default/pass@8": base + 0.3,
                       f"eval/{env}/effective/default/pass^8": base / 2, f"eval/{env}/policy_version": float(s - 1)}
            steps.append((s, ev))
            for name, v in {"pass_at_k": 0.3 + 0.3, "pass_at_1": 0.3 + 0.01 * s, "reward_heldout": 0.3 + 0.01 * s,
                            'pass_at_k{dataset="aime2024",k="8"}': 0.4, 'reward_heldout{dataset="math500"}': 0.5 + 0.01 * s}.items():
                _expect(expected, name, s, v)
    return Fixture("prime-rl", "prime-rl", config, steps, expected, absent=("importance_weight_max",))


# -- slime / miles --------------------------------------------------------------------------------


def slime(asynchronous: bool = False, framework: str = "slime") -> Fixture:
    """train/* from the Megatron actor (slime/backends/megatron_utils/loss.py, model.py), perf/* from log_perf_data,
    rollout/* from the rollout manager, passrate/* with --log-passrate (train rollout groups), eval/* against eval/step."""
    config = {"framework": framework, "colocate": not asynchronous, "log_passrate": True, "n_samples_per_prompt": 8}
    if asynchronous:
        config["mode"] = "async"  # train_async.py: the config does not say, Parallax's own key does
    steps, expected = [], {}
    for s in range(1, STEPS + 1):
        wait, train = 30.0 - s if not asynchronous else 1.0 + 0.1 * s, 50.0
        d = {
            "train/loss": 0.01, "train/pg_loss": 0.01, "train/entropy_loss": _curve(s, 0.75, -0.01), "train/pg_clipfrac": 0.02,
            "train/ppo_kl": 0.0001, "train/kl_loss": 0.001, "train/grad_norm": 0.25, "train/lr-pg_0": 1e-6,
            "train/train_rollout_logprob_abs_diff": 0.01, "train/step": float(s),
            "perf/train_wait_time": wait, "perf/train_time": train, "perf/step_time": wait + train,
            "perf/wait_time_ratio": wait / (wait + train), "perf/actor_train_time": 40.0, "perf/log_probs_time": 5.0,
            "perf/update_weights_time": 3.0, "perf/actor_train_tflops": 150.0, "perf/actor_train_tok_per_s": 9000.0,
            "rollout/raw_reward": _curve(s, 0.45, 0.01), "rollout/rewards": 0.0, "rollout/response_len/mean": 900.0,
            "rollout/response_len/max": 4096.0, "rollout/truncated_ratio": 0.06, "rollout/rollout_time": 60.0,
            "rollout/step": float(s), "passrate/pass@1": 0.45, "passrate/pass@2": 0.55, "passrate/pass@4": 0.62,
            "passrate/pass@8": 0.7,
        }
        if framework == "miles":
            d |= {"perf/actor_train_mfu": 0.3, "perf/mfu_peak_tflops": 989.0, "rollout/tito_session_mismatch_rate/v2": 0.001}
            if asynchronous:
                d |= {"rollout/fully_async/avg_staleness": 0.7, "rollout/fully_async/max_staleness": 2.0,
                      "rollout/fully_async/queue_size": 10.0}
        steps.append((s, d))
        want = {"entropy": d["train/entropy_loss"], "reward_train": d["rollout/raw_reward"], "step_s": wait + train,
                "train_s": 40.0, "pass_at_k_train": 0.7, "pass_at_1_train": 0.45, 'pass_at_k_train{k="4"}': 0.62,
                "response_length_mean": 900.0, "truncated_frac": 0.06, "clip_frac": 0.02, "grad_norm": 0.25, "kl": 0.001,
                "loss": 0.01, ("stall_s" if asynchronous else "rollout_s"): wait, "logprob_diff_mean": 0.01}
        if framework == "miles":
            want |= {"trainer_mfu": 0.3, "token_mismatch_rate": 0.001}
            if asynchronous:
                want |= {"staleness_mean": 0.7, "staleness_max": 2.0}
        for name, v in want.items():
            _expect(expected, name, s, v)
        if s % EVAL_EVERY == 0:
            ev = {"eval/step": float(s)}
            for ds, base in (("aime", 0.2), ("gpqa", 0.4)):
                ev |= {f"eval/{ds}": base + 0.01 * s, f"eval/{ds}-truncated_ratio": 0.1, f"eval/{ds}/response_len/mean": 1200.0,
                       f"eval/{ds}-pass@1": base + 0.01 * s, f"eval/{ds}-pass@8": base + 0.3}
            steps.append((s, ev))
            for name, v in {"reward_heldout": 0.3 + 0.01 * s, 'reward_heldout{dataset="gpqa"}': 0.4 + 0.01 * s,
                            "pass_at_k": 0.6, "pass_at_1": 0.3 + 0.01 * s}.items():
                _expect(expected, name, s, v)
    mfu = () if framework == "miles" else ("trainer_mfu",)
    stale = () if framework == "miles" and asynchronous else ("staleness_mean",)
    return Fixture(
        framework + ("-async" if asynchronous else ""), framework, config, steps, expected,
        absent=("importance_weight_max",) + mfu + stale + (() if asynchronous else ("stall_s",)),
        also_absent=("rollout_s",) if asynchronous else ("stall_s",),
    )


# -- SkyRL ---------------------------------------------------------------------------------------


def skyrl(asynchronous: bool = False) -> Fixture:
    """skyrl/train/trainer.py (timing/*, reward/*, policy/* from the workers, generate/* from the generator) and
    skyrl/train/fully_async_trainer.py (async/*, timing/wait_for_generation_buffer); eval/* from evaluate.py."""
    config = {"framework": "skyrl", "trainer": {"algorithm": {"off_policy_correction": {"tis_ratio_type": "token"}}}}
    steps, expected = [], {}
    for s in range(1, STEPS + 1):
        d = {
            "policy/policy_loss": 0.01, "policy/policy_entropy": _curve(s, 0.9, -0.01), "policy/policy_kl": 0.001,
            "policy/loss_metrics/clip_ratio": 0.01, "policy/grad_norm": 0.3, "policy/loss_metrics/is_ratio_max": 1.5 + 0.1 * s,
            "policy/loss_metrics/is_ratio_mean": 1.0, "policy/rollout_train_logprobs_abs_diff_max": 0.6,
            "policy/rollout_train_logprobs_abs_diff_mean": 0.02,
            "reward/avg_raw_reward": _curve(s, 0.3, 0.02), "reward/avg_pass_at_8": 0.6, "reward/mean_positive_reward": 0.3,
            "generate/avg_num_tokens": 700.0, "generate/std_num_tokens": 200.0, "generate/max_num_tokens": 2048.0,
            "timing/generate": 40.0, "timing/train_critic_and_policy": 30.0, "timing/step": 80.0, "timing/sync_weights": 2.0,
        }
        want = {"entropy": d["policy/policy_entropy"], "reward_train": d["reward/avg_raw_reward"], "importance_weight_max": 1.5 + 0.1 * s,
                "logprob_diff_max": 0.6, "logprob_diff_mean": 0.02, "rollout_s": 40.0, "train_s": 30.0, "step_s": 80.0, "pass_at_k_train": 0.6,
                "response_length_mean": 700.0, "response_length_std": 200.0}
        if asynchronous:
            d |= {"async/staleness_mean": 0.6, "async/staleness_max": 2.0, "async/staleness_ratio": 0.5,
                  "timing/wait_for_generation_buffer": 3.0 + 0.1 * s}
            want |= {"staleness_mean": 0.6, "staleness_max": 2.0, "stall_s": 3.0 + 0.1 * s}
        steps.append((s, d))
        for name, v in want.items():
            _expect(expected, name, s, v)
        if s % EVAL_EVERY == 0:
            ev = {"eval/all/avg_score": 0.33, "eval/all/pass_at_8": 0.66, "eval/all/mean_positive_reward": 0.33,
                  "eval/gsm8k/avg_score": 0.5, "eval/gsm8k/pass_at_8": 0.8, "eval/math/avg_score": 0.16, "eval/math/pass_at_8": 0.52}
            steps.append((s, ev))
            for name, v in {"reward_heldout": 0.33, "pass_at_k": 0.66, 'reward_heldout{dataset="gsm8k"}': 0.5,
                            'pass_at_k{dataset="math",k="8"}': 0.52}.items():
                _expect(expected, name, s, v)
    return Fixture(
        "skyrl-async" if asynchronous else "skyrl", "skyrl", config, steps, expected,
        absent=("trainer_mfu", "pass_at_1") + (() if asynchronous else ("staleness_mean", "stall_s")),
        also_absent=() if asynchronous else ("stall_s",),
    )


# -- ROLL ----------------------------------------------------------------------------------------


def roll() -> Fixture:
    """roll/pipeline/rlvr/rlvr_pipeline.py: time/* (step_total logged one step late), val_correct/* on eval steps;
    critic/*, token/* from roll/utils/metrics/metrics_manager.py; actor/* keep their reduction tag."""
    config = {"framework": "roll", "async_generation_ratio": 0, "max_steps": STEPS}
    steps, expected = [], {}
    for s in range(0, STEPS + 1):
        d = {"time/step_generate": 30.0 + s, "time/step_train": 20.0, "time/step_model_update": 2.0,
             "time/step_total": 0.0 if s == 0 else 52.0 + (s - 1),  # step s-1's total
             "critic/entropy/mean": _curve(s, 1.1, -0.01), "critic/score/mean": _curve(s, 0.2, 0.02), "critic/kl": 0.001,
             "token/response_length/mean": 650.0, "actor/ppo_ratio_clipfrac@sum": 0.02, "actor/ratio_max@max": 9.0 + s,
             "actor/train_infer_ratio_token_mean@sum": 1.0, "system/tps_gpu": 900.0}
        steps.append((s, d))
        want = {"entropy": d["critic/entropy/mean"], "reward_train": d["critic/score/mean"], "rollout_s": 30.0 + s,
                "train_s": 20.0, "kl": 0.001, "response_length_mean": 650.0, "clip_frac": 0.02}
        for name, v in want.items():
            _expect(expected, name, s, v)
        if s > 0:
            _expect(expected, "step_s", s - 1, 52.0 + (s - 1))
        if s % EVAL_EVERY == 0 and s > 0:
            steps.append((s, {"val_correct/all/mean": 0.3 + 0.01 * s, "val_correct/math/mean": 0.35, "val_correct/code/mean": 0.25}))
            for name, v in {"pass_at_1": 0.3 + 0.01 * s, "reward_heldout": 0.3 + 0.01 * s,
                            'reward_heldout{dataset="code"}': 0.25}.items():
                _expect(expected, name, s, v)
    return Fixture("roll", "roll", config, steps, expected,
                   absent=("importance_weight_max", "staleness_mean", "stall_s", "trainer_mfu", "pass_at_k"),
                   also_absent=("stall_s", "importance_weight_max"))


# -- tinker-cookbook --------------------------------------------------------------------------------


def tinker() -> Fixture:
    """tinker_cookbook/rl/train.py logs per iteration: optim/* and sampling_client/* (rl/metrics.py), env/all/*
    (rl/metric_util.py), time/* spans (utils/trace.py), test/* from the RL test-set evaluator."""
    config = {"framework": "tinker", "async_config": {"max_steps_off_policy": 3, "groups_per_batch": 32}}
    steps, expected = [], {}
    for s in range(1, STEPS + 1):
        behind = 1 + s % 3
        d = {"optim/entropy": _curve(s, 0.85, -0.01), "optim/kl_sample_train_v1": 0.001, "optim/kl_sample_train_v2": 0.0005,
             "optim/lr": 1e-5, "sampling_client/step_mean": s - behind + 0.5, "sampling_client/step_min": float(s - behind),
             "sampling_client/step_max": float(s), "time/sampling_time_mean": 20.0, "time/train_step": 8.0,
             "time/forward_backward_async": 6.0, "time/total": 40.0, "env/all/reward/total": _curve(s, 0.3, 0.02),
             "env/all/by_group/frac_mixed": 0.6, "env/all/ac_tokens_per_turn": 600.0}
        steps.append((s, d))
        for name, v in {"entropy": d["optim/entropy"], "reward_train": d["env/all/reward/total"], "train_s": 8.0,
                        "staleness_mean": behind - 0.5, "staleness_max": float(behind)}.items():
            _expect(expected, name, s, v)
        if s % EVAL_EVERY == 0:
            steps.append((s, {"test/env/all/reward/total": 0.25 + 0.01 * s, "test/env/math/reward/total": 0.3,
                              "test/env/all/ac_tokens_per_turn": 600.0}))
            _expect(expected, "reward_heldout", s, 0.25 + 0.01 * s)
            _expect(expected, 'reward_heldout{dataset="math"}', s, 0.3)
    return Fixture("tinker-cookbook", "tinker-cookbook", config, steps, expected,
                   absent=("importance_weight_max", "stall_s", "trainer_mfu", "pass_at_k", "pass_at_1"))


def all_fixtures() -> list[Fixture]:
    return [
        verl(), verl(asynchronous=True), openrlhf(), openrlhf(asynchronous=True), trl(), trl(asynchronous=True),
        areal(), areal(asynchronous=False), pipelinerl(), prime_rl(), slime(), slime(asynchronous=True),
        slime(asynchronous=True, framework="miles"), skyrl(), skyrl(asynchronous=True), roll(), tinker(),
    ]
