"""Which key of which RL framework is which canonical metric (DESIGN §1).

Every key below was read from the framework's source; the table with units and
source files is ../shared/reference/framework_metric_keys.md (§B). A rule maps a
key template to a canonical name; several rules may feed one canonical name,
and the first one whose key a batch holds wins (so put the better signal
first). ``{name}`` in a key matches one path segment without ``/`` or ``@``;
``{k}`` and ``{n}`` match a number.

Units: ``""`` as logged; ``percent`` divides by 100 (prime-rl's MFU);
``cumulative`` turns a monotonic counter into per-step deltas (PipelineRL's
``stats/time_waiting_for_data``); ``step_minus`` is the point's step minus the
value (tinker's ``sampling_client/step_mean`` is the policy version the samples
came from, so the step minus it is their staleness).

Keys that a framework logs *after* truncation (TRL's importance-sampling ratio
is capped at ``vllm_importance_sampling_clip_max``; verl's token-mode
``rollout_is_max`` is taken from the applied, truncated weights) map to
``importance_weight_max_capped``, never to ``importance_weight_max``.
"""

from __future__ import annotations

from dataclasses import dataclass

CAPPED_IMPORTANCE_WEIGHT_MAX = "importance_weight_max_capped"


@dataclass(frozen=True, slots=True)
class Rule:
    key: str  # a key template
    target: str  # canonical name; "pass_at_k" rules need a {k} in the key
    unit: str = ""  # "", "percent", "cumulative", "step_minus"
    #: verl: the target when the run's config says sequence-level IS (there the max is not truncated).
    sequence_target: str | None = None


@dataclass(frozen=True, slots=True)
class Derived:
    """A canonical metric computed from several keys at the same step (only where the framework logs none)."""

    target: str
    formula: str  # "product" (a * b) or "difference" (a - b - c ..., at least 0)
    inputs: tuple[tuple[str, ...], ...]  # per operand, the keys that may carry it (first present wins)
    optional: int = 0  # how many trailing operands may be missing (taken as 0)


@dataclass(frozen=True, slots=True)
class Framework:
    name: str
    title: str
    rules: tuple[Rule, ...]
    derived: tuple[Derived, ...] = ()
    #: Prefixes the framework's logger may add in front of every key (TRL under W&B: train/, eval/).
    prefixes: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()  # other spellings of the name in a run's config


R = Rule

VERL = Framework(
    "verl",
    "verl",
    (
        R("rollout_corr/rollout_is_max", CAPPED_IMPORTANCE_WEIGHT_MAX, sequence_target="importance_weight_max"),
        R("training/off_policy/trajectory_staleness/mean", "staleness_mean"),
        R("training/off_policy/trajectory_staleness/max", "staleness_max"),
        R("timing_s/gen", "rollout_s"),
        R("timing_s/update_actor", "train_s"),
        R("timing_s/step", "step_s"),
        R("perf/mfu/actor", "trainer_mfu"),
        R("val-core/{name}/acc/best@{k}/mean", "pass_at_k"),
        R("val-aux/{name}/acc/best@{k}/mean", "pass_at_k"),
        R("val-core/{name}/acc/mean@{n}", "pass_at_1"),
        R("val-core/{name}/reward/mean@{n}", "reward_heldout"),
        R("val-core/{name}/acc/mean@{n}", "reward_heldout"),
        R("actor/entropy", "entropy"),
        R("critic/score/mean", "reward_train"),
        R("critic/rewards/mean", "reward_train"),
        R("response_length/mean", "response_length_mean"),
        R("actor/kl_loss", "kl"),
        R("actor/pg_clipfrac", "clip_frac"),
        R("actor/grad_norm", "grad_norm"),
        R("actor/pg_loss", "loss"),
        R("fully_async/count/current_param_version", "policy_version"),
    ),
    derived=(
        # fully_async: trainer idle ratio = time blocked on the rollout queue / step time.
        Derived("stall_s", "product", (("fully_async/trainer/idle_ratio", "trainer/idle_ratio"), ("timing_s/step",))),
    ),
)

OPENRLHF = Framework(
    "openrlhf",
    "OpenRLHF",
    (
        R("train/timing/generation", "rollout_s"),
        R("train/timing/ppo_train", "train_s"),
        R("train/timing/step_total", "step_s"),
        R("eval/eval_{name}_pass{k}", "pass_at_k"),
        R("eval/eval_{name}_pass1", "reward_heldout"),
        R("train/entropy_loss", "entropy"),
        R("train/rollout/reward_mean", "reward_train"),
        R("train/reward", "reward_train"),
        R("train/rollout/response_length_mean", "response_length_mean"),
        R("train/kl", "kl"),
        R("train/ppo_clip_ratio", "clip_frac"),
        R("train/actor_grad_norm", "grad_norm"),
        R("train/policy_loss", "loss"),
    ),
    derived=(
        # Async: step_total is wall clock including the wait for the queue.
        Derived(
            "stall_s",
            "difference",
            (("train/timing/step_total",), ("train/timing/make_experience",), ("train/timing/ppo_train",), ("train/timing/broadcast",)),
            optional=1,
        ),
    ),
)

TRL = Framework(
    "trl",
    "TRL",
    (
        R("sampling/raw_importance_sampling_ratio/max", "importance_weight_max"),  # PR #5243: before truncation
        R("sampling/importance_sampling_ratio/max", CAPPED_IMPORTANCE_WEIGHT_MAX),
        R("sampling/sampling_logp_difference/max", "logprob_diff_max"),
        R("queue_wait_time_s", "stall_s"),
        R("step_time", "step_s"),
        R("entropy", "entropy"),
        R("reward", "reward_train"),
        R("eval_reward", "reward_heldout"),
        R("eval/reward", "reward_heldout"),
        R("completions/mean_length", "response_length_mean"),
        R("kl", "kl"),
        R("clip_ratio/region_mean", "clip_frac"),
        R("grad_norm", "grad_norm"),
        R("loss", "loss"),
    ),
    prefixes=("train/",),
)

AREAL = Framework(
    "areal",
    "AReaL",
    (
        R("ppo_actor/update/behave_imp_weight/max", "importance_weight_max"),
        R("ppo_actor/update/version_stats/sample_staleness_theta_avg", "staleness_mean"),
        R("ppo_actor/update/version_stats/sample_staleness_theta_max", "staleness_max"),
        # Asynchronous: the time in prepare_batch is the wait for enough accepted samples.
        R("timeperf/rollout", "stall_s"),
        R("timeperf/train_step", "train_s"),
        R("ppo_actor/update/entropy/avg", "entropy"),
        R("rollout/reward", "reward_train"),
        R("rollout/reward/avg", "reward_train"),
        R("ppo_actor/task_reward/avg", "reward_train"),
        R("eval-rollout/reward", "reward_heldout"),
        R("eval-rollout/reward/avg", "reward_heldout"),
        R("ppo_actor/seq_len/avg", "response_length_mean"),
        R("ppo_actor/update/clip_ratio/avg", "clip_frac"),
    ),
)

PIPELINERL = Framework(
    "pipelinerl",
    "PipelineRL",
    (
        R("stats/lag_mean", "staleness_mean"),
        R("stats/lag_max", "staleness_max"),
        R("stats/lag", "staleness_max"),  # before PR #152: last broadcast version - oldest sample's, a max
        R("stats/time_waiting_for_data", "stall_s", unit="cumulative"),
        R("throughput/sec_per_step", "step_s"),
        R("throughput/sec_per_pass", "train_s"),
        R("actor/test_success_mean", "pass_at_1"),
        R("actor/test_reward_mean", "reward_heldout"),
        R("rl/entropy", "entropy"),
        R("actor/reward_mean", "reward_train"),
        R("rl/reward", "reward_train"),
        R("actor/output_tokens_mean", "response_length_mean"),
        R("rl/kl", "kl"),
        R("stats/grad_norm", "grad_norm"),
    ),
)

PRIME_RL = Framework(
    "prime-rl",
    "prime-rl",
    (
        R("off_policy/mean", "staleness_mean"),
        R("off_policy/max", "staleness_max"),
        R("time/wait_for_batch", "stall_s"),
        R("time/step", "step_s"),
        R("time/forward_backward", "train_s"),
        R("perf/mfu", "trainer_mfu", unit="percent"),
        R("trainer_mfu_percent", "trainer_mfu", unit="percent"),  # its Prometheus gauge (PR #1547)
        R("eval/{name}/effective/{name}/pass@{k}", "pass_at_k"),
        R("eval/{name}/effective/{name}/avg@{n}", "reward_heldout"),
        R("entropy/all/mean", "entropy"),
        R("trainer_entropy", "entropy"),
        R("train/agg/all/{name}/reward/mean", "reward_train"),
        R("reward/all/mean", "reward_train"),
        R("train/agg/all/num_output_tokens/mean", "response_length_mean"),
        R("optim/grad_norm", "grad_norm"),
        R("trainer_loss", "loss"),
    ),
    aliases=("prime_rl", "primerl", "prime"),
)

_SLIME_RULES = (
    R("perf/train_wait_time", "stall_s"),
    R("perf/rollout_time", "rollout_s"),
    R("perf/train_time", "train_s"),
    R("perf/step_time", "step_s"),
    R("passrate/pass@{k}", "pass_at_k"),
    R("eval/{name}-pass@{k}", "pass_at_k"),
    R("eval/{name}", "reward_heldout"),
    R("train/entropy_loss", "entropy"),
    R("rollout/entropy", "entropy"),
    R("rollout/raw_reward", "reward_train"),
    R("rollout/rewards", "reward_train"),
    R("rollout/response_len/mean", "response_length_mean"),
    R("train/kl_loss", "kl"),
    R("train/pg_clipfrac", "clip_frac"),
    R("train/grad_norm", "grad_norm"),
    R("train/pg_loss", "loss"),
)

SLIME = Framework("slime", "slime", _SLIME_RULES)

MILES = Framework(
    "miles",
    "miles",
    (
        R("rollout/fully_async/avg_staleness", "staleness_mean"),
        R("rollout/fully_async/max_staleness", "staleness_max"),
        R("perf/actor_train_mfu", "trainer_mfu"),
        R("rollout/tito_session_mismatch_rate/v2", "token_mismatch_rate"),
        R("rollout/tito_session_mismatch_rate/v1", "token_mismatch_rate"),
    )
    + _SLIME_RULES,
)

SKYRL = Framework(
    "skyrl",
    "SkyRL",
    (
        R("policy/loss_metrics/is_ratio_max", "importance_weight_max"),  # clipped only at e^20: raw in practice
        R("policy/rollout_train_logprobs_abs_diff_max", "logprob_diff_max"),
        R("async/staleness_mean", "staleness_mean"),
        R("async/staleness_max", "staleness_max"),
        R("timing/wait_for_generation_buffer", "stall_s"),
        R("timing/generate", "rollout_s"),
        R("timing/train_critic_and_policy", "train_s"),
        R("timing/step", "step_s"),
        R("eval/all/pass_at_{k}", "pass_at_k"),
        R("eval/{name}/pass_at_{k}", "pass_at_k"),
        R("reward/avg_pass_at_{k}", "pass_at_k"),
        R("eval/all/avg_score", "reward_heldout"),
        R("policy/policy_entropy", "entropy"),
        R("reward/avg_raw_reward", "reward_train"),
        R("generate/avg_num_tokens", "response_length_mean"),
        R("generate/std_num_tokens", "response_length_std"),
        R("policy/policy_kl", "kl"),
        R("policy/loss_metrics/clip_ratio", "clip_frac"),
        R("policy/grad_norm", "grad_norm"),
    ),
)

ROLL = Framework(
    "roll",
    "ROLL",
    (
        # actor/ratio_max@max is the PPO ratio (pi_theta/pi_old), not trainer vs rollout: not mapped.
        R("time/step_generate", "rollout_s"),
        R("time/step_train", "train_s"),
        R("time/step_total", "step_s"),
        R("val_correct/all/mean", "pass_at_1"),
        R("val_score/all/mean", "reward_heldout"),
        R("critic/entropy/mean", "entropy"),
        R("critic/score/mean", "reward_train"),
        R("token/response_length/mean", "response_length_mean"),
        R("critic/kl", "kl"),
        R("actor/ppo_ratio_clipfrac@sum", "clip_frac"),
    ),
)

TINKER = Framework(
    "tinker-cookbook",
    "tinker-cookbook",
    (
        R("sampling_client/step_mean", "staleness_mean", unit="step_minus"),
        R("sampling_client/step_min", "staleness_max", unit="step_minus"),
        R("time/waiting_for_stragglers", "stall_s"),  # PR #822
        R("time/train", "train_s"),
        R("optim/entropy", "entropy"),
        R("env/all/reward/total", "reward_train"),
        R("test/env/all/reward/total", "reward_heldout"),
    ),
    aliases=("tinker", "tinker_cookbook"),
)

#: In detection order: on a tie the first wins.
FRAMEWORKS: tuple[Framework, ...] = (VERL, OPENRLHF, TRL, AREAL, PIPELINERL, PRIME_RL, MILES, SLIME, SKYRL, ROLL, TINKER)
