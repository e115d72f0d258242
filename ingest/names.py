"""Metric names: what is allowed, and the canonical names of DESIGN §1.

The grammar is the client's (``parallax.client.names``: a trainer's client checks names as the server does);
it is re-exported here with the canonical names the server adds.
"""

from __future__ import annotations

from parallax.client.names import (  # noqa: F401 (re-exported)
    LABELLED_NAME_PATTERN,
    MAX_NAME_LENGTH,
    NAME_PATTERN,
    NAME_RULE,
    escape_label_value,
    is_valid_name,
    labelled_name,
    split_name,
)

#: The eight indicators (DESIGN §1), in panel order.
INDICATORS: tuple[str, ...] = (
    "importance_weight_max",
    "staleness_mean",
    "stall_s",
    "trainer_mfu",
    "pass_at_k",
    "pass_at_1",
    "entropy",
    "reward_train",
)

#: Every canonical name: the indicators, their companions and the supporting metrics.
CANONICAL_METRICS: frozenset[str] = frozenset(
    INDICATORS
    + (
        "staleness_max",
        "rollout_s",
        "train_s",
        "step_s",
        "reward_heldout",
        "pass_at_k_train",  # pass@k of the training rollout groups (slime passrate/*, SkyRL reward/avg_pass_at_n), not held-out
        "pass_at_1_train",
        "reward_std",
        "zero_std_frac",  # share of prompt groups whose rewards are all equal (no advantage signal)
        "truncated_frac",  # share of responses cut at the length limit
        "padding_ratio",
        "response_length_mean",
        "response_length_std",
        "logprob_diff_max",
        "logprob_diff_mean",  # mean |logp_trainer - logp_rollout| over a step's tokens (slime, SkyRL)
        "prob_diff_mean",  # mean |p_trainer - p_rollout| over a step's tokens, in probability (verl)
        "mismatch_kl_max",  # max over a step's tokens of r - log r - 1, r = p_trainer / p_rollout (prime-rl)
        "token_mismatch_rate",
        "prefix_break_rate",
        "kl",
        "clip_frac",
        "grad_norm",
        "loss",
        "policy_version",
    )
)
