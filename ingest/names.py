"""Metric names: what is allowed, and the canonical names of DESIGN §1."""

from __future__ import annotations

import re

MAX_NAME_LENGTH = 200
NAME_PATTERN = re.compile(r"[A-Za-z0-9_:./@-]{1,200}")
# A labelled name, as Prometheus writes a series: base{label="value",...}, labels
# sorted, values escaped (backslash, double quote, newline) as in the text format.
# Built by ``labelled_name``; Prometheus samples with labels are stored under it.
_LABEL_VALUE = r'(?:[^"\\\x00-\x1f\x7f]|\\[\\"n])*'
LABELLED_NAME_PATTERN = re.compile(
    r'[A-Za-z0-9_:./@-]+\{[A-Za-z_][A-Za-z0-9_]*="' + _LABEL_VALUE + r'"(?:,[A-Za-z_][A-Za-z0-9_]*="' + _LABEL_VALUE + r'")*\}'
)
NAME_RULE = (
    "letters, digits and _ : . / @ -, optionally followed by Prometheus-style labels "
    '{k="v",...} (sorted, values escaped), 1 to 200 characters in all'
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
    if type(name) is not str:
        return False
    if NAME_PATTERN.fullmatch(name) is not None:
        return True
    return len(name) <= MAX_NAME_LENGTH and "{" in name and _is_labelled(name)


def _is_labelled(name: str) -> bool:
    if LABELLED_NAME_PATTERN.fullmatch(name) is None:
        return False
    labels = split_name(name)[1]
    keys = list(labels)
    return keys == sorted(keys) and len(keys) == len(set(keys)) and labelled_name(name[: name.index("{")], labels) == name


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def labelled_name(base: str, labels: dict[str, str]) -> str:
    """``base{a="1",b="x"}``: labels sorted by name, values escaped as in Prometheus's text format; ``base`` without labels."""
    if not labels:
        return base
    return base + "{" + ",".join(f'{k}="{escape_label_value(labels[k])}"' for k in sorted(labels)) + "}"


_LABEL_ITEM = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="(' + _LABEL_VALUE + r')"')
_UNESCAPE = re.compile(r"\\(.)")


def split_name(name: str) -> tuple[str, dict[str, str]]:
    """The base name and the labels of a (possibly) labelled name: the inverse of ``labelled_name``."""
    brace = name.find("{")
    if brace < 0 or not name.endswith("}"):
        return name, {}
    labels = {
        m.group(1): _UNESCAPE.sub(lambda e: "\n" if e.group(1) == "n" else e.group(1), m.group(2))
        for m in _LABEL_ITEM.finditer(name, brace + 1, len(name) - 1)
    }
    return name[:brace], labels
