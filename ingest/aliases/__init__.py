"""Framework key aliases: a batch logged under verl/TRL/... keys also gets the canonical names.

The raw keys are always kept; the canonical names are added beside them, at the
same steps. The work is per metric name (one dict lookup per name and batch,
cached), not per value, except for a group that needs a unit conversion
(percent, cumulative counter, step minus value) or a derived metric (stall from
timing keys): only those groups are rebuilt value by value.

    frameworks.py   the table: which key of which framework is which canonical name, with units
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from ingest.aliases.frameworks import CAPPED_IMPORTANCE_WEIGHT_MAX, FRAMEWORKS, Derived, Framework, Rule
from ingest.names import CANONICAL_METRICS, labelled_name
from ingest.runconfig import synchronous
from ingest.points import FINITE, Batch, Sample

__all__ = [
    "ALIAS_TARGETS",
    "CAPPED_IMPORTANCE_WEIGHT_MAX",
    "DEFAULT_K",
    "FRAMEWORKS",
    "RunAliasing",
    "apply",
    "detect",
    "framework_named",
    "resolve",
    "run_aliasing",
    "table",
]

DEFAULT_K = 8
#: Every name the aliases may write (pass_at_k is also written labelled, pass_at_k{k="N"}).
ALIAS_TARGETS: frozenset[str] = frozenset(
    {r.target for fw in FRAMEWORKS for r in fw.rules}
    | {r.sequence_target for fw in FRAMEWORKS for r in fw.rules if r.sequence_target}
    | {d.target for fw in FRAMEWORKS for d in fw.derived}
    | {"pass_at_1"}
)

_BY_NAME: dict[str, Framework] = {}
for _fw in FRAMEWORKS:
    for _spelling in (_fw.name, _fw.title, *_fw.aliases):
        _BY_NAME[_spelling.lower()] = _fw


def framework_named(name: object) -> Framework | None:
    """The framework a run's config names (``"verl"``, ``"prime-rl"``, ``"tinker"``, ...), or None."""
    if not isinstance(name, str):
        return None
    return _BY_NAME.get(name.strip().lower())


# -- key templates -------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def _compile(template: str) -> re.Pattern:
    out, pos = [], 0
    for m in _PLACEHOLDER.finditer(template):
        out.append(re.escape(template[pos : m.start()]))
        out.append(r"(?P<k>\d+)" if m.group(1) == "k" else r"\d+" if m.group(1) == "n" else r"[^/@]+?")
        pos = m.end()
    out.append(re.escape(template[pos:]))
    return re.compile("".join(out))


@dataclass(frozen=True, slots=True)
class _Match:
    target: str
    unit: str
    priority: int  # the rule's place in the table: lower wins
    k: int | None
    sequence_target: str | None


_COMPILED: dict[str, list[tuple[re.Pattern, Rule, int]]] = {
    fw.name: [(_compile(r.key), r, i) for i, r in enumerate(fw.rules)] for fw in FRAMEWORKS
}
_RESOLVED: dict[tuple[str, str], tuple[_Match, ...]] = {}
_RESOLVED_MAX = 200_000


#: x axes that frameworks log as metrics (slime/miles: rollout/step, eval/step): never aliased.
_AXES = frozenset(("step", "global_step", "rollout/step", "eval/step", "train/step", "train/global_step", "_step"))


def _is_axis(key: str) -> bool:
    return key in _AXES


def resolve(framework: Framework, key: str) -> tuple[_Match, ...]:
    """The canonical names ``key`` feeds in ``framework`` (cached: called once per name per batch)."""
    cached = _RESOLVED.get((framework.name, key))
    if cached is not None:
        return cached
    found: list[_Match] = []
    if not _is_axis(key):
        candidates = [key] + [key[len(p) :] for p in framework.prefixes if key.startswith(p)]
        for pattern, rule, priority in _COMPILED[framework.name]:
            for candidate in candidates:
                m = pattern.fullmatch(candidate)
                if m is None:
                    continue
                k = int(m.group("k")) if "k" in pattern.groupindex else None
                if rule.target == "pass_at_k" and k is None:
                    continue
                found.append(_Match(rule.target, rule.unit, priority, k, rule.sequence_target))
                break
    result = tuple(found)
    if len(_RESOLVED) >= _RESOLVED_MAX:
        _RESOLVED.clear()
    _RESOLVED[(framework.name, key)] = result
    return result


def detect(keys: Iterable[str]) -> tuple[Framework | None, int]:
    """The framework whose table matches the most of these keys (canonical names themselves do not count), and that count."""
    keys = [k for k in keys if k not in CANONICAL_METRICS]
    best, best_score = None, 0
    for fw in FRAMEWORKS:
        score = sum(1 for k in keys if resolve(fw, k))
        if score > best_score:
            best, best_score = fw, score
    return best, best_score


# -- what a run's config says ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunAliasing:
    framework: Framework | None  # None: detect from the keys of each batch
    k: int = DEFAULT_K  # the k of the run's pass@k panel
    sequence_is: bool = False  # verl: rollout_correction.rollout_is == "sequence"


def _config_get(config: dict, dotted: str) -> Any:
    if dotted in config:
        return config[dotted]
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def run_aliasing(config: dict | None) -> RunAliasing:
    """Framework (``framework``), pass@k's k (``k``, default 8) and verl's IS level from a run's config."""
    config = config if isinstance(config, dict) else {}
    k = config.get("k", DEFAULT_K)
    if type(k) is not int or k < 1:
        k = DEFAULT_K
    level = None
    for path in ("algorithm.rollout_correction.rollout_is", "rollout_correction.rollout_is", "rollout_is"):
        level = _config_get(config, path)
        if level is not None:
            break
    return RunAliasing(framework_named(config.get("framework")), k, isinstance(level, str) and level.lower() == "sequence")


# -- applying them to a batch -----------------------------------------------------------

#: previous(key, step) -> the value of ``key`` at the highest step below ``step`` (None if none, or not finite).
Previous = Callable[[str, int], float | None]


def _targets(m: _Match, run: RunAliasing) -> list[str]:
    if m.target == "pass_at_k":
        names = [labelled_name("pass_at_k", {"k": str(m.k)})]
        if m.k == run.k:
            names.append("pass_at_k")
        if m.k == 1:
            names.append("pass_at_1")
        return names
    if m.sequence_target is not None and run.sequence_is:
        return [m.sequence_target]
    return [m.target]


def apply(batch: Batch, run: RunAliasing, previous: Previous | None = None) -> tuple[int, Framework | None, int]:
    """Add the canonical names of ``batch``'s framework keys to it, in place.

    Returns (points added, the framework used, its detection score: 0 when
    declared). A canonical name the batch already carries (the trainer sent it
    itself) is never overwritten. When several keys feed one canonical name,
    the first rule of the table wins, then the smallest key.
    """
    groups = batch.groups
    framework, score = run.framework, 0
    if framework is None:
        framework, score = detect(groups)
        if framework is None:
            return 0, None, 0
    chosen: dict[str, tuple[int, str, _Match]] = {}
    for key in groups:
        for m in resolve(framework, key):
            for target in _targets(m, run):
                if target in groups:
                    continue
                best = chosen.get(target)
                if best is None or (m.priority, key) < best[:2]:
                    chosen[target] = (m.priority, key, m)
    added = 0
    for target, (_, key, m) in chosen.items():
        samples = _convert(groups[key], m.unit, key, previous)
        if samples:
            groups[target] = samples
            added += len(samples)
    for d in framework.derived:
        if d.target in groups:
            continue
        samples = _derive(d, groups)
        if samples:
            groups[d.target] = samples
            added += len(samples)
    batch.count += added
    return added, framework, score


def _convert(samples: list[Sample], unit: str, key: str, previous: Previous | None) -> list[Sample]:
    if not unit:
        return samples  # shared, not copied: the store only reads it
    if unit == "percent":
        return [(s, v / 100.0 if v is not None else None, f, t) for s, v, f, t in samples]
    if unit == "step_minus":
        return [(s, s - v if v is not None else None, f, t) for s, v, f, t in samples]
    if unit == "cumulative":
        return _deltas(samples, key, previous)
    raise ValueError(f"unknown unit {unit!r}")


def _deltas(samples: list[Sample], key: str, previous: Previous | None) -> list[Sample]:
    """Per-step increments of a monotonic counter; a drop is a restart (the new value is the increment)."""
    ordered = sorted(samples, key=lambda x: x[0])
    prev = previous(key, ordered[0][0]) if previous is not None else None
    out: list[Sample] = []
    for s, v, f, t in ordered:
        if v is None:  # a non-finite counter: no delta, and the next one has nothing to diff against
            prev = None
            continue
        if prev is not None:
            out.append((s, v - prev if v >= prev else v, FINITE, t))
        prev = v
    return out


def _derive(d: Derived, groups: dict[str, list[Sample]]) -> list[Sample]:
    operands: list[dict[int, tuple[float, float]] | None] = []
    for i, keys in enumerate(d.inputs):
        key = next((k for k in keys if k in groups), None)
        if key is None:
            if i >= len(d.inputs) - d.optional:
                operands.append(None)
                continue
            return []
        operands.append({s: (v, t) for s, v, f, t in groups[key] if v is not None})
    first = operands[0]
    assert first is not None
    out: list[Sample] = []
    for step, (a, t) in sorted(first.items()):
        rest = []
        for op in operands[1:]:
            if op is None:
                rest.append(0.0)
            elif step in op:
                rest.append(op[step][0])
            else:
                break
        else:
            if d.formula == "product":
                value = a
                for x in rest:
                    value *= x
            else:
                value = max(0.0, a - sum(rest))
            out.append((step, value, FINITE, t))
    return out


# -- the table, for GET /api/v1/aliases ------------------------------------------------------


_UNIT_NOTES = {
    "percent": "percent, divided by 100",
    "cumulative": "cumulative counter, stored as per-step deltas",
    "step_minus": "policy version: the point's step minus it",
}


def table() -> list[dict[str, Any]]:
    out = []
    for fw in FRAMEWORKS:
        rules = []
        for r in fw.rules:
            entry: dict[str, Any] = {"key": r.key, "canonical": r.target}
            if r.target == "pass_at_k":
                entry["canonical"] = 'pass_at_k{k="<k>"}'
                entry["note"] = "also pass_at_k when <k> is the run's k (config `k`, default 8), and pass_at_1 when <k> is 1"
            if r.unit:
                entry["unit"] = _UNIT_NOTES[r.unit]
            if r.sequence_target:
                entry["note"] = (
                    f"{r.target} (logged after truncation) unless the run's config sets "
                    f"algorithm.rollout_correction.rollout_is=sequence, then {r.sequence_target}"
                )
            elif r.target == CAPPED_IMPORTANCE_WEIGHT_MAX:
                entry["note"] = "logged after truncation: never shown as the raw max"
            rules.append(entry)
        derived = [
            {
                "canonical": d.target,
                "from": [list(keys) for keys in d.inputs],
                "formula": "product" if d.formula == "product" else "first minus the others, at least 0",
                **({"optional_operands": d.optional} if d.optional else {}),
            }
            for d in fw.derived
        ]
        out.append(
            {
                "framework": fw.name,
                "title": fw.title,
                "config_names": sorted({fw.name, fw.title.lower(), *fw.aliases}),
                "key_prefixes": list(fw.prefixes),
                "rules": rules,
                "derived": derived,
            }
        )
    return out


# -- what the run's config says of its mode ---------------------------------------------------


def run_mode(config: dict | None) -> bool | None:
    """True when the run is synchronous (the trainer waits for generation by design), False when it is
    asynchronous, None when nothing says. Parallax's own keys (``ingest.runconfig``) first, then the
    framework's own config keys."""
    return synchronous(config)
