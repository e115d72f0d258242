"""Which key of which RL framework is which canonical metric (DESIGN §1), read from each framework's source.

Every row names the file of the framework's repository it was read from (the
snapshot is the framework's ``repo``/``commit``); ../shared/reference/framework_metric_keys.md
holds the notes, with a "Corrections" section from a second read. A rule maps a
key template to a canonical name; several rules may feed one canonical name,
and the first one whose key a batch holds wins (so the better signal comes
first).

Key templates: ``{name}`` matches one path segment (no ``/`` or ``@``) and is
not kept; ``{k}`` and ``{n}`` match a number (``{k}`` is the k of pass@k);
``{dataset}`` matches a held-out dataset's name, ``/`` included (verl's data
sources are named like ``openai/gsm8k``), ``{dataset:segment}`` one segment;
``{reward}`` the name of one reward function. A dataset's value is kept under
the canonical name labelled with it (``reward_heldout{dataset="openai/gsm8k"}``)
and the unlabelled name is the mean over the datasets logged at that step,
unless the framework logs its own aggregate (a rule without ``{dataset}``),
which then wins.

Units: ``""`` as logged; ``percent`` is divided by 100 (MFU in percent);
``cumulative`` turns a monotonic counter into its increase per step (PipelineRL's
``stats/time_waiting_for_data``); ``step_minus`` is the point's step minus the
value (tinker's ``sampling_client/step_mean`` is the policy version the samples
came from, so the step minus it is their staleness); ``previous_step`` moves the
value to the step before (ROLL logs step N-1's total time at step N).

Modes: a rule with ``mode="async"`` applies only to asynchronous runs, one with
``mode="sync"`` only to synchronous ones. In a synchronous run the trainer waits
for generation by design, so the wait timers frameworks log measure generation:
they feed ``rollout_s`` there, never ``stall_s``. A run's mode comes from its
config (``ingest.aliases.run_mode``), else from keys only asynchronous runs log
(``async_markers``), else from the framework's default.

Maxima a framework logs *after* truncation (TRL's importance-sampling ratio is
capped at ``vllm_importance_sampling_clip_max``; verl's token-mode
``rollout_is_max`` is taken from the truncated weights; AReaL's
``behave_imp_weight`` is computed after rejection sampling) map to
``importance_weight_max_capped``, never to ``importance_weight_max``.
"""

from __future__ import annotations

from dataclasses import dataclass

CAPPED_IMPORTANCE_WEIGHT_MAX = "importance_weight_max_capped"


@dataclass(frozen=True, slots=True)
class Rule:
    key: str  # a key template
    target: str  # canonical name; "pass_at_k"/"pass_at_k_train" rules need a {k} in the key
    source: str  # the file of the framework's repository that logs the key
    unit: str = ""  # "", "percent", "cumulative", "step_minus", "previous_step"
    mode: str | None = None  # "sync" / "async": only in runs of that mode
    #: verl: the target when the run's config says sequence-level IS (there the max is not truncated).
    sequence_target: str | None = None
    exclude: tuple[str, ...] = ()  # values of {dataset} that are not a dataset (the framework's own "all")
    note: str = ""


@dataclass(frozen=True, slots=True)
class Derived:
    """A canonical metric computed from several keys at the same step (only where the framework logs none)."""

    target: str
    #: "product" (a * b), "difference" (a - b - c ..., at least 0), "scaled" (a * b / c) or "per_config" (a over
    #: the product of the run's config values at ``per``: a count in samples over the samples of one step)
    formula: str
    inputs: tuple[tuple[str, ...], ...]  # per operand, the keys that may carry it (first present wins)
    source: str
    optional: int = 0  # how many trailing operands may be missing (taken as 0)
    mode: str | None = None
    note: str = ""
    per: tuple[str, ...] = ()  # "per_config": config keys (dotted paths), all needed


@dataclass(frozen=True, slots=True)
class ModeKey:
    """A config key (dotted path) of the framework that tells a synchronous run from an asynchronous one.

    ``reads``: ``present_async`` (a section that only asynchronous runs have), ``true_async`` (a flag:
    true = asynchronous, false = synchronous), ``true_sync`` (true = synchronous, false says nothing),
    ``false_sync`` (false = synchronous, true says nothing), ``zero_sync`` (a bound or ratio: 0 =
    synchronous, above 0 = asynchronous), ``word`` (a mode name: ``sync`` or containing ``async``),
    ``class`` (a trainer class name: containing ``Async`` = asynchronous, else synchronous), ``none`` (says
    nothing of the mode: a key listed for ``bound`` alone).

    ``bound``: the value is also the run's staleness bound, the largest policy-version lag a sample may have
    (``aliases.staleness_bound``; 0, a synchronous run's, bounds nothing); ``per``: the config keys whose product
    turns a bound counted in samples into steps."""

    path: str
    reads: str
    source: str
    bound: bool = False
    #: A bound counted in samples: divided by the product of these config keys (the samples of one step).
    per: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Framework:
    name: str
    title: str
    repo: str  # where the keys were read: "owner/name" on GitHub (or a pip release)
    commit: str
    rules: tuple[Rule, ...]
    derived: tuple[Derived, ...] = ()
    #: Prefixes the framework's logger may add in front of every key (TRL under W&B: train/).
    prefixes: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()  # other spellings of the name in a run's config
    mode_keys: tuple[ModeKey, ...] = ()
    #: The mode when neither the config nor the keys say (True: synchronous).
    default_synchronous: bool = True
    #: A framework that is asynchronous by design: run_mode says so even when the config does not.
    by_design: bool | None = None
    #: Key prefixes that only asynchronous runs log: a batch holding one is from an asynchronous run.
    async_markers: tuple[str, ...] = ()
    #: (wait key, train time keys): a trainer wait that is timed in both modes, the generation in a synchronous
    #: run and the idle time in an asynchronous one. A wait under a twentieth of the step's training on
    #: ``aliases.QUIET_WAITS_ASYNC`` steps means generation overlapped training: the run is asynchronous.
    idle_wait: tuple[str, tuple[str, ...]] | None = None
    modes_note: str = ""


R = Rule
M = ModeKey

# -- verl ----------------------------------------------------------------------------------

_VERL_RAY = "verl/trainer/ppo/ray_trainer.py"
_VERL_METRICS = "verl/trainer/ppo/metric_utils.py"
_VERL_V1 = "verl/trainer/ppo/v1/trainer_base.py"
_VERL_ASYNC = "verl/experimental/fully_async_policy/fully_async_trainer.py"
_VERL_VAL = "verl/trainer/ppo/ray_trainer.py (_val_metrics_update) + verl/trainer/ppo/metric_utils.py (process_validation_metrics)"
_VERL_LOSS = "verl/workers/utils/losses.py"

VERL = Framework(
    "verl",
    "verl",
    "verl-project/verl",
    "1dda039b",
    (
        R("rollout_corr/rollout_is_max", CAPPED_IMPORTANCE_WEIGHT_MAX, "verl/trainer/ppo/rollout_corr_helper.py",
          sequence_target="importance_weight_max"),
        R("actor/rollout_corr/rollout_is_max", CAPPED_IMPORTANCE_WEIGHT_MAX, "verl/trainer/ppo/rollout_corr_helper.py",
          sequence_target="importance_weight_max", note="bypass mode"),
        R("training/off_policy/trajectory_staleness/mean", "staleness_mean", _VERL_V1,
          note="model versions behind, by the newest version that produced the trajectory"),
        R("training/off_policy/trajectory_staleness_worst/max", "staleness_max", _VERL_V1,
          note="by the oldest version that produced any token of the trajectory"),
        R("training/off_policy/trajectory_staleness/max", "staleness_max", _VERL_V1),
        R("fully_async/count/current_param_version", "policy_version", "verl/experimental/fully_async_policy/detach_utils.py"),
        R("timing_s/gen", "rollout_s", _VERL_RAY, mode="sync", note="synchronous trainers: generation"),
        R("timing_s/gen", "stall_s", _VERL_ASYNC + ", " + _VERL_V1, mode="async",
          note="fully-async and v1 async trainers: the time blocked on the rollout queue"),
        R("timing_s/update_actor", "train_s", _VERL_METRICS),
        R("timing_s/step", "step_s", _VERL_METRICS),
        R("perf/mfu/actor", "trainer_mfu", _VERL_RAY, note="fraction 0..1"),
        R("training/rollout_probs_diff_mean", "prob_diff_mean", "verl/utils/debug/metrics.py (calculate_debug_metrics), "
          + _VERL_RAY, note="mean |p_train - p_rollout| in probability, not log-probability"),
        # Held-out: the score function's "acc" is the core variable when it returns one, else "reward";
        # mean@N is the mean over N samples per prompt (pass@1 for 0/1 scores), best@k the bootstrap best-of-k.
        R("val-core/{dataset}/acc/best@{k}/mean", "pass_at_k", _VERL_VAL),
        R("val-aux/{dataset}/acc/best@{k}/mean", "pass_at_k", _VERL_VAL),
        R("val-core/{dataset}/reward/best@{k}/mean", "pass_at_k", _VERL_VAL),
        R("val-aux/{dataset}/reward/best@{k}/mean", "pass_at_k", _VERL_VAL),
        R("val-core/{dataset}/acc/mean@{n}", "pass_at_1", _VERL_VAL),
        R("val-core/{dataset}/reward/mean@{n}", "pass_at_1", _VERL_VAL, note="when the score function returns no acc"),
        R("val-core/{dataset}/reward/mean@{n}", "reward_heldout", _VERL_VAL),
        R("val-aux/{dataset}/reward/mean@{n}", "reward_heldout", _VERL_VAL, note="when acc is the core variable"),
        R("val-core/{dataset}/acc/mean@{n}", "reward_heldout", _VERL_VAL),
        R("actor/entropy", "entropy", _VERL_RAY),
        R("critic/score/mean", "reward_train", _VERL_METRICS, note="the verifier's raw score"),
        R("critic/rewards/mean", "reward_train", _VERL_METRICS, note="after the KL penalty"),
        R("response_length/mean", "response_length_mean", _VERL_METRICS),
        R("response_length/clip_ratio", "truncated_frac", _VERL_METRICS),
        R("actor/kl_loss", "kl", _VERL_LOSS),
        R("actor/pg_clipfrac", "clip_frac", _VERL_LOSS),
        R("actor/grad_norm", "grad_norm", _VERL_RAY),
        R("actor/pg_loss", "loss", _VERL_LOSS),
    ),
    mode_keys=(
        M("async_training", "present_async", "verl/experimental/fully_async_policy/config/fully_async_ppo_trainer.yaml"),
        M("trainer.use_v1", "false_sync", "verl/trainer/main_ppo.py"),
        M("trainer.v1.trainer_mode", "word", "verl/trainer/ppo/v1/trainer_base.py"),
    ),
    async_markers=("fully_async/",),
    modes_note=(
        "synchronous: the default trainer (trainer.v1.trainer_mode=sync, or trainer.use_v1=false); asynchronous: "
        "the fully-async recipe (an async_training section) and the v1 colocate_async/separate_async trainers. "
        "actor_rollout_ref.rollout.mode=async is the rollout server's mode, not the trainer's."
    ),
)

# -- OpenRLHF ------------------------------------------------------------------------------

_ORLHF = "openrlhf/trainer/ppo_trainer.py"
_ORLHF_ASYNC = "openrlhf/trainer/ppo_trainer_async.py"
_ORLHF_ACTOR = "openrlhf/trainer/ray/ppo_actor.py"

OPENRLHF = Framework(
    "openrlhf",
    "OpenRLHF",
    "OpenRLHF/OpenRLHF",
    "3c3be623",
    (
        R("train/timing/generation", "rollout_s", _ORLHF + ", " + _ORLHF_ASYNC),
        R("train/timing/ppo_train", "train_s", _ORLHF),
        R("train/timing/step_total", "step_s", _ORLHF + ", " + _ORLHF_ASYNC,
          note="synchronous: the sum of the phases; asynchronous: wall clock, queue wait included"),
        R("eval/eval_{dataset}_pass{k}", "pass_at_k", _ORLHF + " (compute_eval_metrics)"),
        R("eval/eval_{dataset}_pass1", "reward_heldout", _ORLHF + " (compute_eval_metrics)", note="mean reward over samples"),
        R("train/entropy_loss", "entropy", _ORLHF_ACTOR, note="logged only when actor.entropy_coef is set; the mean entropy"),
        R("train/rollout/reward_mean", "reward_train", _ORLHF + " (_compute_rollout_stats)"),
        R("train/reward", "reward_train", _ORLHF_ACTOR),
        R("train/rollout/response_length_mean", "response_length_mean", _ORLHF + " (_compute_rollout_stats)"),
        R("train/rollout/truncated_rate", "truncated_frac", _ORLHF + " (_compute_rollout_stats)"),
        R("train/kl", "kl", _ORLHF_ACTOR),
        R("train/ppo_clip_ratio", "clip_frac", _ORLHF_ACTOR),
        R("train/actor_grad_norm", "grad_norm", _ORLHF_ACTOR),
        R("train/policy_loss", "loss", _ORLHF_ACTOR),
    ),
    derived=(
        # Asynchronous: step_total is wall clock including the wait on the rollout queue. In a synchronous run it
        # is the sum of the phases, generation included: what is left is generation, not a stall.
        Derived(
            "stall_s",
            "difference",
            (("train/timing/step_total",), ("train/timing/make_experience",), ("train/timing/ppo_train",), ("train/timing/broadcast",)),
            _ORLHF_ASYNC + " (fit)",
            optional=1,
            mode="async",
        ),
    ),
    mode_keys=(
        M("train.async_enable", "true_async", "openrlhf/cli/train_ppo_ray.py"),
        M("async_enable", "true_async", "openrlhf/cli/train_ppo_ray.py"),
    ),
    modes_note="asynchronous with --train.async_enable (ppo_trainer_async.py), else synchronous.",
)

# -- TRL (keys read from the pip release, which the test suite runs) ---------------------------------

_TRL = "trl/trainer/grpo_trainer.py"
_TRL_ASYNC = "trl/experimental/async_grpo/async_grpo_trainer.py"

TRL = Framework(
    "trl",
    "TRL",
    "huggingface/trl",
    "v1.16.0",
    (
        R("sampling/importance_sampling_ratio/max", CAPPED_IMPORTANCE_WEIGHT_MAX, _TRL,
          note="capped at vllm_importance_sampling_clip_max (3.0), masked entries 0"),
        R("sampling/sampling_logp_difference/max", "logprob_diff_max", _TRL),
        R("sample/staleness_mean", "staleness_mean", _TRL_ASYNC, note="AsyncGRPOTrainer: model versions"),
        R("sample/staleness_max", "staleness_max", _TRL_ASYNC),
        R("perf/rollout_wait_s", "stall_s", _TRL_ASYNC, note="AsyncGRPOTrainer: the trainer blocked on an empty queue"),
        R("perf/step_s", "step_s", _TRL_ASYNC),
        R("perf/fwd_bwd_s", "train_s", _TRL_ASYNC),
        R("perf/mfu_fwd_bwd", "trainer_mfu", _TRL_ASYNC, unit="percent",
          note="compute only; perf/mfu_wall_clock counts the rollout waits too and is left as logged"),
        R("entropy", "entropy", _TRL + ", " + _TRL_ASYNC),
        R("reward", "reward_train", _TRL),
        R("reward_std", "reward_std", _TRL),
        R("frac_reward_zero_std", "zero_std_frac", _TRL),
        R("rewards/{reward}/mean", "reward_train", _TRL, note="one reward function"),
        R("rewards/{reward}", "reward_train", _TRL_ASYNC + " (per-sample rewards, averaged)", note="one reward function"),
        R("eval_reward", "reward_heldout", _TRL, note="GRPOTrainer.log prefixes eval metrics with eval_"),
        R("eval/reward", "reward_heldout", _TRL, note="as W&B's callback rewrites it"),
        R("eval_rewards/{reward}/mean", "reward_heldout", _TRL),
        R("eval/rewards/{reward}/mean", "reward_heldout", _TRL),
        R("completions/mean_length", "response_length_mean", _TRL),
        R("completions/clipped_ratio", "truncated_frac", _TRL),
        R("kl", "kl", _TRL),
        R("clip_ratio/region_mean", "clip_frac", _TRL + ", " + _TRL_ASYNC),
        R("grad_norm", "grad_norm", "transformers/trainer.py"),
        R("loss", "loss", "transformers/trainer.py"),
    ),
    prefixes=("train/",),
    mode_keys=(M("trainer_class", "class", "client/src/parallax/client/integrations.py (ParallaxCallback records it)"),),
    async_markers=("sample/staleness", "perf/rollout_wait_s", "train/sample/staleness", "train/perf/rollout_wait_s"),
    modes_note=(
        "GRPOTrainer (and the other trainers) are synchronous; AsyncGRPOTrainer is asynchronous. step_time, the "
        "inner training step of GRPOTrainer, is not the step's wall time: ParallaxCallback sends step_s itself."
    ),
)

# -- AReaL ---------------------------------------------------------------------------------

_AREAL_ACTOR = "areal/trainer/ppo/actor.py"
_AREAL_TRAINER = "areal/trainer/rl_trainer.py"

AREAL = Framework(
    "areal",
    "AReaL",
    "inclusionAI/AReaL",
    "4aef98d8",
    (
        R("ppo_actor/update/behave_imp_weight/max", CAPPED_IMPORTANCE_WEIGHT_MAX,
          _AREAL_ACTOR + ", areal/utils/functional/functional.py",
          note="logged over the tokens rejection sampling kept (or clamped): a capped maximum"),
        R("ppo_actor/update/logp_abs_diff/max", "logprob_diff_max", _AREAL_ACTOR,
          note="the raw log-probability gap between the trainer and the rollout engine, before any capping"),
        R("ppo_actor/update/grad_norm", "grad_norm", _AREAL_ACTOR),
        R("ppo_actor/update/version_stats/sample_staleness_theta_avg", "staleness_mean", _AREAL_ACTOR + " (_log_version_staleness_stats)"),
        R("ppo_actor/update/version_stats/sample_staleness_theta_max", "staleness_max", _AREAL_ACTOR + " (_log_version_staleness_stats)"),
        R("timeperf/rollout", "rollout_s", _AREAL_TRAINER, mode="sync", note="synchronous: generation"),
        R("timeperf/rollout", "stall_s", _AREAL_TRAINER, mode="async",
          note="asynchronous: the wait in prepare_batch for enough accepted samples"),
        R("timeperf/train_step", "train_s", _AREAL_TRAINER),
        R("ppo_actor/update/entropy/avg", "entropy", _AREAL_ACTOR),
        R("rollout/reward", "reward_train", "areal/workflow/rlvr.py", note="every generated sample"),
        R("ppo_actor/task_reward/avg", "reward_train", _AREAL_ACTOR, note="the samples trained on"),
        R("eval-rollout/reward", "reward_heldout", "areal/workflow/rlvr.py, areal/infra/workflow_context.py"),
        R("ppo_actor/no_eos_ratios/avg", "truncated_frac", _AREAL_ACTOR),
        R("ppo_actor/update/clip_ratio/avg", "clip_frac", _AREAL_ACTOR),
    ),
    derived=(
        # seq_len is prompt + response (attention mask sum), prompt_len the prompt: both averaged over sequences.
        Derived("response_length_mean", "difference", (("ppo_actor/seq_len/avg",), ("ppo_actor/prompt_len/avg",)), _AREAL_ACTOR),
    ),
    mode_keys=(
        M("rollout.max_head_offpolicyness", "zero_sync", "areal/api/cli_args.py", bound=True),
        M("max_head_offpolicyness", "zero_sync", "areal/api/cli_args.py", bound=True),
    ),
    modes_note="rollout.max_head_offpolicyness: 0 (the default) is synchronous, above 0 asynchronous.",
)

# -- PipelineRL ------------------------------------------------------------------------------

_PRL_LOOP = "pipelinerl/finetune_loop.py"
_PRL_ACTOR = "pipelinerl/actor.py"
_PRL_STEP_SAMPLES = ("finetune.train_batch_size", "finetune.gradient_accumulation_passes")

PIPELINERL = Framework(
    "pipelinerl",
    "PipelineRL",
    "ServiceNow/PipelineRL",
    "58d39345",
    (
        R("actor/test_success_mean", "pass_at_1", "pipelinerl/actor.py"),
        R("actor/test_reward_mean", "reward_heldout", "pipelinerl/actor.py"),
        R("rl/entropy", "entropy", "pipelinerl/finetune/rl/__init__.py"),
        R("actor/reward_mean", "reward_train", "pipelinerl/actor.py"),
        R("rl/reward", "reward_train", "pipelinerl/finetune/rl/__init__.py"),
        R("actor/output_tokens_mean", "response_length_mean", "pipelinerl/actor.py"),
        R("rl/kl", "kl", "pipelinerl/finetune/rl/__init__.py"),
        R("stats/grad_norm", "grad_norm", _PRL_LOOP),
        R("stats/time_waiting_for_data", "stall_s", _PRL_LOOP, unit="cumulative", note="cumulative seconds"),
        R("throughput/sec_per_step", "step_s", _PRL_LOOP),
    ),
    derived=(
        # Versions are counted in samples (the version is training_metrics.samples): a lag in samples over the
        # samples of one optimizer step (stats/samples / stats/completed_steps, both cumulative) is a lag in steps.
        Derived("staleness_mean", "scaled", (("stats/lag_mean",), ("stats/completed_steps",), ("stats/samples",)),
                _PRL_LOOP + " (PR #152)", note="samples -> steps"),
        Derived("staleness_max", "scaled", (("stats/lag_max", "stats/lag"), ("stats/completed_steps",), ("stats/samples",)),
                _PRL_LOOP, note="samples -> steps; stats/lag is the lag of the oldest sample, a max"),
        # Without those counters, the samples of one step from the run's config, as PipelineRL computes them
        # (total_batch_size in actor.py): train_batch_size x gradient_accumulation_passes.
        Derived("staleness_mean", "per_config", (("stats/lag_mean",),), _PRL_ACTOR, note="samples -> steps",
                per=_PRL_STEP_SAMPLES),
        Derived("staleness_max", "per_config", (("stats/lag_max", "stats/lag"),), _PRL_ACTOR,
                note="samples -> steps; stats/lag is the lag of the oldest sample, a max", per=_PRL_STEP_SAMPLES),
        # throughput/sec_per_pass is per micro-batch pass: times the passes of the step, the step's training time.
        Derived("train_s", "product", (("throughput/sec_per_pass",), ("throughput/micro_batches_per_step",)), _PRL_LOOP),
    ),
    # max_lag (top level, or copied into finetune) is counted in samples, like the lag (actor.py)
    mode_keys=(
        M("finetune.max_lag", "none", _PRL_ACTOR, bound=True, per=_PRL_STEP_SAMPLES),
        M("max_lag", "none", "conf/base.yaml", bound=True, per=_PRL_STEP_SAMPLES),
    ),
    default_synchronous=False,
    by_design=False,
    modes_note="asynchronous by design.",
)

# -- prime-rl --------------------------------------------------------------------------------

_PRIME_TRAIN = "src/prime_rl/trainer/rl/train.py"
_PRIME_ORCH = "src/prime_rl/orchestrator/orchestrator.py"
_PRIME_METRICS = "src/prime_rl/orchestrator/metrics.py"

PRIME_RL = Framework(
    "prime-rl",
    "prime-rl",
    "PrimeIntellect-ai/prime-rl",
    "559b4477",
    (
        R("off_policy/mean", "staleness_mean", _PRIME_ORCH, note="steps"),
        R("off_policy/max", "staleness_max", _PRIME_ORCH),
        R("mismatch_kl/all/max", "mismatch_kl_max", "src/prime_rl/trainer/rl/loss.py (compute_importance_ratio_and_mismatch_kl), "
          + _PRIME_TRAIN, note="k3 KL r - log r - 1 per token, r = trainer / inference probability; the max over tokens"),
        R("time/wait_for_batch", "stall_s", _PRIME_TRAIN, mode="async"),
        R("time/wait_for_batch", "rollout_s", _PRIME_TRAIN, mode="sync"),
        R("time/step", "step_s", _PRIME_TRAIN),
        R("time/forward_backward", "train_s", _PRIME_TRAIN),
        R("perf/mfu", "trainer_mfu", _PRIME_TRAIN, unit="percent"),
        R("trainer_mfu_percent", "trainer_mfu", "src/prime_rl/trainer/rl/train.py (Prometheus gauge, PR #1547)", unit="percent"),
        R("eval/{dataset}/effective/{name}/pass@{k}", "pass_at_k", _PRIME_METRICS + " (EvalMetrics), src/prime_rl/orchestrator/utils.py"),
        R("eval/{dataset}/effective/{name}/avg@{n}", "reward_heldout", _PRIME_METRICS + " (EvalMetrics)"),
        R("eval/{dataset}/all/{name}/avg@{n}", "reward_heldout", _PRIME_METRICS + " (EvalMetrics)"),
        R("entropy/all/mean", "entropy", _PRIME_TRAIN),
        R("trainer_entropy", "entropy", "src/prime_rl/trainer/rl/train.py (Prometheus gauge, PR #1547)"),
        R("train/agg/effective/{name}/reward/mean", "reward_train", _PRIME_METRICS + " (TrainMetrics), " + _PRIME_ORCH),
        R("train/agg/all/{name}/reward/mean", "reward_train", _PRIME_METRICS + " (TrainMetrics), " + _PRIME_ORCH),
        R("train/agg/all/num_output_tokens/mean", "response_length_mean", _PRIME_METRICS),
        R("train/agg/all/is_truncated/mean", "truncated_frac", _PRIME_METRICS),
        R("optim/grad_norm", "grad_norm", _PRIME_TRAIN),
        R("trainer_loss", "loss", "src/prime_rl/trainer/rl/train.py (Prometheus gauge, PR #1547)"),
    ),
    aliases=("prime_rl", "primerl", "prime"),
    mode_keys=(
        M("orchestrator.max_off_policy_steps", "zero_sync", "packages/prime-rl-configs/src/prime_rl/configs/orchestrator.py",
          bound=True),
        M("max_off_policy_steps", "zero_sync", "packages/prime-rl-configs/src/prime_rl/configs/orchestrator.py", bound=True),
    ),
    default_synchronous=False,
    by_design=False,
    modes_note="asynchronous by design (max_off_policy_steps, default 8); max_off_policy_steps=0 is synchronous.",
)

# -- slime / miles ---------------------------------------------------------------------------

_SLIME_PERF = "slime/observability/train_metric_utils.py (log_perf_data)"
_SLIME_EVAL = "slime/observability/rollout_metrics.py"
_SLIME_LOSS = "slime/backends/megatron_utils/loss.py"
_SLIME_ROLLOUT = "slime/observability/rollout_metrics.py"
_SLIME_DATA = "slime/observability/train_data_utils.py"


def _slime_rules(root: str) -> tuple[Rule, ...]:
    perf = _SLIME_PERF.replace("slime/observability", root)
    return (
        R("perf/train_wait_time", "stall_s", perf + ", slime/backends/megatron_utils/actor.py", mode="async",
          note="train_async.py: the trainer waiting for the next rollout"),
        R("perf/train_wait_time", "rollout_s", perf, mode="sync", note="train.py: the trainer waiting for generation"),
        R("perf/rollout_time", "rollout_s", perf),
        R("perf/actor_train_time", "train_s", perf),
        R("perf/train_time", "train_s", perf),
        R("perf/step_time", "step_s", perf, note="train_wait_time + train_time"),
        # passrate/* are pass@k of the training rollout groups (--log-passrate), not held-out.
        R("passrate/pass@{k}", "pass_at_k_train", "slime/observability/train_metric_utils.py (log_passrate)"),
        R("eval/{dataset:segment}-pass@{k}", "pass_at_k", _SLIME_EVAL),
        R("eval/{dataset:segment}", "reward_heldout", _SLIME_EVAL, exclude=(r".*-truncated_ratio", "step"),
          note="mean reward of one eval dataset"),
        R("train/entropy_loss", "entropy", _SLIME_LOSS, note="the mean entropy"),
        R("rollout/entropy", "entropy", _SLIME_DATA),
        R("rollout/raw_reward", "reward_train", _SLIME_DATA, note="rollout/rewards is group-normalised: not mapped"),
        R("rollout/response_len/mean", "response_length_mean", _SLIME_ROLLOUT),
        R("rollout/truncated_ratio", "truncated_frac", _SLIME_ROLLOUT),
        R("train/kl_loss", "kl", _SLIME_LOSS),
        R("train/pg_clipfrac", "clip_frac", _SLIME_LOSS),
        R("train/grad_norm", "grad_norm", "slime/backends/megatron_utils/model.py"),
        R("train/pg_loss", "loss", _SLIME_LOSS),
        R("train/train_rollout_logprob_abs_diff", "logprob_diff_mean", _SLIME_LOSS,
          note="mean |logp_train - logp_rollout| over the tokens (--use-tis / --get-mismatch-metrics); no max is logged"),
    )


_SLIME_MODES = (
    M("colocate", "true_sync", "slime/utils/arguments.py (train_async.py refuses --colocate)"),
)
#: train.py's wait is the whole generation (never a twentieth of training); train_async.py's is ~0 while the
#: rollouts keep ahead (slime/backends/megatron_utils/actor.py, inverse_timer("train_wait")).
_SLIME_IDLE_WAIT = ("perf/train_wait_time", ("perf/train_time", "perf/actor_train_time"))

SLIME = Framework(
    "slime",
    "slime",
    "THUDM/slime",
    "624b824a",
    _slime_rules("slime/observability"),
    mode_keys=_SLIME_MODES,
    idle_wait=_SLIME_IDLE_WAIT,
    modes_note=(
        "train.py is synchronous, train_async.py asynchronous; the config only says so with --colocate "
        "(synchronous): runs of train_async.py may set Parallax's mode=async in the run's config, else they are "
        "read as asynchronous once perf/train_wait_time (train.py: the whole generation) stayed under a twentieth "
        "of perf/train_time on 5 steps."
    ),
)

MILES = Framework(
    "miles",
    "miles",
    "radixark/miles",
    "31f1ca96",
    (
        R("rollout/fully_async/avg_staleness", "staleness_mean", "miles/rollout/fully_async_data_buffer.py", note="weight versions"),
        R("rollout/fully_async/max_staleness", "staleness_max", "miles/rollout/fully_async_data_buffer.py"),
        R("perf/actor_train_mfu", "trainer_mfu", "miles/utils/train_metric_utils.py", note="fraction 0..1"),
        R("rollout/tito_session_mismatch_rate/v2", "token_mismatch_rate", "miles/ray/rollout/metrics.py"),
        R("rollout/tito_session_mismatch_rate/v1", "token_mismatch_rate", "miles/ray/rollout/metrics.py"),
    )
    + tuple(
        Rule(r.key, r.target, r.source.replace("slime/", "miles/"), r.unit, r.mode, r.sequence_target, r.exclude, r.note)
        for r in _slime_rules("miles/utils")
    ),
    mode_keys=tuple(M(m.path, m.reads, m.source.replace("slime/", "miles/")) for m in _SLIME_MODES),
    async_markers=("rollout/fully_async/",),
    idle_wait=_SLIME_IDLE_WAIT,
    modes_note="as slime; runs that log rollout/fully_async/* are asynchronous.",
)

# -- SkyRL -----------------------------------------------------------------------------------

_SKY_TRAINER = "skyrl/train/trainer.py"
_SKY_ASYNC = "skyrl/train/fully_async_trainer.py"
_SKY_WORKER = "skyrl/backends/skyrl_train/workers/worker.py"
_SKY_EVAL = "skyrl/train/evaluate.py, skyrl/train/utils/trainer_utils.py"

SKYRL = Framework(
    "skyrl",
    "SkyRL",
    "NovaSky-AI/SkyRL",
    "a9564572",
    (
        R("policy/loss_metrics/is_ratio_max", "importance_weight_max", "skyrl/backends/skyrl_train/utils/off_policy_correction_utils.py",
          note="clipped only at e^20: raw in practice"),
        R("policy/rollout_train_logprobs_abs_diff_max", "logprob_diff_max", _SKY_TRAINER),
        R("policy/rollout_train_logprobs_abs_diff_mean", "logprob_diff_mean", _SKY_TRAINER),
        R("async/staleness_mean", "staleness_mean", _SKY_ASYNC, note="global steps"),
        R("async/staleness_max", "staleness_max", _SKY_ASYNC),
        R("timing/wait_for_generation_buffer", "stall_s", _SKY_ASYNC, note="only the fully-async trainer logs it"),
        R("timing/generate", "rollout_s", _SKY_TRAINER),
        R("timing/train_critic_and_policy", "train_s", _SKY_TRAINER),
        R("timing/step", "step_s", _SKY_TRAINER),
        R("eval/all/pass_at_{k}", "pass_at_k", _SKY_EVAL),
        R("eval/{dataset}/pass_at_{k}", "pass_at_k", _SKY_EVAL, exclude=("all",)),
        R("eval/all/avg_score", "reward_heldout", _SKY_EVAL),
        R("eval/{dataset}/avg_score", "reward_heldout", _SKY_EVAL, exclude=("all",)),
        # reward/avg_pass_at_{n} is pass@n of the training rollout groups, not held-out.
        R("reward/avg_pass_at_{k}", "pass_at_k_train", _SKY_TRAINER),
        R("policy/policy_entropy", "entropy", _SKY_WORKER),
        R("reward/avg_raw_reward", "reward_train", _SKY_TRAINER),
        R("generate/avg_num_tokens", "response_length_mean", "skyrl/train/generators/utils.py"),
        R("generate/std_num_tokens", "response_length_std", "skyrl/train/generators/utils.py"),
        R("policy/policy_kl", "kl", _SKY_WORKER),
        R("policy/loss_metrics/clip_ratio", "clip_frac", _SKY_WORKER),
        R("policy/grad_norm", "grad_norm", _SKY_WORKER),
    ),
    # the fully-async trainer's bound on a sample's lag; whether 0 makes it synchronous is not read here
    mode_keys=(M("trainer.fully_async.max_staleness_steps", "none", _SKY_ASYNC, bound=True),),
    async_markers=("async/", "timing/wait_for_generation_buffer"),
    modes_note="the default trainer is synchronous; the fully-async trainer logs async/* keys.",
)

# -- ROLL --------------------------------------------------------------------------------------

_ROLL_RLVR = "roll/pipeline/rlvr/rlvr_pipeline.py"
_ROLL_METRICS = "roll/utils/metrics/metrics_manager.py"

ROLL = Framework(
    "roll",
    "ROLL",
    "alibaba/ROLL",
    "8eb27cc2",
    (
        # actor/ratio_max@max is the PPO ratio (pi_theta/pi_old), not trainer vs rollout: not mapped.
        R("time/step_generate", "rollout_s", _ROLL_RLVR, note="synchronous or not, the generation phase of the step"),
        R("time/step_train", "train_s", _ROLL_RLVR),
        R("time/step_total", "step_s", _ROLL_RLVR, unit="previous_step", note="logged at step N for step N-1"),
        R("val_correct/all/mean", "pass_at_1", _ROLL_RLVR, note="fraction of held-out samples scored 1"),
        R("val_correct/all/mean", "reward_heldout", _ROLL_RLVR),
        R("val_correct/{dataset}/mean", "reward_heldout", _ROLL_RLVR, exclude=("all",)),
        R("val/score/mean", "reward_heldout", "roll/pipeline/agentic/agentic_pipeline.py"),
        R("critic/entropy/mean", "entropy", _ROLL_METRICS),
        R("critic/score/mean", "reward_train", _ROLL_METRICS),
        R("token/response_length/mean", "response_length_mean", _ROLL_METRICS),
        R("critic/kl", "kl", _ROLL_METRICS),
        R("actor/ppo_ratio_clipfrac@sum", "clip_frac", "roll/pipeline/base_worker.py"),
    ),
    mode_keys=(M("async_generation_ratio", "zero_sync", "roll/configs/base_config.py"),),
    modes_note="async_generation_ratio: 0 (the default) is synchronous, above 0 asynchronous.",
)

# -- tinker-cookbook ---------------------------------------------------------------------------

TINKER = Framework(
    "tinker-cookbook",
    "tinker-cookbook",
    "thinking-machines-lab/tinker-cookbook",
    "9dfcc3a2",
    (
        R("sampling_client/step_mean", "staleness_mean", "tinker_cookbook/rl/metrics.py (compute_sampling_client_metrics)", unit="step_minus"),
        R("sampling_client/step_min", "staleness_max", "tinker_cookbook/rl/metrics.py (compute_sampling_client_metrics)", unit="step_minus"),
        R("time/train_step", "train_s", "tinker_cookbook/utils/trace.py (scope timings of rl/train.py's train_step)"),
        R("optim/entropy", "entropy", "tinker_cookbook/rl/metrics.py"),
        R("env/all/reward/total", "reward_train", "tinker_cookbook/rl/metric_util.py"),
        R("test/env/all/reward/total", "reward_heldout", "tinker_cookbook/rl/metric_util.py (RLTestSetEvaluator, name test)"),
        R("test/env/{dataset}/reward/total", "reward_heldout", "tinker_cookbook/rl/metric_util.py", exclude=("all",),
          note="one tag of the test set"),
    ),
    aliases=("tinker", "tinker_cookbook"),
    mode_keys=(M("async_config", "present_async", "tinker_cookbook/rl/train.py (Config.async_config)"),),
    modes_note="asynchronous when the config has an async_config (max_steps_off_policy), else synchronous.",
)

#: In detection order: on a tie the first wins.
FRAMEWORKS: tuple[Framework, ...] = (VERL, OPENRLHF, TRL, AREAL, PIPELINERL, PRIME_RL, MILES, SLIME, SKYRL, ROLL, TINKER)
