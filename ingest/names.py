"""Metric names: what is allowed, and the canonical names of DESIGN §1."""

from __future__ import annotations

import re

MAX_NAME_LENGTH = 200
NAME_PATTERN = re.compile(r"[A-Za-z0-9_:./@-]{1,200}")
NAME_RULE = "letters, digits and _ : . / @ -, 1 to 200 characters"

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
        "padding_ratio",
        "response_length_mean",
        "response_length_std",
        "logprob_diff_max",
        "token_mismatch_rate",
        "prefix_break_rate",
        "kl",
        "clip_frac",
        "grad_norm",
        "loss",
        "policy_version",
    )
)


def is_valid_name(name: object) -> bool:
    return type(name) is str and NAME_PATTERN.fullmatch(name) is not None
