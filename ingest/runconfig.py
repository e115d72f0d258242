"""What a run's config says about how the run trains: synchronous or not, how many steps it will take, how
often it evaluates, and how stale its samples may be.

All of it matters to the rules. In a synchronous (colocated, on-policy) run the
trainer waits for generation by design, so the "wait" timers frameworks log
are generation time, not an idle trainer, and stall rules do not apply. A run
whose last step reached its configured total ended normally when it goes
quiet: that silence is not a dead trainer. Before its first evaluation, the
interval the config gives says when a long pause is one. The staleness bound
says how far the lag may swing by design: beyond it is a fault, within it the
importance weights rise with the lag as expected.

A leaf module: the alias layer, the store's lifecycle and the rule engine all
read it, and it imports nothing of theirs.
"""

from __future__ import annotations

import math
from typing import Any

#: Config keys (dotted paths into nested dicts too) that give the number of training steps, first found wins.
#: total_steps is Parallax's own; the others are what frameworks put in the config they log.
TOTAL_STEPS_KEYS: tuple[str, ...] = (
    "total_steps",
    "max_steps",  # transformers / TRL TrainingArguments
    "trainer.total_training_steps",  # verl
    "total_training_steps",
    "num_training_steps",
    "trainer.max_steps",
    "trainer.total_steps",  # RL2
    "total_train_steps",  # AReaL
    "num_rollout",  # slime / miles (--num-rollout: one rollout per training step)
    "finetune.max_train_steps",  # PipelineRL
)

#: Config keys (dotted paths too) that give the number of steps between held-out evaluations, first positive one wins.
#: eval_every is Parallax's own name (the one the rules read); the others are what frameworks put in their config.
EVAL_EVERY_KEYS: tuple[str, ...] = (
    "eval_every",
    "eval_interval",  # slime / miles
    "eval_steps",  # transformers / TRL, OpenRLHF
    "trainer.test_freq",  # verl (-1: no validation)
    "trainer.eval_interval",  # SkyRL
    "eval.interval",  # prime-rl's orchestrator (its EvalConfig; [orchestrator.eval] in the combined rl config)
    "orchestrator.eval.interval",
)

#: Config keys that give the largest policy-version lag the run lets a sample have, first positive one wins: the
#: names the rules read. The frameworks' own bound keys are in their tables (``ingest.aliases.staleness_bound``).
STALENESS_BOUND_KEYS: tuple[str, ...] = ("staleness_bound", "max_staleness")

#: Config keys that say whether the run is synchronous; a boolean, or a string below.
MODE_KEYS: tuple[str, ...] = ("synchronous", "async", "asynchronous", "mode")
_SYNC_WORDS = frozenset({"sync", "synchronous", "colocated", "colocate", "on-policy", "on_policy"})
_ASYNC_WORDS = frozenset({"async", "asynchronous", "off-policy", "off_policy", "fully_async", "fully-async"})


def config_get(config: Any, dotted: str) -> Any:
    """``config[dotted]``, else the value at that dotted path in nested dicts; None when absent."""
    if not isinstance(config, dict):
        return None
    if dotted in config:
        return config[dotted]
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def positive_number(value: Any) -> float | None:
    """A config value as a positive finite number (a number, or a string of one; not a bool), else None."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return x if math.isfinite(x) and x > 0 else None


def first_positive(config: Any, keys: tuple[str, ...]) -> int | None:
    """The first of these keys whose value is a positive number, as an int (at least 1); None without one."""
    for key in keys:
        x = positive_number(config_get(config, key))
        if x is not None and x >= 1:
            return int(x)
    return None


def total_steps(config: Any) -> int | None:
    """The number of training steps the run's config announces, or None."""
    return first_positive(config, TOTAL_STEPS_KEYS)


def eval_every(config: Any) -> int | None:
    """The number of steps between evaluations the run's config announces, or None."""
    return first_positive(config, EVAL_EVERY_KEYS)


def staleness_bound(config: Any) -> int | None:
    """The largest policy-version lag the run's config lets a sample have under Parallax's own names, or None (a
    bound of 0 is a synchronous run's: no lag to bound). ``ingest.aliases.staleness_bound`` reads the frameworks'
    own keys too."""
    return first_positive(config, STALENESS_BOUND_KEYS)


def reached_total(config: Any, last_step: int | None) -> bool:
    """True when the run's last step is its configured last one (steps counted from 0 or from 1)."""
    n = total_steps(config)
    return n is not None and last_step is not None and last_step + 1 >= n


def synchronous(config: Any) -> bool | None:
    """True for a synchronous run, False for an asynchronous one, None when the config does not say.

    Reads Parallax's own ``synchronous`` (bool), ``async``/``asynchronous`` (bool) and ``mode``
    ("sync"/"async"/"colocated"...); frameworks' own config keys are read by the alias layer
    (``ingest.aliases.run_mode``), which falls back to this.
    """
    for key in MODE_KEYS:
        value = config_get(config, key)
        if value is None:
            continue
        if isinstance(value, bool):
            return value if key == "synchronous" else not value
        if isinstance(value, str):
            word = value.strip().lower()
            if word in _SYNC_WORDS:
                return True
            if word in _ASYNC_WORDS:
                return False
    return None
