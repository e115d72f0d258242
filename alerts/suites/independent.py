"""Independent labelled runs (family ``independent``): a second generator, written apart from the rules.

It simulates the processes behind an RL run step by step instead of drawing clean curves plus noise, then
renders what a trainer would log: canonical names (DESIGN §1), or on about 40% of runs one framework's own
keys as its source logs them (from ``/work/shared/reference/framework_metric_keys.md``, corrections first).
Everything is drawn from ``random.Random(seed)`` (a numpy generator per run is seeded from it).

Model of a healthy run
----------------------
- Noise: AR(1) with Student-t innovations (df 3 or 4) on almost every metric; multiplicative (lognormal)
  noise on timings; a warm-up factor (1 + a*exp(-t/tau), a in [0.6, 2.0], tau in [3, 15] steps) on the
  noise of reward, entropy, grad norm and loss; MFU ramps up over the first few steps.
- Lengths: mean response length L0 in [150, 3000] tokens, drifting by x0.85..x1.7 over the run (reasoning
  RL grows answers), coefficient of variation 0.35..0.9, capped at the max response length.
- Padding/MFU: packed runs pad 1..8%; unpacked runs pad 1 - 1/(1 + z*cv) (z in [0.4, 0.9]: bucketing helps
  partly), 15..40%. MFU0 in [0.2, 0.5] scales with (1 - pad) and with a DP-rank straggler factor
  (1 + a*cv0)/(1 + a*cv). Train time per step = T0 * (L/L0) * (MFU0/MFU).
- Asynchronous runs: the rollout side makes a batch in rho*T0 (rho0 in [0.45, 0.9], a slow log-AR wander,
  capped at 0.98 when healthy). A batch queue (capacity bound+1, or 2..6 when the run has no bound)
  is simulated: the trainer stalls only when the queue is empty (step 0, after a resume, when rho > 1).
  Staleness mean ~ lambda_t * queue depth + 0.15 with lambda_t wandering in [0.15, 1] (share of
  partial rollouts that span versions), clipped at the bound: it swings anywhere in [0, bound] and often
  sits on it; staleness max = min(bound, ceil(mean + spread)). About a third of runs have no
  ``staleness_bound`` in their config. Jitter stalls: on 15..50% of steps Exp(1..4% of train time), and
  rare (1%) one-step hiccups of 10..30%.
- Synchronous (colocated) runs: no staleness (0 or not sent); generation takes rho_s*T0 (rho_s in
  [0.7, 3]): 40..75% of each step, and the "wait for generation" timers the frameworks log are that.
  Half of the canonical synchronous runs say ``synchronous: true``; framework runs carry only their
  framework's own keys (verl ``hybrid_engine``, AReaL ``async_training: false``, slime ``colocate``...).
- Mismatch: token-level max |logp_trainer - logp_rollout| = engine part (0.25..1 nats, t-noise) +
  staleness drift c*s/(1 + s/40) (c in [0.08, 0.25] nats per version) + one-step spikes (1.2%/step,
  +1.5..4 nats). importance_weight_max = exp(u * that), u in [0.55, 1] (the max is one-sided); sequence
  level ratios exponentiate a multiple of it. Token mismatch / prefix break rates are ~0.
- Skill: latent logit s = s0 + gain*(1 - exp(-t/tau)) (gain 0.3..1.8 logits) + AR noise. Train reward =
  sigmoid(s + offset) + batch noise (sd sqrt(p(1-p)/n_b), t-tails), or a reward-model score
  a + b*(s + offset) on another scale. 15% of healthy runs switch curriculum (train reward drops
  0.4..0.9 logits at once). Held-out datasets (1..3, difficulty offsets N(0, 0.8)) follow s0 + g*(s - s0),
  g in [0.4, 1.1]: held-out often lags train.
- pass@k: per-problem success p_i ~ Beta(m*kappa, (1-m)*kappa), m = pass@1, so
  pass@k = 1 - prod_{j<k} (beta+j)/(kappa+j) exactly; kappa0 in [0.8, 3] narrows by 10..40% over a healthy
  run (RL sharpens: the pass@k gap shrinks a little). Eval noise from the problem count (30..1319
  problems: AIME-sized sets are noisy). Evaluations every 5..50 steps, often at step 0 and at the end.
- Entropy e0 in [0.25, 1.5] nats declines slowly to 45..85% (15% of runs rise by 5..30%); KL to the
  reference grows like t^0.8 to 0.002..0.05; clip fraction 0.2..4% (+0.4% per version of staleness);
  grad norm lognormal (heavy tails) with one-step x4..15 spikes (0.8%/step); GRPO loss ~0 +- t-noise.
- Resumes (about a third of runs, 1 or 2): 2..15 min of silence, the queue restarts empty, and for 3..10
  steps staleness jumps (up to 1.5x the bound), mismatch jumps (+1..3 nats, mismatch rate up to 8%), MFU
  dips (-20..45%) and train reward dips; afterwards levels shift by a few % (MFU, engine mismatch, rho).
- Wall time: step time (+0.2..2 s logging) + evaluation time at eval steps (30..600 s) + checkpoint saves
  every 25..100 steps (20..240 s) + resume gaps; start within an hour of T0.

Faults (from ``onset``, 60+ steps in and 60+ before the end), magnitudes a practitioner would recognise
------------------------------------------------------------------------------------------------------
- stale_rollouts (async): weight sync lags, so an extra lag L_t adds to staleness and to the policy
  drift: ``sync_slow`` (weights land every few steps, the interval growing by 0.1..0.4 per step up to
  1.2..3x the bound: a ragged sawtooth; weight sync 2..6x slower),
  ``sync_stuck`` (rollout weights never update: L climbs 0.5..1 per step), ``resume_bound_bug`` (after
  a resume at onset the bound is not enforced: lag 0.6..2x bound, slowly growing; AReaL #1388).
  Importance weights rise with it unless an IS cap is what gets logged. Learning slows.
- token_mismatch: staleness flat; ``retokenize`` (detok->retok: +3..8 nats on 70..100% of steps,
  mismatch rate 5..35%), ``template_drops_reasoning`` (+4..10 nats on 85..100% of steps, prefix break
  rate = multi-turn share 30..90%), ``nonexact_prefix`` (a dropped separator: +1.5..4 nats on 40..80% of
  steps, prefix break 5..30%). Mean |dlogp| 0.01 -> 0.02..0.3, clip fraction +2..10%, grad norm x1.3..2.5,
  learning stalls. A quarter of them start with a restart (the harness change is deployed).
- unbalanced_groups (async): rollout becomes slower than training: ``rollout_node_lost`` (rho steps to
  1.3..2.2), ``env_latency`` (rho ramps there over 20..60 steps), ``long_tail`` (lengths and their spread
  grow, rollout time follows the tail). Trainer idle share 1 - 1/rho = 23..55%, staleness falls toward 0.
- padding_imbalance: ``long_tail`` (cv ramps x1.8..2.6, mean x1.2..1.6), ``mix_shift`` (long multi-turn
  samples mixed in: cv x2..3 and mean x1.3..2 at once), ``packing_off`` (sequence packing lost at a
  resume: padding jumps, length spread unchanged). Padding to 35..65%, MFU down 30..60%, train time up.
- exploration_collapse: entropy decays to 5..20% of its level (tau 8..40 steps); kappa falls to 4..15%,
  so pass@k converges onto pass@1 (the gap shrinks by 60..95%) while pass@1 holds or rises; KL up, clip
  fraction and grad norm down, answers shorter. Variants: ``fast``, ``slow``, ``after_lr_bump`` (resume).
- reward_hacking: training reward gains an exploit term (A = 35..85% of the failure mass, over 20..80
  steps; on reward-model scales +0.3..2.5x the score scale) while the held-out skill freezes and drifts down (0..0.5
  logit): ``length_exploit`` (lengths x1.6..3), ``verifier_loophole`` (train -> near 1, lengths flat or
  shorter), ``overoptimization`` (held-out rises a little, then falls). KL grows 2..6x faster.
- numerical_blowup: ``nan_all`` (loss, grad norm, KL, entropy, ratios NaN from onset; rewards fall to the
  floor), ``grad_explosion`` (grad norm x3 per step for 3..12 steps, then inf/NaN), ``is_overflow``
  (ratio and log-prob gap inf, KL NaN; loss NaN 2..10 steps later), ``nan_skipped`` (NaN loss/grad norm on
  30..70% of steps, updates skipped, the run goes on).
- trainer_silent: no data from the onset on: ``crash`` (OOM/NCCL), ``hang``, ``slowdown_then_hang``
  (the last 3..10 steps take 1.5..4x longer), ``logging_broke``; ``silent_from`` is when it died
  (between its last report and the next one due). Half have a total step count in their config.
"""

from __future__ import annotations

import math
import random
import re

import numpy as np

from parallax.alerts.suites import CAUSES, T0, Scenario

FAMILY = "independent"

#: Framework key sets rendered, and the modes each is generated in.
FRAMEWORK_MODES: dict[str, tuple[str, ...]] = {
    "verl": ("sync",),
    "trl": ("sync",),
    "openrlhf": ("sync",),
    "areal": ("async", "sync"),
    "prime-rl": ("async",),
    "slime": ("sync", "async"),
    "skyrl": ("async",),
    "pipelinerl": ("async",),
}
FRAMEWORKS = tuple(FRAMEWORK_MODES)

#: Key sets that log the evidence a cause shows in (others would make the fault invisible).
CAUSE_FRAMEWORKS: dict[str | None, tuple[str, ...]] = {
    None: FRAMEWORKS,
    "stale_rollouts": ("areal", "prime-rl", "skyrl", "pipelinerl"),
    "token_mismatch": ("verl", "trl", "areal", "prime-rl", "slime", "skyrl"),
    "unbalanced_groups": ("areal", "prime-rl", "skyrl", "pipelinerl", "slime"),
    "padding_imbalance": ("verl", "prime-rl"),
    "exploration_collapse": ("verl", "prime-rl", "openrlhf", "skyrl", "slime"),
    "reward_hacking": FRAMEWORKS,
    "numerical_blowup": FRAMEWORKS,
    "trainer_silent": FRAMEWORKS,
}

VARIANTS: dict[str, tuple[str, ...]] = {
    "stale_rollouts": ("sync_slow", "sync_stuck", "resume_bound_bug"),
    "token_mismatch": ("retokenize", "template_drops_reasoning", "nonexact_prefix"),
    "unbalanced_groups": ("rollout_node_lost", "env_latency", "long_tail"),
    "padding_imbalance": ("long_tail", "mix_shift", "packing_off"),
    "exploration_collapse": ("fast", "slow", "after_lr_bump"),
    "reward_hacking": ("length_exploit", "verifier_loophole", "overoptimization"),
    "numerical_blowup": ("nan_all", "grad_explosion", "is_overflow", "nan_skipped"),
    "trainer_silent": ("crash", "hang", "slowdown_then_hang", "logging_broke"),
}

#: What each framework key stands for (canonical name), None for supporting keys with no canonical twin.
#: Placeholders: {ds} a dataset / env name (may contain "/"), {n} a sample count.
FRAMEWORK_KEYS: dict[str, dict[str, str | None]] = {
    "verl": {
        "actor/entropy": "entropy", "critic/score/mean": "reward_train", "critic/rewards/mean": None,
        "actor/pg_clipfrac": "clip_frac", "actor/kl_loss": "kl", "actor/grad_norm": "grad_norm",
        "response_length/mean": "response_length_mean", "response_length/max": None,
        "response_length/clip_ratio": None, "global_seqlen/minmax_diff": None, "perf/mfu/actor": "trainer_mfu",
        "perf/throughput": None, "timing_s/gen": "rollout_s", "timing_s/old_log_prob": None, "timing_s/ref": None,
        "timing_s/update_actor": "train_s", "timing_s/step": "step_s",
        "training/rollout_probs_diff_max": None, "training/rollout_probs_diff_mean": None,
        "rollout_corr/rollout_is_max": "importance_weight_max", "rollout_corr/rollout_is_mean": None,
        "rollout_corr/rollout_is_ratio_fraction_high": None, "rollout_corr/log_ppl_diff_max": None,
        "val-core/{ds}/acc/mean@{n}": "pass_at_1", "val-core/{ds}/acc/best@{n}/mean": "pass_at_k",
        "val-core/{ds}/reward/mean@{n}": "reward_heldout",
    },
    "trl": {
        "entropy": "entropy", "reward": "reward_train", "reward_std": None, "kl": "kl", "loss": "loss",
        "grad_norm": "grad_norm", "clip_ratio/region_mean": "clip_frac", "completions/mean_length": "response_length_mean",
        "completions/max_length": None, "completions/min_length": None, "completions/clipped_ratio": None,
        "frac_reward_zero_std": None, "sampling/importance_sampling_ratio/max": None,
        "sampling/sampling_logp_difference/max": "logprob_diff_max", "sampling/sampling_logp_difference/mean": None,
        "step_time": "step_s", "eval_reward": "reward_heldout",
    },
    "openrlhf": {
        "train/entropy_loss": "entropy", "train/rollout/reward_mean": "reward_train", "train/kl": "kl",
        "train/ppo_clip_ratio": "clip_frac", "train/actor_grad_norm": "grad_norm",
        "train/rollout/response_length_mean": "response_length_mean", "train/rollout/truncated_rate": None,
        "train/timing/generation": "rollout_s", "train/timing/make_experience": None, "train/timing/ppo_train": "train_s",
        "train/timing/broadcast": None, "train/timing/step_total": "step_s",
        "eval/eval_{ds}_pass1": "pass_at_1", "eval/eval_{ds}_pass{n}": "pass_at_k",
    },
    "areal": {
        "ppo_actor/update/behave_imp_weight/max": None, "ppo_actor/update/behave_imp_weight/avg": None,
        "ppo_actor/update/logp_abs_diff/max": "logprob_diff_max",
        "ppo_actor/update/version_stats/sample_staleness_theta_avg": "staleness_mean",
        "ppo_actor/update/version_stats/sample_staleness_theta_max": "staleness_max",
        "timeperf/rollout": None, "timeperf/train_step": "train_s", "timeperf/update_weights": None,
        "timeperf/recompute_logp": None, "ppo_actor/update/entropy/avg": "entropy", "rollout/reward": "reward_train",
        "eval-rollout/reward": "reward_heldout", "ppo_actor/update/grad_norm": "grad_norm",
        "ppo_actor/update/clip_ratio/avg": "clip_frac", "ppo_actor/seq_len/avg": None,
    },
    "prime-rl": {
        "off_policy/mean": "staleness_mean", "off_policy/max": "staleness_max", "time/wait_for_batch": "stall_s",
        "time/step": "step_s", "time/forward_backward": "train_s", "time/broadcast_weights": None,
        "perf/mfu": "trainer_mfu", "entropy/all/mean": "entropy", "mismatch_kl/all/max": None,
        "mismatch_kl/all/mean": None, "optim/grad_norm": "grad_norm", "is_masked/mean": None,
        "train/agg/all/{ds}/reward/mean": "reward_train", "train/agg/all/num_output_tokens/mean": "response_length_mean",
        "train/agg/all/num_output_tokens/max": None, "train/agg/all/num_output_tokens/p10": None,
        "train/agg/all/num_output_tokens/p90": None,
        "eval/{ds}/effective/{ds}/pass@1": "pass_at_1", "eval/{ds}/effective/{ds}/pass@{n}": "pass_at_k",
        "eval/{ds}/effective/{ds}/avg@{n}": "reward_heldout",
    },
    "slime": {
        "perf/train_wait_time": None, "perf/train_time": "train_s", "perf/step_time": "step_s",
        "perf/wait_time_ratio": None, "perf/actor_train_tflops": None, "perf/actor_train_tok_per_s": None,
        "train/entropy_loss": "entropy", "train/train_rollout_logprob_abs_diff": None, "train/tis": None,
        "train/tis_clipfrac": None, "train/pg_clipfrac": "clip_frac", "train/kl_loss": "kl",
        "train/grad_norm": "grad_norm", "rollout/raw_reward": "reward_train", "rollout/response_len/mean": "response_length_mean",
        "rollout/truncated_ratio": None, "eval/{ds}": "reward_heldout", "eval/{ds}-pass@{n}": "pass_at_k",
    },
    "skyrl": {
        "async/staleness_mean": "staleness_mean", "async/staleness_max": "staleness_max",
        "timing/wait_for_generation_buffer": "stall_s", "timing/train_critic_and_policy": "train_s",
        "timing/sync_weights": None, "timing/step": "step_s", "policy/loss_metrics/is_ratio_max": "importance_weight_max",
        "policy/rollout_train_logprobs_abs_diff_max": "logprob_diff_max", "policy/policy_entropy": "entropy",
        "reward/avg_raw_reward": "reward_train", "eval/all/avg_score": "reward_heldout",
        "eval/all/pass_at_{n}": "pass_at_k", "eval/{ds}/avg_score": None, "eval/{ds}/pass_at_{n}": None,
        "generate/avg_num_tokens": "response_length_mean", "generate/std_num_tokens": "response_length_std",
        "generate/max_num_tokens": None, "policy/grad_norm": "grad_norm", "policy/policy_kl": "kl",
        "policy/loss_metrics/clip_ratio": "clip_frac",
    },
    "pipelinerl": {
        # stats/lag: a max, in samples; stats/time_waiting_for_data: cumulative seconds
        "stats/lag": "staleness_max", "stats/time_waiting_for_data": "stall_s", "throughput/sec_per_step": "step_s",
        "rl/entropy": "entropy", "actor/reward_mean": "reward_train", "actor/test_reward_mean": "reward_heldout",
        "actor/test_success_mean": "pass_at_1", "stats/grad_norm": "grad_norm", "rl/ratio_new_old": None,
        "actor/output_tokens_mean": "response_length_mean",
    },
}


#: Where each key set's config says how many steps the run trains (dotted path), None: it does not say.
TOTAL_STEPS_KEY: dict[str | None, str | None] = {
    None: "total_steps", "verl": "trainer.total_training_steps", "trl": "max_steps", "openrlhf": None,
    "areal": "total_train_steps", "prime-rl": "max_steps", "slime": "num_rollout", "skyrl": None,
    "pipelinerl": "finetune.max_train_steps",
}


def total_steps_of(config: dict) -> int | None:
    """The configured number of training steps, read where the run's framework puts it."""
    path = TOTAL_STEPS_KEY.get(config.get("framework"))
    if path is None:
        return None
    node: object = config
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, int) else None


def _key_regex(template: str) -> re.Pattern[str]:
    parts = re.split(r"(\{ds\}|\{n\})", template)
    rx = "".join(".+" if p == "{ds}" else r"\d+" if p == "{n}" else re.escape(p) for p in parts)
    return re.compile(rx + "$")


_KEY_PATTERNS = {fw: [(t, _key_regex(t), c) for t, c in keys.items()] for fw, keys in FRAMEWORK_KEYS.items()}


def framework_key(framework: str, key: str) -> tuple[bool, str | None]:
    """(is this a key of that framework's set, the canonical metric it stands for or None).

    The most specific template wins (most literal characters): ``eval/{ds}-pass@{n}`` over ``eval/{ds}``.
    """
    best: tuple[int, str | None] | None = None
    for template, rx, canonical in _KEY_PATTERNS[framework]:
        if key == template or ("{" in template and rx.match(key)):
            literal = len(re.sub(r"\{ds\}|\{n\}", "", template))
            if best is None or literal > best[0]:
                best = (literal, canonical)
    return (True, best[1]) if best else (False, None)


# --------------------------------------------------------------------------------------------- helpers


def _ar1(g: np.random.Generator, n: int, phi: float, sd: float, df: float = 4.0) -> np.ndarray:
    """Stationary AR(1) with marginal sd ``sd`` and Student-t innovations."""
    innov = g.standard_t(df, n) * (sd * math.sqrt((df - 2.0) / df) * math.sqrt(1.0 - phi * phi))
    out = np.empty(n)
    acc = g.normal(0.0, sd)
    for i in range(n):
        acc = phi * acc + innov[i]
        out[i] = acc
    return out


def _ramp(t: np.ndarray, start: float, dur: float) -> np.ndarray:
    """0 before ``start``, smooth 0->1 over ``dur`` steps, then 1."""
    s = np.clip((t - start) / max(dur, 1.0), 0.0, 1.0)
    return s * s * (3.0 - 2.0 * s)


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


def _pass_at(m: np.ndarray, kappa: np.ndarray, k: int) -> np.ndarray:
    """pass@k when per-problem success ~ Beta(m*kappa, (1-m)*kappa): 1 - prod_j (beta+j)/(kappa+j)."""
    b = (1.0 - m) * kappa
    prod = np.ones_like(m)
    for j in range(k):
        prod = prod * (b + j) / (kappa + j)
    return 1.0 - prod


def _lu(g: np.random.Generator, lo: float, hi: float) -> float:
    """Log-uniform draw."""
    return float(math.exp(g.uniform(math.log(lo), math.log(hi))))


DATASETS = {
    "verl": ["openai/gsm8k", "lighteval/MATH", "AI-MO/aimo-validation-aime", "codeparrot/apps"],
    "openrlhf": ["math500", "aime24", "gpqa_diamond", "gsm8k"],
    "prime-rl": ["math-env", "aime2024", "code-env", "wordle"],
    "slime": ["aime", "math500", "gpqa", "livecodebench"],
    "skyrl": ["gsm8k", "aime", "math", "swe_bench_lite"],
    None: ["math500", "aime24", "gsm8k", "code_tests", "tool_tasks"],
}


# ----------------------------------------------------------------------------------------------- a run


class _Run:
    """One simulated run: plan, processes, faults, then what its trainer logs."""

    def __init__(self, g: np.random.Generator, seed: int, index: int, cause: str | None, framework: str | None,
                 variant_index: int = 0, reward_effect: bool = True):
        self.g, self.cause, self.fw, self.variant_index = g, cause, framework, variant_index
        self.reward_effect = reward_effect
        self.name = f"ind-{seed}-{index:03d}"
        self._plan()
        self._simulate()

    # ---------------------------------------------------------------------------------------- plan
    def _plan(self) -> None:
        g, cause, fw = self.g, self.cause, self.fw
        need_async = cause in ("stale_rollouts", "unbalanced_groups")
        if fw is not None:
            modes = [m for m in FRAMEWORK_MODES[fw] if not need_async or m == "async"]
            self.sync = str(g.choice(modes)) == "sync"
        else:
            self.sync = (not need_async) and g.random() < 0.38
        self.variant = VARIANTS[cause][self.variant_index % len(VARIANTS[cause])] if cause else "healthy"
        self.n = int(round(_lu(g, 150, 600)))
        self.onset = int(g.integers(60, self.n - 60 + 1)) if cause else None
        tail = self.n - (self.onset or 0)
        # task: verifier rewards in [0, 1], or a reward model's score scale
        verifier_only = cause == "exploration_collapse" or fw in ("verl", "openrlhf", "skyrl", "pipelinerl")
        self.verifier = verifier_only or g.random() < 0.7
        self.task = str(g.choice(["math-verifier", "code-tests", "agent-tools"])) if self.verifier else str(
            g.choice(["chat-rm", "judge-score", "summarize-rm"]))
        self.k = int(g.choice([4, 8, 8, 16])) if fw is not None or g.random() < 0.6 else 8
        self.k_in_config = fw is None and (self.k != 8 or g.random() < 0.5)
        n_ds = 1 if fw in ("trl", "areal", "pipelinerl") else int(g.choice([1, 1, 2, 3]))
        names = list(DATASETS.get(fw, DATASETS[None]))
        g.shuffle(names)
        self.datasets = [(names[i], float(g.normal(0.0, 0.8)), int(g.choice([30, 200, 500, 1319]))) for i in range(n_ds)]
        every = int(g.integers(5, 51))
        if cause in ("exploration_collapse", "reward_hacking"):
            every = max(5, min(every, tail // 5))
        self.eval_every = every
        self.eval_steps = sorted({s for s in range(every, self.n, every)}
                                 | ({0} if g.random() < 0.5 else set()) | ({self.n - 1} if g.random() < 0.5 else set()))
        self.bound = int(g.choice([1, 2, 2, 3, 4, 4, 8])) if not self.sync else 0
        self.bound_in_config = (not self.sync) and g.random() < 0.68
        # resumes: a third of runs; some faults start with one
        self.resumes: list[int] = []
        if g.random() < 0.33:
            for _ in range(int(g.choice([1, 1, 2]))):
                r = int(g.integers(15, self.n - 10))
                if self.onset is None or abs(r - self.onset) > 12:
                    self.resumes.append(r)
        starts_with_resume = (self.variant in ("resume_bound_bug", "packing_off", "after_lr_bump")
                              or (cause == "token_mismatch" and g.random() < 0.25))
        if starts_with_resume:
            self.resumes.append(self.onset)
        self.resumes = sorted(set(self.resumes))
        if cause == "trainer_silent":
            self.resumes = [r for r in self.resumes if r < self.onset]
            self.end = "finished"
            self.total = self.n if g.random() < 0.5 and TOTAL_STEPS_KEY[fw] else None
        elif TOTAL_STEPS_KEY[fw] is None:  # its config never says how long it trains: it can only end "finished"
            self.end, self.total = "finished", None
        else:
            self.end = "total_steps" if g.random() < 0.5 else "finished"
            if self.end == "total_steps":
                self.total = self.n
            else:
                u = g.random()
                self.total = self.n if u < 0.35 else int(self.n * g.uniform(1.2, 3.0)) if u < 0.5 else None
        # framework-only choices
        self.is_cap = float(g.choice([2.0, 3.0, 5.0])) if fw is None and not self.sync and g.random() < 0.12 else None
        self.opt = {"logprobs": g.random() < 0.6, "rollout_corr": g.random() < 0.4, "entropy_coef": g.random() < 0.6,
                    "mismatch": g.random() < 0.6, "offpolicy_corr": g.random() < 0.6, "kl": g.random() < 0.6,
                    "eval": g.random() < 0.8}
        if cause == "token_mismatch":
            self.opt.update(logprobs=True, mismatch=True, offpolicy_corr=True)
        if cause == "exploration_collapse":
            self.opt.update(entropy_coef=True)
        if cause in ("exploration_collapse", "reward_hacking"):
            self.opt.update(eval=True)

    # ---------------------------------------------------------------------------------------- simulate
    def _simulate(self) -> None:  # noqa: C901 - one process after the other, in order
        g, n, cause, var, on = self.g, self.n, self.cause, self.variant, self.onset
        t = np.arange(n, dtype=float)
        x = t / (n - 1)
        active = (t >= on) if on is not None else np.zeros(n, dtype=bool)
        warm = 1.0 + g.uniform(0.6, 2.0) * np.exp(-t / g.uniform(3, 15))
        # resume transients (decaying profile) and level shifts
        dec = np.zeros(n)
        lvl_mfu, lvl_eng, lvl_rho = np.ones(n), np.ones(n), np.ones(n)
        for r in self.resumes:
            k = int(g.integers(3, 11))
            seg = slice(r, min(n, r + k))
            dec[seg] = np.maximum(dec[seg], np.exp(-(t[seg] - r) / (k / 3.0)))
            lvl_mfu[r:] *= g.uniform(0.95, 1.05)
            lvl_eng[r:] *= g.uniform(0.9, 1.15)
            lvl_rho[r:] *= g.uniform(0.95, 1.05)
        self.dec = dec

        # --- lengths
        len0 = _lu(g, 150, 3000)
        cap = float(g.choice([2.0, 3.0, 4.0])) * len0
        cv0 = g.uniform(0.35, 0.9)
        len_mean = len0 * (1.0 + (g.uniform(0.85, 1.7) - 1.0) * x) * np.exp(_ar1(g, n, 0.9, 0.04))
        cv = cv0 * np.exp(_ar1(g, n, 0.9, 0.05))
        if cause == "padding_imbalance":
            if var == "long_tail":
                rr = _ramp(t, on, g.uniform(20, 60))
                cv = cv * (1 + (g.uniform(1.8, 2.6) - 1) * rr)
                len_mean = len_mean * (1 + (g.uniform(1.2, 1.6) - 1) * rr)
            elif var == "mix_shift":
                cv = np.where(active, cv * g.uniform(2.0, 3.0), cv)
                len_mean = np.where(active, len_mean * g.uniform(1.3, 2.0), len_mean)
        if cause == "unbalanced_groups" and var == "long_tail":
            rr = _ramp(t, on, g.uniform(20, 50))
            cv = cv * (1 + (g.uniform(1.3, 1.8) - 1) * rr)
            len_mean = len_mean * (1 + (g.uniform(1.1, 1.4) - 1) * rr)
        if cause == "reward_hacking" and var == "length_exploit":
            len_mean = len_mean * (1 + (g.uniform(1.6, 3.0) - 1) * _ramp(t, on, g.uniform(20, 80)))
        if cause == "reward_hacking" and var == "verifier_loophole":
            len_mean = len_mean * (1 - (1 - g.uniform(0.7, 1.0)) * _ramp(t, on, 30))
        if cause == "exploration_collapse":
            len_mean = len_mean * (1 - (1 - g.uniform(0.7, 0.95)) * _ramp(t, on, 50))
        len_mean = np.minimum(len_mean, 0.92 * cap)
        len_std = cv * len_mean
        len_max = np.minimum(cap, len_mean * (1 + g.uniform(2.5, 4.0) * cv))
        trunc = np.array([0.5 * math.erfc((cap - m) / (s * math.sqrt(2))) for m, s in zip(len_mean, len_std)])
        trunc = np.round(trunc * 1024) / 1024  # a fraction of a batch of responses

        # --- padding and MFU
        packing = g.random() < 0.55 and not (cause == "padding_imbalance" and var != "packing_off")
        packing = packing or (cause == "unbalanced_groups" and var == "long_tail") or var == "packing_off"
        z = g.uniform(0.4, 0.9)
        unpacked = 1.0 - 1.0 / (1.0 + z * cv)
        packed = g.uniform(0.01, 0.05) + 0.03 * cv
        pad = packed if packing else unpacked
        if cause == "padding_imbalance" and var == "packing_off":
            pad = np.where(active, 1.0 - 1.0 / (1.0 + g.uniform(1.2, 1.8) * cv), pad)
        pad = np.clip(pad + _ar1(g, n, 0.8, 0.008), 0.0, 0.9)
        pad0 = float(np.median(pad[: max(10, (on or n) // 2)]))
        a_str = g.uniform(0.3, 0.8)
        mfu0 = g.uniform(0.2, 0.5)
        mfu = (mfu0 * (1 - pad) / (1 - pad0) * (1 + a_str * cv0) / (1 + a_str * cv) * lvl_mfu
               * (1 - 0.35 * np.exp(-t / 3.0)) * np.exp(_ar1(g, n, 0.6, 0.03)) * (1 - g.uniform(0.2, 0.45) * dec))
        mfu = np.clip(mfu, 0.01, 0.75)

        # --- step timing
        train0 = _lu(g, 15, 240)
        train_s = train0 * (len_mean / len0) * (mfu0 / mfu) * np.exp(g.normal(0, 0.03, n))
        other_s = train_s * g.uniform(0.1, 0.3) * np.exp(g.normal(0, 0.05, n))  # old/ref log-probs
        sync0 = _lu(g, 1, 15)
        sync_s = sync0 * np.exp(g.normal(0, 0.15, n))
        gen_rel = (len_mean / len0) * np.sqrt((1 + 2 * cv) / (1 + 2 * cv0))  # generation follows the tail
        staleness = np.zeros(n)
        st_max = np.zeros(n)
        stall = np.zeros(n)
        if self.sync:
            rho_s = g.uniform(0.7, 3.0)
            gen_s = rho_s * train0 * gen_rel * np.exp(_ar1(g, n, 0.5, 0.08))
            step_s = gen_s + train_s + other_s + sync_s
        else:
            rho = np.minimum(g.uniform(0.45, 0.9) * np.exp(_ar1(g, n, 0.97, 0.12)) * lvl_rho, 0.98)
            if cause == "unbalanced_groups":
                # rho is generation over the trainer's whole busy time (training, the old/ref log-probs, the
                # weight sync), so that the idle share is 1 - 1/rho: relative to train0 alone, a run whose
                # log-probs and sync take as long as its training ended up balanced (no stall at all)
                busy = (train_s + other_s + sync_s)[:on] / (train0 * gen_rel[:on])
                target = g.uniform(1.3, 2.2) * float(np.median(busy))
                if var == "rollout_node_lost":
                    rho = np.where(active, target * np.exp(_ar1(g, n, 0.9, 0.05)), rho)
                elif var == "env_latency":
                    rr = _ramp(t, on, g.uniform(20, 60))
                    rho = rho + (target * np.exp(_ar1(g, n, 0.9, 0.05)) - rho) * rr
                else:  # long_tail: generation follows the tail (gen_rel grows with it), the ratio ramps with it
                    rho = rho + (target - rho) * _ramp(t, on, 30)
            if cause == "stale_rollouts" and var == "sync_slow":
                sync_s = sync_s * (1 + (g.uniform(2, 6) - 1) * _ramp(t, on, 20))
            gen_s = rho * train0 * gen_rel * np.exp(_ar1(g, n, 0.5, 0.08))
            qcap = self.bound + 1 if self.bound_in_config else g.uniform(2, 6)
            if not self.bound_in_config:
                self.bound = int(math.ceil(qcap))  # the run's own implicit bound, unknown to its config
            lam = np.clip(g.uniform(0.3, 0.9) + _ar1(g, n, 0.97, 0.2), 0.15, 1.0)
            jit_p, jit_m = g.uniform(0.15, 0.5), g.uniform(0.01, 0.04)
            q = 0.0
            resumes = set(self.resumes)
            for i in range(n):
                if i in resumes:
                    q = 0.0
                wait = (1.0 - q) * gen_s[i] if q < 1.0 else 0.0
                q = max(q, 1.0) - 1.0
                depth = q + 1.0
                jitter = train_s[i] * (g.exponential(jit_m) if g.random() < jit_p else 0.0)
                if g.random() < 0.01:
                    jitter += (train_s[i] + sync_s[i]) * g.uniform(0.1, 0.3)
                stall[i] = wait + jitter
                busy = train_s[i] + other_s[i] + sync_s[i] + jitter
                q = min(q + busy / gen_s[i], qcap)
                staleness[i] = lam[i] * (depth - 1.0) * (self.bound / qcap) * 1.6 + 0.15
            staleness = np.clip(staleness + _ar1(g, n, 0.6, 0.1), 0.0, self.bound)
            st_max = np.minimum(self.bound, np.ceil(staleness + g.uniform(0.3, 1.5) + np.abs(g.normal(0, 0.5, n))))
            # resume transient: samples from before the restart, bound briefly overshot
            jump = dec * g.uniform(0.5, 1.5) * self.bound
            staleness, st_max = staleness + jump, np.maximum(st_max, np.ceil(staleness + jump))
            if cause == "stale_rollouts":
                b = self.bound
                if var == "sync_slow":  # weights land every few steps, the interval growing: a ragged sawtooth
                    lag, last, nxt = np.zeros(n), on, on
                    grow, top = g.uniform(0.1, 0.4), g.uniform(1.2, 3.0) * b + 1
                    for i in range(on, n):
                        if i >= nxt:
                            last = i
                            nxt = i + max(1, int(round(min(top, 1 + grow * (i - on)) * g.uniform(0.6, 1.4))))
                        lag[i] = (i - last) + min(top, grow * (i - on)) * 0.5
                elif var == "sync_stuck":
                    lag = g.uniform(0.5, 1.0) * (t - on)
                else:
                    lag = g.uniform(0.6, 2.0) * b + 0.02 * (t - on) + 0.5
                lag = np.where(active, np.maximum(lag, 0.0), 0.0)
                staleness = staleness + lag
                st_max = np.maximum(st_max, np.ceil(staleness + lag * 0.3 + 1))
            step_s = stall + train_s + other_s + sync_s
        self.gen_s, self.train_s, self.other_s, self.sync_s, self.step_s = gen_s, train_s, other_s, sync_s, step_s
        self.stall, self.staleness, self.st_max = stall, staleness, st_max

        # --- mismatch between trainer and rollout engine
        eng = g.uniform(0.25, 1.0) * lvl_eng * np.exp(np.clip(_ar1(g, n, 0.5, 0.15, df=3.0), -0.7, 0.7))
        eng = eng + (g.random(n) < 0.012) * g.uniform(1.5, 4.0, n)
        eng = eng + dec * g.uniform(1.0, 3.0)
        ld_mean = g.uniform(0.006, 0.02) * np.exp(_ar1(g, n, 0.8, 0.1)) * (1 + 2 * dec)
        mm_rate = np.where(g.random(n) < 0.05, g.uniform(0.0005, 0.004, n), 0.0) + dec * g.uniform(0.01, 0.08)
        pb_rate = np.where(g.random(n) < 0.03, g.uniform(0.0005, 0.003, n), 0.0) + dec * g.uniform(0.0, 0.05)
        if cause == "token_mismatch":
            if var == "retokenize":
                hit, add, rate = g.uniform(0.7, 1.0), g.uniform(3, 8), g.uniform(0.05, 0.35)
                mm = rate * np.exp(_ar1(g, n, 0.7, 0.2))
                pb = mm * g.uniform(0.2, 0.6)
                dm = g.uniform(0.03, 0.2)
            elif var == "template_drops_reasoning":
                hit, add, share = g.uniform(0.85, 1.0), g.uniform(4, 10), g.uniform(0.3, 0.9)
                pb = np.clip(share * np.exp(_ar1(g, n, 0.7, 0.1)), 0, 1)
                mm = pb * g.uniform(0.5, 1.0)
                dm = g.uniform(0.05, 0.3)
            else:
                hit, add = g.uniform(0.4, 0.8), g.uniform(1.5, 4)
                pb = g.uniform(0.05, 0.3) * np.exp(_ar1(g, n, 0.7, 0.25))
                mm = pb * g.uniform(0.3, 0.8)
                dm = g.uniform(0.01, 0.05)
            on_step = active & (g.random(n) < hit)
            eng = eng + on_step * add * np.exp(g.normal(0, 0.2, n))
            mm_rate = np.where(active, np.clip(mm, 0, 1), mm_rate)
            pb_rate = np.where(active, np.clip(pb, 0, 1), pb_rate)
            ld_mean = ld_mean + active * dm * np.exp(_ar1(g, n, 0.7, 0.2))
        c_st = g.uniform(0.08, 0.25)
        ld_max = eng + c_st * staleness / (1 + staleness / 40.0)
        ld_mean = ld_mean + 0.004 * staleness / (1 + staleness / 25.0)
        iw = np.exp(ld_max * g.uniform(0.55, 1.0, n))
        iw_seq = np.exp(ld_max * g.uniform(1.0, 1.8, n))
        self.ld_mean, self.mm_rate, self.pb_rate = ld_mean, mm_rate, pb_rate

        # --- skill, rewards, held-out
        if self.verifier:
            s0 = _logit(g.uniform(0.05, 0.6))
        else:
            s0 = float(g.normal(0, 0.5))
        gain = g.uniform(0.3, 1.8)
        s = s0 + gain * (1 - np.exp(-t / (g.uniform(0.25, 1.0) * n))) + _ar1(g, n, 0.95, 0.04)
        s_on = float(s[on]) if on is not None else 0.0
        if cause in ("stale_rollouts", "token_mismatch"):
            keep = g.uniform(0.2, 0.6) if cause == "stale_rollouts" else g.uniform(0.0, 0.5)
            slide = g.uniform(0, 0.3) if cause == "token_mismatch" else 0.0  # learning on corrupted tokens
            s = np.where(active, s_on + (s - s_on) * keep - slide * _ramp(t, on, 60), s)
        if cause == "exploration_collapse":
            s = np.where(active, s_on + (s - s_on) * g.uniform(0.3, 1.0), s)
        s_held = s.copy()
        exploit = np.zeros(n)
        if cause == "reward_hacking":
            dur = g.uniform(20, 80)
            exploit = g.uniform(0.35, 0.85) * _ramp(t, on, dur)
            if var == "verifier_loophole":
                exploit = np.minimum(0.97, exploit * 1.3)
            drift = g.uniform(0.0, 0.5)
            s_held = np.where(active, s_on - drift * _ramp(t, on, g.uniform(40, 150)), s)
            if var == "overoptimization":
                bump = g.uniform(0.1, 0.3) * np.sin(np.clip((t - on) / 40.0, 0, 1) * math.pi)
                s_held = np.where(active, s_on + bump - (drift + 0.2) * _ramp(t, on + 20, 80), s)
            if not self.reward_effect:  # the same run without the exploit (its draws all made): the oracle's
                exploit, s_held = np.zeros(n), s.copy()  # counterfactual (parallax.alerts.oracle)
        off_train = float(g.normal(0.3, 0.4))
        offs = np.full(n, off_train)
        if cause is None and g.random() < 0.15:
            offs[int(g.integers(n // 4, 3 * n // 4)):] -= g.uniform(0.4, 0.9)
        nb = _lu(g, 64, 1024)
        gen_factor = g.uniform(0.4, 1.1)
        self.rm = None if self.verifier else (float(g.uniform(-3, 5)), float(g.uniform(0.5, 3.0)))
        if self.verifier:
            p = _sigmoid(s + offs)
            p = p + exploit * (1 - p)
            p = p - dec * g.uniform(0.05, 0.2) * p
            reward = p + np.sqrt(p * (1 - p) / nb) * g.standard_t(4, n) * warm * 0.8
            reward = np.clip(reward, 0.0, 1.0)
        else:
            a, b = self.rm
            reward = a + b * (s + offs + exploit * g.uniform(1.0, 3.0) - dec * 0.3) + b * 0.08 * g.standard_t(4, n) * warm
        # --- entropy and exploration (kappa)
        e0 = g.uniform(0.25, 1.5)
        if cause is None and g.random() < 0.15:
            ent = e0 * (1 + g.uniform(0.05, 0.3) * x)
        else:
            f = g.uniform(0.45, 0.85)
            ent = e0 * (f + (1 - f) * np.exp(-t / (g.uniform(0.3, 1.5) * n)))
        kappa = g.uniform(0.8, 3.0) * (1 - g.uniform(0.1, 0.4) * x)
        kl_end = _lu(g, 0.002, 0.05)
        kl = kl_end * x ** 0.8 * np.exp(_ar1(g, n, 0.8, 0.1)) + 1e-4
        clip = _lu(g, 0.002, 0.04) * np.exp(_ar1(g, n, 0.7, 0.15)) + 0.004 * np.minimum(staleness, 30)
        gnorm = _lu(g, 0.05, 1.0) * (1 - 0.3 * x) * np.exp(_ar1(g, n, 0.5, 0.2, df=3.0)) * warm
        gnorm = gnorm * np.where(g.random(n) < 0.008, g.uniform(4, 15, n), 1.0)
        loss = float(g.normal(0, 0.01)) + _lu(g, 0.005, 0.05) * g.standard_t(4, n) * warm
        if cause == "exploration_collapse":
            tau = g.uniform(8, 20) if var != "slow" else g.uniform(25, 40)
            cf = g.uniform(0.05, 0.2)
            ent = ent * np.where(active, cf + (1 - cf) * np.exp(-(t - on) / tau), 1.0)
            kf = g.uniform(0.04, 0.15)
            kappa = kappa * np.where(active, kf + (1 - kf) * np.exp(-(t - on) / (tau * g.uniform(0.8, 1.5))), 1.0)
            kl = kl + kl_end * g.uniform(1, 3) * _ramp(t, on, 3 * tau)
            clip = clip * (1 - 0.5 * _ramp(t, on, 2 * tau))
            gnorm = gnorm * (1 - 0.5 * _ramp(t, on, 2 * tau))
        if cause == "reward_hacking":
            kl = kl + kl_end * g.uniform(2, 6) * _ramp(t, on, 60)
            ent = ent * (1 - g.uniform(0.1, 0.3) * _ramp(t, on, 60))
        if cause == "token_mismatch":
            clip = clip + active * g.uniform(0.02, 0.1)
            gnorm = gnorm * np.where(active, g.uniform(1.3, 2.5) * np.exp(g.normal(0, 0.3, n)), 1.0)
        if cause == "stale_rollouts":
            gnorm = gnorm * np.where(active, 1.2, 1.0)
        ent = ent * np.exp(_ar1(g, n, 0.8, g.uniform(0.03, 0.06))) * (1 + 0.5 * (warm - 1) * g.normal(0, 0.1, n))
        ent = np.clip(ent, 1e-3, None)

        # --- numerical blow-up (non-finite values), and what it does to the policy
        dead = np.zeros(n, dtype=bool)
        if cause == "numerical_blowup":
            nanv, inf = float("nan"), float("inf")
            if var == "nan_skipped":
                bad = active & (g.random(n) < g.uniform(0.3, 0.7))
                loss = np.where(bad, nanv, loss)
                gnorm = np.where(bad, nanv, gnorm)
            else:
                start = on
                if var == "grad_explosion":
                    esc = int(g.integers(3, 13))
                    i = np.arange(esc)
                    gnorm[on:on + esc] *= 3.0 ** (i + 1)
                    loss[on:on + esc] *= 2.0 ** (i + 1)
                    kl[on:on + esc] *= 1.5 ** (i + 1)
                    start = on + esc
                    gnorm[start:] = inf
                elif var == "is_overflow":
                    iw[on:] = inf
                    iw_seq[on:] = inf
                    ld_max[on:] = inf
                    kl[on:] = nanv
                    start = on + int(g.integers(2, 11))
                    gnorm[start:] = nanv
                else:
                    gnorm[on:] = nanv
                loss[start:] = nanv
                kl[start:] = nanv
                ent[start:] = nanv
                clip[start:] = nanv
                if var != "is_overflow":
                    iw[start:] = nanv
                    iw_seq[start:] = nanv
                    ld_max[start:] = nanv
                ld_mean[start:] = nanv
                dead[min(n, start + int(g.integers(1, 4))):] = True
        if dead.any():  # NaN weights reach the engine: garbage answers up to the length cap
            if self.verifier:
                reward = np.where(dead, np.clip(g.uniform(0, 0.03, n), 0, 1), reward)
            else:
                a, b = self.rm
                reward = np.where(dead, a - 2 * b + b * 0.1 * g.normal(0, 1, n), reward)
            len_mean = np.where(dead, 0.95 * cap, len_mean)
            len_std = np.where(dead, 0.05 * cap, len_std)
        self.dead = dead

        self.tr = {
            "importance_weight_max": iw, "logprob_diff_max": ld_max, "token_mismatch_rate": mm_rate,
            "prefix_break_rate": pb_rate, "staleness_mean": staleness, "staleness_max": st_max,
            "stall_s": stall, "rollout_s": gen_s, "train_s": train_s, "step_s": step_s, "trainer_mfu": mfu,
            "entropy": ent, "reward_train": reward, "padding_ratio": pad, "response_length_mean": len_mean,
            "response_length_std": len_std, "kl": kl, "clip_frac": clip, "grad_norm": gnorm, "loss": loss,
            "policy_version": t + 1,
        }
        self.iw_seq, self.len_max, self.trunc, self.cap = iw_seq, len_max, trunc, cap

        # --- evaluations (sparse): per dataset pass@1 (= held-out reward for verifiers), pass@j
        self.evals: dict[str, dict[str, dict[int, float]]] = {}
        es = np.array(self.eval_steps, dtype=int)
        for ds, delta, n_prob in self.datasets:
            z = s0 + gen_factor * (s_held[es] - s0) + delta
            out: dict[str, dict[int, float]] = {}
            if self.verifier:
                m = _sigmoid(z)
                m = np.where(self.dead[es], 0.01, m)
                kap = kappa[es]
                sd1 = np.sqrt(m * (1 - m) * (1 / (kap + 1) + 1 / self.k) / n_prob)
                m_obs = np.clip(m + sd1 * g.normal(0, 1, len(es)), 0, 1)
                out["pass1"] = dict(zip(es.tolist(), m_obs.tolist()))
                noise = g.normal(0, 1, len(es))  # one eval: the pass@j estimates move together
                for j in sorted({2 ** i for i in range(1, 6) if 2 ** i <= self.k} | {self.k}):
                    pk = _pass_at(m, kap, j)
                    pk_obs = np.clip(pk + np.sqrt(pk * (1 - pk) / n_prob) * noise, m_obs, 1)
                    out[f"pass{j}"] = dict(zip(es.tolist(), pk_obs.tolist()))
                out["heldout"] = out["pass1"]
            else:
                a, b = self.rm
                v = a + b * z + b * 0.5 / math.sqrt(n_prob) * g.normal(0, 1, len(es))
                v = np.where(self.dead[es], a - 2 * b, v)
                out["heldout"] = dict(zip(es.tolist(), v.tolist()))
            self.evals[ds] = out

        # --- wall time
        overhead = g.uniform(0.2, 2.0, n)
        dur = step_s + overhead
        if cause == "trainer_silent" and var == "slowdown_then_hang":
            k = int(g.integers(3, 11))
            dur[on - k:on] *= g.uniform(1.5, 4.0)
        for sidx in self.eval_steps:
            dur[sidx] += g.uniform(30, 600) * (1 + len(self.datasets)) / 2
        ck = int(g.integers(25, 101))
        dur[ck - 1::ck] += g.uniform(20, 240)
        for r in self.resumes:
            dur[r] += g.uniform(120, 900)
        self.times_all = T0 + g.uniform(0, 3600) + np.cumsum(dur)
        self.alive = n if cause != "trainer_silent" else on
        self.silent_from = None
        if cause == "trainer_silent":
            self.silent_from = float(self.times_all[on - 1] + g.uniform(0.2, 0.95) * dur[on])

    # ---------------------------------------------------------------------------------------- render
    def scenario(self) -> Scenario:
        series: dict[str, dict[int, float]] = {}
        steps = list(range(self.alive))
        alive = self.alive

        def put(key: str, arr, scale: float = 1.0) -> None:
            vals = (np.asarray(arr, dtype=float)[:alive] * scale).tolist()
            series[key] = dict(zip(steps, vals))

        def put_eval(key: str, points: dict[int, float], scale: float = 1.0) -> None:
            pts = {s: v * scale for s, v in points.items() if s < alive}
            if pts:
                series[key] = pts

        render = getattr(self, "_render_" + (self.fw or "canonical").replace("-", "_"))
        config = render(put, put_eval)
        if self.fw and self.sync and self.g.random() < 0.35:  # the user marked the mode on top of the framework's keys
            config["synchronous"] = True
        times = {s: float(self.times_all[s]) for s in range(alive)}
        events = [(r, "resume") for r in self.resumes if r < alive]
        symptom = {"exploration_collapse": "pass_at_k", "reward_hacking": "reward_heldout"}.get(self.cause or "")
        return Scenario(
            name=f"{self.name}-{self.cause or 'healthy'}-{self.variant}", task=self.task, variant=self.variant,
            cause=self.cause, onset=self.onset, series=series, times=times, config=config, events=events,
            silent_from=self.silent_from, symptom=symptom, end=self.end, family=FAMILY,
        )

    # helpers shared by renderers
    def _mean_eval(self, what: str) -> dict[int, float]:
        per = [ev[what] for ev in self.evals.values() if what in ev]
        if not per:
            return {}
        return {s: float(np.mean([d[s] for d in per])) for s in per[0]}

    def _base_config(self) -> dict:
        return {"model": str(self.g.choice(["Qwen3-4B", "Qwen3-8B", "Qwen2.5-7B-Instruct", "Llama-3.1-8B-Instruct",
                                            "Qwen3-30B-A3B"])), "seed": int(self.g.integers(0, 10000))}

    def _render_canonical(self, put, put_eval) -> dict:
        g, tr, c = self.g, self.tr, self.cause
        p = {"reward_train": 1.0, "entropy": 0.9, "grad_norm": 0.85, "loss": 0.8, "kl": 0.6, "clip_frac": 0.6,
             "response_length_mean": 0.85, "response_length_std": 0.6, "padding_ratio": 0.4, "trainer_mfu": 0.6,
             "step_s": 0.8, "train_s": 0.7, "rollout_s": 0.6, "stall_s": 0.35 if self.sync else 0.8,
             "policy_version": 0.4, "importance_weight_max": 0.65, "logprob_diff_max": 0.4,
             "token_mismatch_rate": 0.3, "prefix_break_rate": 0.25,
             "staleness_mean": 0.3 if self.sync else 0.85, "staleness_max": 0.2 if self.sync else 0.5}
        send = {m for m, q in p.items() if g.random() < q}
        need = {"stale_rollouts": {"staleness_mean"}, "token_mismatch": {"importance_weight_max"},
                "unbalanced_groups": {"stall_s"}, "padding_imbalance": {"trainer_mfu"},
                "exploration_collapse": {"entropy"}, "numerical_blowup": {"grad_norm"}}.get(c or "", set())
        send |= need
        if c == "padding_imbalance":
            send.add("padding_ratio" if g.random() < 0.7 else "response_length_std")
        if c == "token_mismatch" and g.random() < 0.5:
            send |= {"token_mismatch_rate", "prefix_break_rate"}
        for m in sorted(send):
            arr = tr[m]
            if m == "importance_weight_max" and self.is_cap:
                arr = np.minimum(arr, self.is_cap)
            if m in ("staleness_mean", "staleness_max") and self.sync:
                arr = np.zeros(self.n)
            if m == "stall_s" and self.sync:  # the user wired the framework's wait-for-generation timer
                arr = self.gen_s
            put(m, arr)
        held = self._mean_eval("heldout")
        if g.random() < 0.85 or c in ("reward_hacking",):
            put_eval("reward_heldout", held)
            if len(self.evals) > 1 and g.random() < 0.5:
                for ds, ev in self.evals.items():
                    put_eval(f"heldout/{ds}/reward", ev["heldout"])
        if self.verifier and (g.random() < 0.7 or c == "exploration_collapse"):
            put_eval("pass_at_1", self._mean_eval("pass1"))
            put_eval("pass_at_k", self._mean_eval(f"pass{self.k}"))
        cfg = self._base_config()
        cfg.update({"task": self.task, "eval_every": self.eval_every})
        if self.k_in_config:
            cfg["k"] = self.k
        if self.sync:
            if g.random() < 0.6:
                cfg["synchronous"] = True
        else:
            if self.bound_in_config:
                cfg["staleness_bound"] = self.bound
            if g.random() < 0.2:
                cfg["mode"] = "async"
        if self.is_cap:
            cfg["importance_sampling_cap"] = self.is_cap
        if self.total is not None:
            cfg["total_steps"] = self.total
        return cfg

    def _render_verl(self, put, put_eval) -> dict:
        tr, o = self.tr, self.opt
        put("actor/entropy", tr["entropy"])
        put("critic/score/mean", tr["reward_train"])
        put("critic/rewards/mean", tr["reward_train"] - (0.001 * tr["kl"] if o["kl"] else 0))
        put("actor/pg_clipfrac", tr["clip_frac"])
        if o["kl"]:
            put("actor/kl_loss", tr["kl"])
        put("actor/grad_norm", tr["grad_norm"])
        put("response_length/mean", tr["response_length_mean"])
        put("response_length/max", self.len_max)
        put("response_length/clip_ratio", self.trunc)
        tok_rank = tr["response_length_mean"] * 64  # tokens per DP rank; the spread between ranks grows with cv
        put("global_seqlen/minmax_diff", tok_rank * (0.05 + 1.5 * tr["padding_ratio"]) * tr["response_length_std"]
            / tr["response_length_mean"])
        put("perf/mfu/actor", tr["trainer_mfu"])
        put("perf/throughput", tr["response_length_mean"] * 512 / tr["step_s"] / 8)
        put("timing_s/gen", self.gen_s)
        put("timing_s/old_log_prob", self.other_s * 0.6)
        if o["kl"]:
            put("timing_s/ref", self.other_s * 0.4)
        put("timing_s/update_actor", tr["train_s"])
        put("timing_s/step", tr["step_s"])
        if o["logprobs"]:  # probabilities, not log-probabilities
            put("training/rollout_probs_diff_max", np.clip(1 - np.exp(-0.8 * tr["logprob_diff_max"]), 0, 1))
            put("training/rollout_probs_diff_mean", np.clip(self.ld_mean * 0.3, 0, 1))
        if o["rollout_corr"] or (self.cause == "token_mismatch" and not o["logprobs"]):
            put("rollout_corr/rollout_is_max", self.iw_seq)  # sequence mode: unclamped
            put("rollout_corr/rollout_is_mean", 1 + 0.3 * self.ld_mean)
            put("rollout_corr/rollout_is_ratio_fraction_high", np.clip(self.mm_rate + 0.002 + 0.02 * self.ld_mean, 0, 1))
            put("rollout_corr/log_ppl_diff_max", tr["logprob_diff_max"] * 0.2)
        n_val = self.k
        for ds, ev in self.evals.items():
            if self.opt["eval"]:
                put_eval(f"val-core/{ds}/acc/mean@{n_val}", ev["pass1"])
                put_eval(f"val-core/{ds}/acc/best@{n_val}/mean", ev[f"pass{n_val}"])
        trainer = {"project_name": "rl", "experiment_name": self.name, "test_freq": self.eval_every,
                   "val_before_train": 0 in self.eval_steps, "total_epochs": 15}
        if self.total is not None:
            trainer["total_training_steps"] = self.total
        return {"framework": "verl", "trainer": trainer,
                "actor_rollout_ref": {"hybrid_engine": True, "rollout": {
                    "name": "vllm", "mode": str(self.g.choice(["sync", "async"])), "n": int(self.g.choice([4, 8, 16])),
                    "val_kwargs": {"n": n_val}}},
                "data": {"train_batch_size": int(self.g.choice([128, 256, 512]))}}

    def _render_trl(self, put, put_eval) -> dict:
        tr, g = self.tr, self.g
        cap = 3.0
        put("entropy", tr["entropy"])
        put("reward", tr["reward_train"])
        put("reward_std", np.clip(0.3 + 0.05 * g.normal(0, 1, self.n), 0.01, None) * (1 if self.verifier else self.rm[1]))
        if self.opt["kl"]:
            put("kl", tr["kl"])
        put("loss", tr["loss"])
        put("grad_norm", tr["grad_norm"])
        put("clip_ratio/region_mean", tr["clip_frac"])
        put("completions/mean_length", tr["response_length_mean"])
        put("completions/max_length", self.len_max)
        put("completions/min_length", np.maximum(1, tr["response_length_mean"] * 0.1))
        put("completions/clipped_ratio", self.trunc)
        put("frac_reward_zero_std", np.clip(0.1 + 0.4 * np.abs(tr["reward_train"] - 0.5), 0, 1))
        seq = self.iw_seq  # sequence_mask: above the cap masked (0), the logged max is of what is left
        logged = np.where(seq > cap, cap * g.uniform(0.8, 1.0, self.n), seq)
        logged = np.where(np.isnan(seq), np.nan, logged)
        put("sampling/importance_sampling_ratio/max", logged)
        put("sampling/sampling_logp_difference/max", tr["logprob_diff_max"])
        put("sampling/sampling_logp_difference/mean", self.ld_mean)
        put("step_time", tr["step_s"])
        if self.opt["eval"]:
            ev = next(iter(self.evals.values()))
            put_eval("eval_reward", ev["heldout"])
        cfg = self._base_config()
        cfg.update({"framework": "trl", "num_generations": int(g.choice([4, 8, 16])), "use_vllm": True,
                    "vllm_mode": str(g.choice(["colocate", "server"])), "beta": 0.04 if self.opt["kl"] else 0.0,
                    "vllm_importance_sampling_correction": True, "vllm_importance_sampling_mode": "sequence_mask",
                    "vllm_importance_sampling_clip_max": cap, "eval_strategy": "steps", "eval_steps": self.eval_every})
        if self.total is not None:
            cfg["max_steps"] = self.total
        else:
            cfg["num_train_epochs"] = 1
        return cfg

    def _render_openrlhf(self, put, put_eval) -> dict:
        tr = self.tr
        if self.opt["entropy_coef"]:
            put("train/entropy_loss", tr["entropy"])
        put("train/rollout/reward_mean", tr["reward_train"])
        if self.opt["kl"]:
            put("train/kl", tr["kl"])
        put("train/ppo_clip_ratio", tr["clip_frac"])
        put("train/actor_grad_norm", tr["grad_norm"])
        put("train/rollout/response_length_mean", tr["response_length_mean"])
        put("train/rollout/truncated_rate", self.trunc)
        put("train/timing/generation", self.gen_s)
        put("train/timing/make_experience", self.other_s)
        put("train/timing/ppo_train", tr["train_s"])
        put("train/timing/broadcast", self.sync_s)
        put("train/timing/step_total", tr["step_s"])
        if self.opt["eval"]:
            for ds, ev in self.evals.items():
                put_eval(f"eval/eval_{ds}_pass1", ev["pass1"])
                put_eval(f"eval/eval_{ds}_pass{self.k}", ev[f"pass{self.k}"])
        cfg = self._base_config()
        cfg.update({"framework": "openrlhf", "n_samples_per_prompt": int(self.g.choice([4, 8, 16])),
                    "eval_n_samples_per_prompt": self.k, "colocate_all_models": True, "vllm_sync_backend": "nccl",
                    "num_episodes": 1, "eval_steps": self.eval_every})
        if self.opt["entropy_coef"]:
            cfg["entropy_loss_coef"] = 0.0
        return cfg

    def _render_areal(self, put, put_eval) -> dict:
        tr, cap = self.tr, 5.0
        put("ppo_actor/update/behave_imp_weight/max", np.minimum(tr["importance_weight_max"], cap))  # after clamping
        put("ppo_actor/update/behave_imp_weight/avg", 1 + 0.5 * self.ld_mean)
        put("ppo_actor/update/logp_abs_diff/max", tr["logprob_diff_max"])
        st = np.zeros(self.n) if self.sync else tr["staleness_mean"]
        put("ppo_actor/update/version_stats/sample_staleness_theta_avg", st)
        put("ppo_actor/update/version_stats/sample_staleness_theta_max", np.zeros(self.n) if self.sync else tr["staleness_max"])
        put("timeperf/rollout", self.gen_s if self.sync else tr["stall_s"])  # async: wait for accepted samples
        put("timeperf/train_step", tr["train_s"])
        put("timeperf/update_weights", self.sync_s)
        put("timeperf/recompute_logp", self.other_s)
        put("ppo_actor/update/entropy/avg", tr["entropy"])
        put("rollout/reward", tr["reward_train"])
        put("ppo_actor/update/grad_norm", tr["grad_norm"])
        put("ppo_actor/update/clip_ratio/avg", tr["clip_frac"])
        put("ppo_actor/seq_len/avg", tr["response_length_mean"] + 300)
        if self.opt["eval"]:
            put_eval("eval-rollout/reward", next(iter(self.evals.values()))["heldout"])
        cfg = {"framework": "areal", "experiment_name": self.name, "trial_name": "trial0",
               "async_training": not self.sync, "total_train_epochs": 10,
               "rollout": {"max_head_offpolicyness": 0 if self.sync else self.bound, "max_concurrent_rollouts": 256},
               "actor": {"behav_imp_weight_cap": cap, "recompute_logprob": True, "use_decoupled_loss": not self.sync},
               "gconfig": {"n_samples": self.k}}
        if self.total is not None:
            cfg["total_train_steps"] = self.total
        return cfg

    def _render_prime_rl(self, put, put_eval) -> dict:
        tr = self.tr
        agent = "default"
        put("off_policy/mean", tr["staleness_mean"])
        put("off_policy/max", tr["staleness_max"])
        put("time/wait_for_batch", tr["stall_s"])
        put("time/step", tr["step_s"])
        put("time/forward_backward", tr["train_s"])
        put("time/broadcast_weights", self.sync_s)
        put("perf/mfu", tr["trainer_mfu"], scale=100.0)  # percent
        put("entropy/all/mean", tr["entropy"])
        d = tr["logprob_diff_max"]
        with np.errstate(over="ignore", invalid="ignore"):
            put("mismatch_kl/all/max", np.exp(d) - d - 1)  # k3 = r - log r - 1 at the worst token
        put("mismatch_kl/all/mean", self.ld_mean ** 2 / 2)
        put("optim/grad_norm", tr["grad_norm"])
        put("is_masked/mean", tr["clip_frac"])
        put(f"train/agg/all/{agent}/reward/mean", tr["reward_train"])
        put("train/agg/all/num_output_tokens/mean", tr["response_length_mean"])
        put("train/agg/all/num_output_tokens/max", self.len_max)
        sig = np.sqrt(np.log1p((tr["response_length_std"] / tr["response_length_mean"]) ** 2))  # lognormal lengths
        mu = np.log(tr["response_length_mean"]) - sig ** 2 / 2
        put("train/agg/all/num_output_tokens/p10", np.maximum(1.0, np.exp(mu - 1.2816 * sig)))
        put("train/agg/all/num_output_tokens/p90", np.minimum(self.cap, np.exp(mu + 1.2816 * sig)))
        if self.opt["eval"]:
            for env, ev in self.evals.items():
                for key, vals in ev.items():
                    if key.startswith("pass"):
                        put_eval(f"eval/{env}/effective/{agent}/pass@{key[4:]}", vals)
                put_eval(f"eval/{env}/effective/{agent}/avg@{self.k}", ev["heldout"])
        orch = {"batch_size": int(self.g.choice([128, 256, 512])), "group_size": self.k, "max_async_level": 1}
        if self.bound_in_config:
            orch["max_off_policy_steps"] = self.bound
        cfg = {"framework": "prime-rl", "seq_len": 8192, "model": {"name": "Qwen/Qwen3-4B"}, "orchestrator": orch,
               "eval": {"interval": self.eval_every}}
        if self.total is not None:
            cfg["max_steps"] = self.total
        return cfg

    def _render_slime(self, put, put_eval) -> dict:
        tr = self.tr
        wait = self.gen_s if self.sync else tr["stall_s"]
        put("perf/train_wait_time", wait)
        put("perf/train_time", tr["train_s"] + self.other_s)
        put("perf/step_time", tr["step_s"])
        put("perf/wait_time_ratio", wait / (wait + tr["train_s"] + self.other_s))
        put("perf/actor_train_tflops", tr["trainer_mfu"] * 989.0)  # per GPU, H100 bf16 dense peak
        put("perf/actor_train_tok_per_s", tr["response_length_mean"] * 256 / tr["train_s"])
        put("train/entropy_loss", tr["entropy"])
        if self.opt["mismatch"]:
            put("train/train_rollout_logprob_abs_diff", self.ld_mean)
            put("train/tis", 1 + 0.5 * self.ld_mean)
            put("train/tis_clipfrac", np.clip(0.001 + self.mm_rate * 0.5 + 0.3 * self.ld_mean, 0, 1))
        put("train/pg_clipfrac", tr["clip_frac"])
        if self.opt["kl"]:
            put("train/kl_loss", tr["kl"])
        put("train/grad_norm", tr["grad_norm"])
        put("rollout/raw_reward", tr["reward_train"])
        put("rollout/response_len/mean", tr["response_length_mean"])
        put("rollout/truncated_ratio", self.trunc)
        if self.opt["eval"]:
            for name, ev in self.evals.items():
                put_eval(f"eval/{name}", ev["heldout"])
                for key, vals in ev.items():
                    if key.startswith("pass") and key != "pass1":
                        put_eval(f"eval/{name}-pass@{key[4:]}", vals)
        cfg = {"framework": "slime", "rollout_batch_size": int(self.g.choice([32, 64, 128])),
               "n_samples_per_prompt": int(self.g.choice([4, 8, 16])), "n_samples_per_eval_prompt": self.k,
               "eval_interval": self.eval_every, "use_tis": self.opt["mismatch"], "hf_checkpoint": "Qwen/Qwen3-8B"}
        if self.sync:
            cfg["colocate"] = True
        if self.total is not None:
            cfg["num_rollout"] = self.total
        return cfg

    def _render_skyrl(self, put, put_eval) -> dict:
        tr = self.tr
        put("async/staleness_mean", tr["staleness_mean"])
        put("async/staleness_max", tr["staleness_max"])
        put("timing/wait_for_generation_buffer", tr["stall_s"])
        put("timing/train_critic_and_policy", tr["train_s"])
        put("timing/sync_weights", self.sync_s)
        put("timing/step", tr["step_s"])
        if self.opt["offpolicy_corr"]:
            put("policy/loss_metrics/is_ratio_max", np.minimum(tr["importance_weight_max"], math.exp(20)))
        put("policy/rollout_train_logprobs_abs_diff_max", tr["logprob_diff_max"])
        put("policy/policy_entropy", tr["entropy"])
        put("reward/avg_raw_reward", tr["reward_train"])
        put("generate/avg_num_tokens", tr["response_length_mean"])
        put("generate/std_num_tokens", tr["response_length_std"])
        put("generate/max_num_tokens", self.len_max)
        put("policy/grad_norm", tr["grad_norm"])
        if self.opt["kl"]:
            put("policy/policy_kl", tr["kl"])
        put("policy/loss_metrics/clip_ratio", tr["clip_frac"])
        if self.opt["eval"]:
            put_eval("eval/all/avg_score", self._mean_eval("heldout"))
            put_eval(f"eval/all/pass_at_{self.k}", self._mean_eval(f"pass{self.k}"))
            if len(self.evals) > 1:
                for ds, ev in self.evals.items():
                    put_eval(f"eval/{ds}/avg_score", ev["heldout"])
                    put_eval(f"eval/{ds}/pass_at_{self.k}", ev[f"pass{self.k}"])
        fa = {"enabled": True, "num_parallel_generation_workers": int(self.g.choice([2, 4, 8]))}
        if self.bound_in_config:
            fa["max_staleness_steps"] = self.bound
        return {"framework": "skyrl", "trainer": {"fully_async": fa, "placement": {"colocate_all": False},
                                                  "epochs": 20, "eval_interval": self.eval_every,
                                                  "algorithm": {"off_policy_correction": self.opt["offpolicy_corr"]}},
                "generator": {"n_samples_per_prompt": self.k}}

    def _render_pipelinerl(self, put, put_eval) -> dict:
        tr, g = self.tr, self.g
        tbs, gap = int(g.choice([1, 2, 4])), int(g.choice([64, 128, 256]))
        sps = tbs * gap  # versions are counted in samples
        put("stats/lag", tr["staleness_max"] * sps)
        put("stats/time_waiting_for_data", np.cumsum(tr["stall_s"]))  # cumulative seconds
        put("throughput/sec_per_step", tr["step_s"])
        put("rl/entropy", tr["entropy"])
        put("actor/reward_mean", tr["reward_train"])
        put("stats/grad_norm", tr["grad_norm"])
        put("rl/ratio_new_old", 1 + 0.2 * self.ld_mean + 0.002 * g.normal(0, 1, self.n))
        put("actor/output_tokens_mean", tr["response_length_mean"])
        if self.opt["eval"]:
            ev = next(iter(self.evals.values()))
            put_eval("actor/test_reward_mean", ev["heldout"])
            if "pass1" in ev:
                put_eval("actor/test_success_mean", ev["pass1"])
        cfg = {"framework": "pipelinerl", "model_path": "Qwen/Qwen2.5-7B", "max_lag": self.bound * sps if self.bound_in_config else None,
               "eval_every_n_versions": self.eval_every * sps, "attempts": self.k,
               "finetune": {"train_batch_size": tbs, "gradient_accumulation_passes": gap, "seq_packing": True,
                            "max_train_steps": self.total if self.total is not None else 100000}}
        return cfg


# ------------------------------------------------------------------------------------------- generate


def _framework_for(g: np.random.Generator, cause: str | None) -> str | None:
    if g.random() >= 0.34:
        return None
    return str(g.choice(CAUSE_FRAMEWORKS[cause]))


def generate(seed: int, *, healthy: int = 40, per_cause: int = 8, reward_effect: bool = True) -> list[Scenario]:
    """``healthy`` healthy runs and ``per_cause`` runs of each cause, all drawn from ``seed``. ``reward_effect=False``:
    the same runs, every draw the same, but a reward-hacking run's exploit leaves its training reward and held-out
    score as they would have been without it (the counterfactual :mod:`parallax.alerts.oracle` measures the
    exploit's own effect against)."""
    rng = random.Random(seed)
    plan: list[str | None] = [None] * healthy + [c for c in CAUSES for _ in range(per_cause)]
    # every framework key set at least once among the healthy runs (when there are enough of them)
    forced = list(FRAMEWORKS)
    rng.shuffle(forced)
    first_variant = {c: rng.randrange(len(VARIANTS[c])) for c in CAUSES}  # variants in turn, from a random one
    seen: dict[str | None, int] = {}
    out = []
    for i, cause in enumerate(plan):
        g = np.random.default_rng(rng.getrandbits(63))
        fw = forced[i] if cause is None and i < len(forced) else _framework_for(g, cause)
        j = seen[cause] = seen.get(cause, -1) + 1
        out.append(_Run(g, seed, i, cause, fw, first_variant.get(cause, 0) + j, reward_effect).scenario())
    order = list(range(len(out)))
    rng.shuffle(order)
    return [out[i] for i in order]
