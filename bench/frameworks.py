"""(a') Ingest of a framework's own keys: verl's per-step dicts, as ``verl/trainer/ppo/ray_trainer.py`` logs them.

The dict of a step holds ~70 keys, a dozen of which the alias layer also stores
under canonical names (``actor/entropy`` -> ``entropy``, ``critic/score/mean`` ->
``reward_train``, ``timing_s/gen`` -> ``rollout_s``, ...); every 100 steps the
validation metrics of two data sources join it (``val-core/openai/gsm8k/...``:
pass@k, pass@1 and held-out reward, averaged over the data sources, each kept).
Values are those of a healthy run, so the rules judge every step but fire none.
Throughput counts the points as sent; the baseline is plain ``sqlite3``
``executemany`` of those same rows, measured in the same run.
"""

from __future__ import annotations

import math
import random
from typing import Any

STEPS = 4_000
BATCH_STEPS = 1_000
EVAL_EVERY = 100
CONFIG = {"framework": "verl", "k": 4, "trainer": {"v1": {"trainer_mode": "sync"}, "total_training_steps": 1_000_000}}


def verl_step(s: int, rng: random.Random) -> dict[str, float]:
    n = lambda mean, sd: mean + sd * rng.gauss(0.0, 1.0)  # noqa: E731
    gen, update = n(30.0, 1.0), n(12.0, 0.5)
    d = {
        "training/global_step": float(s), "training/epoch": float(s // 1000),
        "actor/entropy": 1.2 * math.exp(-s / 50_000) + n(0.0, 0.01), "actor/pg_loss": n(0.0, 0.01),
        "actor/pg_clipfrac": abs(n(0.002, 0.0005)), "actor/pg_clipfrac_lower": 0.0, "actor/ppo_kl": abs(n(0.0005, 0.0001)),
        "actor/grad_norm": abs(n(0.3, 0.03)), "actor/lr": 1e-6, "actor/kl_loss": abs(n(0.001, 0.0002)), "actor/kl_coef": 0.001,
        "critic/score/mean": min(1.0, 0.3 + s / 20_000) + n(0.0, 0.02), "critic/score/max": 1.0, "critic/score/min": 0.0,
        "critic/rewards/mean": min(1.0, 0.3 + s / 20_000) + n(0.0, 0.02), "critic/rewards/max": 1.0, "critic/rewards/min": 0.0,
        "critic/advantages/mean": n(0.0, 0.01), "critic/advantages/max": 2.0, "critic/advantages/min": -2.0,
        "critic/returns/mean": n(0.0, 0.01), "critic/returns/max": 2.0, "critic/returns/min": -2.0,
        "response_length/mean": n(400.0, 10.0), "response_length/max": 1024.0, "response_length/min": n(20.0, 2.0),
        "response_length/clip_ratio": abs(n(0.01, 0.002)), "response/aborted_ratio": 0.0,
        "prompt_length/mean": 120.0, "prompt_length/max": 400.0, "prompt_length/min": 30.0, "prompt_length/clip_ratio": 0.0,
        "timing_s/gen": gen, "timing_s/reward": n(1.5, 0.1), "timing_s/old_log_prob": n(3.0, 0.1), "timing_s/ref": n(2.5, 0.1),
        "timing_s/adv": 0.1, "timing_s/update_actor": update, "timing_s/step": gen + update + 7.2,
        "timing_per_token_ms/gen": n(0.05, 0.002), "timing_per_token_ms/update_actor": n(0.02, 0.001),
        "timing_per_token_ms/adv": 0.0001, "perf/total_num_tokens": n(400_000.0, 5000.0), "perf/time_per_step": gen + update + 7.2,
        "perf/throughput": n(1250.0, 20.0), "perf/mfu/actor": n(0.35, 0.01), "perf/max_memory_allocated_gb": 60.0,
        "perf/max_memory_reserved_gb": 70.0, "perf/cpu_memory_used_gb": 120.0,
        "global_seqlen/min": n(9000.0, 100.0), "global_seqlen/max": n(11000.0, 100.0), "global_seqlen/minmax_diff": n(2000.0, 50.0),
        "global_seqlen/balanced_min": 9900.0, "global_seqlen/balanced_max": 10100.0, "global_seqlen/mean": 10000.0,
        "rollout_corr/rollout_is_mean": n(1.0, 0.01), "rollout_corr/rollout_is_max": 2.0, "rollout_corr/rollout_is_min": 0.5,
        "rollout_corr/rollout_is_std": 0.1, "rollout_corr/rollout_is_ratio_fraction_high": 0.001,
        "rollout_corr/rollout_is_ratio_fraction_low": 0.0, "rollout_corr/rollout_is_eff_sample_size": 0.98,
        "rollout_corr/log_ppl_diff_max": n(0.2, 0.01), "training/rollout_probs_diff_max": n(0.4, 0.02),
        "training/rollout_probs_diff_mean": n(0.01, 0.001),
    }
    if s % EVAL_EVERY == 0:
        for ds, base in (("openai/gsm8k", 0.6), ("lighteval/MATH", 0.35)):
            mean = min(1.0, base + s / 40_000) + n(0.0, 0.01)
            d |= {
                f"val-core/{ds}/reward/mean@4": mean, f"val-aux/{ds}/reward/std@4": 0.3,
                f"val-aux/{ds}/reward/best@2/mean": min(1.0, mean + 0.1), f"val-aux/{ds}/reward/best@2/std": 0.05,
                f"val-core/{ds}/reward/best@4/mean": min(1.0, mean + 0.2), f"val-aux/{ds}/reward/best@4/std": 0.04,
            }
    return d


def make_points(t0: float, seed: int = 3) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"step": s, "metrics": verl_step(s, rng), "time": t0 + s * 0.5} for s in range(1, STEPS + 1)]
