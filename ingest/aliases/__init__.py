"""Framework key aliases: a batch logged under verl/TRL/... keys also gets the canonical names.

The raw keys are always kept; the canonical names are added beside them, at the
same steps. The work is per metric name (one dict lookup per name and batch,
cached), not per value, except for a group that needs a unit conversion
(percent, cumulative counter, step minus value), a mean over several held-out
datasets, or a derived metric (stall from timing keys): only those are rebuilt
value by value. A canonical name whose values are another key's, unchanged,
shares that key's sample list and is recorded in ``batch.links``, so that the
store can keep it as a reference instead of a second copy of every point.

    frameworks.py   the table: which key of which framework is which canonical name, with units and sources
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, NamedTuple

from parallax.ingest.aliases.frameworks import CAPPED_IMPORTANCE_WEIGHT_MAX, FRAMEWORKS, Derived, Framework, ModeKey, Rule
from parallax.ingest.names import CANONICAL_METRICS, is_valid_name, labelled_name
from parallax.ingest.points import FINITE, Batch, Sample
from parallax.ingest.runconfig import config_get, first_positive, positive_number, synchronous
from parallax.ingest.runconfig import staleness_bound as own_staleness_bound

__all__ = [
    "ALIAS_TARGETS",
    "CAPPED_IMPORTANCE_WEIGHT_MAX",
    "DEFAULT_K",
    "FRAMEWORKS",
    "Applied",
    "RunAliasing",
    "apply",
    "detect",
    "framework_named",
    "resolve",
    "run_aliasing",
    "run_mode",
    "table",
]

DEFAULT_K = 8
_PASS_AT_K = {"pass_at_k": "pass_at_1", "pass_at_k_train": "pass_at_1_train"}
#: Every name the aliases may write, without labels (pass_at_k is also written labelled, pass_at_k{k="N"}, and a
#: held-out dataset's value as reward_heldout{dataset="..."}).
ALIAS_TARGETS: frozenset[str] = frozenset(
    {r.target for fw in FRAMEWORKS for r in fw.rules}
    | {r.sequence_target for fw in FRAMEWORKS for r in fw.rules if r.sequence_target}
    | {d.target for fw in FRAMEWORKS for d in fw.derived}
    | set(_PASS_AT_K.values())
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

_PLACEHOLDER = re.compile(r"\{(\w+)(?::(\w+))?\}")
_SEGMENT = r"[^/@]+?"


def _compile(template: str) -> re.Pattern:
    out, pos = [], 0
    for m in _PLACEHOLDER.finditer(template):
        out.append(re.escape(template[pos : m.start()]))
        name, kind = m.group(1), m.group(2)
        if name == "k":
            out.append(r"(?P<k>\d+)")
        elif name == "n":
            out.append(r"\d+")
        elif name == "dataset":
            out.append(f"(?P<dataset>{_SEGMENT if kind == 'segment' else '.+?'})")
        elif name == "reward":
            out.append(f"(?P<reward>{_SEGMENT})")
        else:
            out.append(_SEGMENT)
        pos = m.end()
    out.append(re.escape(template[pos:]))
    return re.compile("".join(out))


@dataclass(frozen=True, slots=True)
class _Match:
    target: str
    unit: str
    priority: int  # the rule's place in the table: lower wins
    mode: str | None
    k: int | None
    dataset: str | None
    reward: str | None
    sequence_target: str | None


_COMPILED: dict[str, list[tuple[re.Pattern, Rule, int, tuple[re.Pattern, ...]]]] = {
    fw.name: [(_compile(r.key), r, i, tuple(re.compile(x) for x in r.exclude)) for i, r in enumerate(fw.rules)]
    for fw in FRAMEWORKS
}
_RESOLVED: dict[tuple[str, str], tuple[_Match, ...]] = {}
_RESOLVED_MAX = 200_000


#: x axes that frameworks log as metrics (slime/miles: rollout/step, eval/step): never aliased.
_AXES = frozenset(
    ("step", "global_step", "rollout/step", "eval/step", "train/step", "train/global_step", "eval/global_step", "eval/epoch", "_step")
)


def resolve(framework: Framework, key: str) -> tuple[_Match, ...]:
    """The canonical names ``key`` feeds in ``framework``, in every mode (cached: called once per name per batch)."""
    cached = _RESOLVED.get((framework.name, key))
    if cached is not None:
        return cached
    found: list[_Match] = []
    if key not in _AXES:
        candidates = [key] + [key[len(p) :] for p in framework.prefixes if key.startswith(p)]
        for pattern, rule, priority, exclude in _COMPILED[framework.name]:
            for candidate in candidates:
                m = pattern.fullmatch(candidate)
                if m is None:
                    continue
                groups = m.groupdict()
                k = int(groups["k"]) if groups.get("k") is not None else None
                if rule.target in _PASS_AT_K and k is None:
                    continue
                dataset = groups.get("dataset")
                if dataset is not None and any(x.fullmatch(dataset) for x in exclude):
                    continue
                found.append(
                    _Match(rule.target, rule.unit, priority, rule.mode, k, dataset, groups.get("reward"), rule.sequence_target)
                )
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
    synchronous: bool | None = None  # None: from the keys only asynchronous runs log, else the framework's default
    #: While the mode is unknown and the framework times an ambiguous wait (Framework.idle_wait): the run's steps
    #: so far whose wait was idle-short, and those whose was not (wait_mode).
    quiet_waits: int = 0
    loud_waits: int = 0
    #: The samples of one step by the run's config, per set of config keys a derived metric divides by
    #: (``Derived.per``): (keys, product), where the config gives them all.
    per_values: tuple[tuple[tuple[str, ...], float], ...] = ()


def run_aliasing(config: dict | None) -> RunAliasing:
    """Framework (``framework``), pass@k's k (``k``, default 8), verl's IS level and the mode from a run's config."""
    config = config if isinstance(config, dict) else {}
    k = config.get("k", DEFAULT_K)
    if type(k) is not int or k < 1:
        k = DEFAULT_K
    level = None
    for path in ("algorithm.rollout_correction.rollout_is", "rollout_correction.rollout_is", "rollout_is"):
        level = config_get(config, path)
        if level is not None:
            break
    per = tuple((paths, v) for paths in _PER_PATHS if (v := per_product(config, paths)) is not None)
    return RunAliasing(
        framework_named(config.get("framework")), k, isinstance(level, str) and level.lower() == "sequence", run_mode(config),
        per_values=per,
    )


#: Every set of config keys a framework's derived metric divides by.
_PER_PATHS: tuple[tuple[str, ...], ...] = tuple(dict.fromkeys(d.per for fw in FRAMEWORKS for d in fw.derived if d.per))


def per_product(config: Any, paths: tuple[str, ...]) -> float | None:
    """The product of the config's positive numbers at ``paths`` (dotted), or None if one is missing."""
    out = 1.0
    for path in paths:
        x = positive_number(config_get(config, path))
        if x is None:
            return None
        out *= x
    return out


def _read_mode(reads: str, value: Any) -> bool | None:
    """What one framework config value says of the mode (True: synchronous), or None."""
    if value is None:
        return None
    if isinstance(value, str) and reads in ("true_async", "true_sync", "false_sync"):
        value = {"true": True, "false": False}.get(value.strip().lower(), value)
    if reads == "present_async":
        return False if value not in (False, {}, [], "") else None
    if isinstance(value, bool):
        if reads == "true_async":
            return not value
        if reads == "true_sync":
            return True if value else None
        if reads == "false_sync":
            return True if not value else None
        return None
    if reads == "zero_sync" and isinstance(value, (int, float)):
        return value == 0
    if isinstance(value, str) and value.strip():
        word = value.strip().lower()
        if reads == "class" or reads == "word":
            if "async" in word:
                return False
            if reads == "class" or word in ("sync", "synchronous", "colocate", "colocated", "on_policy", "on-policy"):
                return True
    return None


def _mode_from_keys(config: dict, keys: Iterable[ModeKey]) -> bool | None:
    for mk in keys:
        found = _read_mode(mk.reads, config_get(config, mk.path))
        if found is not None:
            return found
    return None


def run_mode(config: dict | None) -> bool | None:
    """True when the run is synchronous (the trainer waits for generation by design), False when it is
    asynchronous, None when nothing says.

    Parallax's own keys first (``synchronous``, ``async``, ``mode``: ``ingest.runconfig``), then the
    framework's own config keys (``Framework.mode_keys``: verl's ``async_training`` section and
    ``trainer.v1.trainer_mode``, OpenRLHF's ``train.async_enable``, AReaL's
    ``rollout.max_head_offpolicyness``, slime/miles ``colocate``, ROLL's ``async_generation_ratio``,
    prime-rl's ``max_off_policy_steps``, tinker's ``async_config``, TRL's trainer class), then what the
    framework is by design (PipelineRL and prime-rl are asynchronous). Without a ``framework`` in the
    config every framework's keys are read (but a trainer class only means something to TRL)."""
    found = synchronous(config)
    if found is not None or not isinstance(config, dict):
        return found
    named = framework_named(config.get("framework"))
    if named is not None:
        found = _mode_from_keys(config, named.mode_keys)
        return found if found is not None else named.by_design
    for fw in FRAMEWORKS:
        found = _mode_from_keys(config, (mk for mk in fw.mode_keys if mk.reads != "class"))
        if found is not None:
            return found
    return None


def staleness_bound(config: dict | None) -> float | None:
    """The largest policy-version lag the run's config lets a sample have, or None: Parallax's own
    ``staleness_bound`` / ``max_staleness`` (``ingest.runconfig``), else the framework's own bound key
    (``ModeKey.bound``: prime-rl's ``max_off_policy_steps``, AReaL's ``max_head_offpolicyness``, SkyRL's
    ``trainer.fully_async.max_staleness_steps``, PipelineRL's ``max_lag`` in samples over the samples of one step),
    the named framework's or, without a ``framework`` in the config, any framework's. A bound of 0 is a synchronous
    run's: none."""
    found = own_staleness_bound(config)
    if found is not None or not isinstance(config, dict):
        return found
    named = framework_named(config.get("framework"))
    for mk in (mk for fw in ((named,) if named else FRAMEWORKS) for mk in fw.mode_keys if mk.bound):
        if not mk.per:
            found = first_positive(config, (mk.path,))
        elif (value := positive_number(config_get(config, mk.path))) is not None:
            samples = per_product(config, mk.per)
            found = value / samples if samples is not None else None  # samples with no step size: no bound
        if found is not None:
            return found
    return None


#: A run whose config does not say its mode, of a framework whose trainer wait means generation in synchronous
#: runs and idling in asynchronous ones (Framework.idle_wait): asynchronous at its QUIET_WAITS_ASYNC-th step whose
#: wait stayed under QUIET_WAIT_SHARE of its training (a synchronous trainer waits for the whole generation, never
#: that little), synchronous at its LOUD_WAITS_SYNC-th other step, whichever comes first in step order.
QUIET_WAITS_ASYNC = 5
LOUD_WAITS_SYNC = 10
QUIET_WAIT_SHARE = 0.05


def wait_mode(framework: Framework, run: RunAliasing, groups: dict[str, list[Sample]]) -> tuple[bool | None, int, int]:
    """What the batch's trainer waits (``framework.idle_wait``) decide of the mode, counted in step order from the
    run's counts: (True synchronous / False asynchronous / None not yet, quiet waits, loud waits)."""
    quiet, loud = run.quiet_waits, run.loud_waits
    if framework.idle_wait is None:
        return None, quiet, loud
    wait_key, train_keys = framework.idle_wait
    train: dict[int, float] = {}
    for key in train_keys:
        for step, value, _, _ in groups.get(key, ()):
            if value is not None and value > 0:
                train.setdefault(step, value)
    for step, value, _, _ in sorted(groups.get(wait_key, ())):
        if value is None or step not in train:
            continue
        if 0 <= value < QUIET_WAIT_SHARE * train[step]:
            quiet += 1
        else:
            loud += 1
        if quiet >= QUIET_WAITS_ASYNC:
            return False, quiet, loud
        if loud >= LOUD_WAITS_SYNC:
            return True, quiet, loud
    return None, quiet, loud


def batch_synchronous(framework: Framework, run: RunAliasing, keys: Iterable[str]) -> bool | None:
    """The mode a batch is read in, where the run's config or its keys say it: the run's (config), else
    asynchronous if the batch holds a key only asynchronous runs log; None when they do not."""
    if run.synchronous is not None:
        return run.synchronous
    markers = framework.async_markers
    if markers and any(k.startswith(markers) for k in keys):
        return False
    return None


# -- applying them to a batch -----------------------------------------------------------

#: previous(key, step) -> (step, value) of ``key``'s point at the highest step below ``step``; None if none or not finite.
Previous = Callable[[str, int], "tuple[int, float] | None"]


class Applied(NamedTuple):
    added: int  # canonical points added to the batch
    framework: Framework | None  # the framework used
    score: int  # its detection score (0 when declared)
    synchronous: bool | None  # the mode the batch was read in (None: no framework)
    #: the mode the batch's keys or trainer waits showed, for a run whose config does not say it (None: not yet)
    learned: bool | None = None
    quiet_waits: int = 0  # the run's wait counts after this batch (wait_mode), while its mode is unknown
    loud_waits: int = 0


def _names(base: str, labels: dict[str, str], run: RunAliasing) -> list[str]:
    """The names a canonical value is stored under: pass@k also unlabelled for the run's k, and as pass@1 for k = 1."""
    out = [labelled_name(base, labels)]
    one = _PASS_AT_K.get(base)
    if one is not None:
        rest = {n: v for n, v in labels.items() if n != "k"}
        if labels.get("k") == str(run.k):
            out.append(labelled_name(base, rest))
        if labels.get("k") == "1":
            out.append(labelled_name(one, rest))
    return out


def apply(batch: Batch, run: RunAliasing, previous: Previous | None = None) -> Applied:
    """Add the canonical names of ``batch``'s framework keys to it, in place.

    A canonical name the batch already carries (the trainer sent it itself)
    is never overwritten. When several keys feed one canonical name, the
    first rule of the table wins, then the smallest key; per held-out
    dataset the same, then the unlabelled name is the mean over the datasets
    (or the framework's own aggregate when it logs one).
    """
    groups = batch.groups
    framework, score = run.framework, 0
    if framework is None:
        framework, score = detect(groups)
        if framework is None:
            return Applied(0, None, 0, None)
    sync = batch_synchronous(framework, run, groups)
    learned = sync if run.synchronous is None else None
    quiet, loud = run.quiet_waits, run.loud_waits
    if sync is None:
        learned, quiet, loud = wait_mode(framework, run, groups)
        sync = learned
    # the mode still unknown and the framework's wait ambiguous: the wait gets no canonical name yet (a link holds
    # for the whole run, so once the mode is known its canonical name reads every wait, the earlier ones included)
    undecided = sync is None and framework.idle_wait is not None
    if sync is None:
        sync = framework.default_synchronous
    mode = "sync" if sync else "async"
    sent = set(groups)
    # (canonical base name, labels other than the dataset) -> dataset (None: no dataset) -> (priority, key, match)
    chosen: dict[tuple[str, tuple[tuple[str, str], ...]], dict[str | None, tuple[int, str, _Match]]] = {}
    for key in sent:
        for m in resolve(framework, key):
            if m.mode is not None and (m.mode != mode or undecided and key == framework.idle_wait[0]):
                continue
            base = m.sequence_target if m.sequence_target is not None and run.sequence_is else m.target
            labels: tuple[tuple[str, str], ...] = ()
            if m.k is not None and base in _PASS_AT_K:
                labels += (("k", str(m.k)),)
            if m.reward is not None:
                labels += (("reward", m.reward),)
            slot = chosen.setdefault((base, labels), {})
            best = slot.get(m.dataset)
            if best is None or (m.priority, key) < best[:2]:
                slot[m.dataset] = (m.priority, key, m)
    added = 0
    links = batch.links if batch.links is not None else {}

    def put(name: str, samples: list[Sample], source: str | None) -> None:
        nonlocal added
        if name in sent or name in groups or not samples or not is_valid_name(name):
            return
        groups[name] = samples
        added += len(samples)
        if source is not None:
            links[name] = source

    converted: dict[str, list[Sample]] = {}

    def values(entry: tuple[int, str, _Match]) -> tuple[list[Sample], str | None]:
        _, key, m = entry
        if not m.unit:
            return groups[key], key  # shared, not copied: the store only reads it
        cache_key = f"{m.unit}\x00{key}"
        if cache_key not in converted:
            converted[cache_key] = _convert(groups[key], m.unit, key, previous)
        return converted[cache_key], None

    for (base, label_items), slot in sorted(chosen.items(), key=lambda item: min(e[0] for e in item[1].values())):
        labels = dict(label_items)
        if None in slot:
            samples, source = values(slot[None])
        elif len(slot) == 1:
            samples, source = values(next(iter(slot.values())))
        else:
            samples, source = _mean([values(e)[0] for _, e in sorted(slot.items())]), None
        for name in _names(base, labels, run):
            put(name, samples, source)
        for dataset, entry in sorted((d, e) for d, e in slot.items() if d is not None):
            per, per_source = values(entry)
            for name in _names(base, {**labels, "dataset": dataset}, run):
                put(name, per, per_source)
    for d in framework.derived:
        if d.target in groups or (d.mode is not None and d.mode != mode):
            continue
        put(d.target, _derive(d, groups, run), None)
    if links and batch.links is None:
        batch.links = links
    batch.count += added
    return Applied(added, framework, score, sync, learned, quiet, loud)


def _convert(samples: list[Sample], unit: str, key: str, previous: Previous | None) -> list[Sample]:
    if unit == "percent":
        return [(s, v / 100.0 if v is not None else None, f, t) for s, v, f, t in samples]
    if unit == "step_minus":
        return [(s, s - v if v is not None else None, f, t) for s, v, f, t in samples]
    if unit == "previous_step":
        return [(s - 1, v, f, t) for s, v, f, t in samples if s > 0]
    if unit == "cumulative":
        return _deltas(samples, key, previous)
    raise ValueError(f"unknown unit {unit!r}")


def _deltas(samples: list[Sample], key: str, previous: Previous | None) -> list[Sample]:
    """Per-step increase of a monotonic counter: (value - previous value) / steps between them. A drop is a
    restart: the new value is the increase since then."""
    ordered = sorted(samples, key=lambda x: x[0])
    prev = previous(key, ordered[0][0]) if previous is not None else None
    out: list[Sample] = []
    for s, v, f, t in ordered:
        if v is None:  # a non-finite counter: no delta, and the next one has nothing to diff against
            prev = None
            continue
        if prev is not None and s > prev[0]:
            ps, pv = prev
            out.append((s, (v - pv) / (s - ps) if v >= pv else v, FINITE, t))
        prev = (s, v)
    return out


def _mean(series: list[list[Sample]]) -> list[Sample]:
    """Per step, the mean of the series that have a value there (non-finite if one of them is)."""
    at: dict[int, list[Sample]] = {}
    for samples in series:
        for sample in samples:
            at.setdefault(sample[0], []).append(sample)
    out: list[Sample] = []
    for step in sorted(at):
        here = at[step]
        bad = next((x for x in here if x[1] is None), None)
        t = max(x[3] for x in here)
        if bad is not None:
            out.append((step, None, bad[2], t))
        else:
            out.append((step, sum(x[1] for x in here) / len(here), FINITE, t))
    return out


def _derive(d: Derived, groups: dict[str, list[Sample]], run: RunAliasing) -> list[Sample]:
    if d.formula == "per_config":
        samples = next((v for paths, v in run.per_values if paths == d.per), None)
        key = next((k for k in d.inputs[0] if k in groups), None)
        if samples is None or key is None:
            return []
        return [(s, v / samples if v is not None else None, f, t) for s, v, f, t in groups[key]]
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
            elif d.formula == "scaled":
                if rest[1] == 0:
                    continue
                value = a * rest[0] / rest[1]
            else:
                value = max(0.0, a - sum(rest))
            out.append((step, value, FINITE, t))
    return out


# -- the table, for GET /api/v1/aliases ------------------------------------------------------


_UNIT_NOTES = {
    "percent": "percent, divided by 100",
    "cumulative": "cumulative counter, stored as its increase per step",
    "step_minus": "policy version: the point's step minus it",
    "previous_step": "logged one step late: stored at the step before",
}
_MODE_NOTES = {"sync": "synchronous runs only", "async": "asynchronous runs only"}
_FORMULAS = {"product": "product", "difference": "first minus the others, at least 0", "scaled": "first times second over third",
             "per_config": "first over the product of the run's config values at `per` (samples to steps)"}


def _canonical(r: Rule) -> str:
    labels = {}
    if r.target in _PASS_AT_K:
        labels["k"] = "<k>"
    if "{reward}" in r.key:
        labels["reward"] = "<reward>"
    return labelled_name(r.target, labels)


def table() -> list[dict[str, Any]]:
    out = []
    for fw in FRAMEWORKS:
        rules = []
        for r in fw.rules:
            entry: dict[str, Any] = {"key": r.key, "canonical": _canonical(r), "source": r.source}
            notes = []
            if r.target in _PASS_AT_K:
                notes.append(
                    f"also {r.target} when <k> is the run's k (config `k`, default 8), and {_PASS_AT_K[r.target]} when <k> is 1"
                )
            if "{dataset" in r.key:
                notes.append(
                    "each dataset also labelled dataset=\"<dataset>\"; unlabelled: the mean over the datasets"
                    + (f" (not {', '.join(r.exclude)})" if r.exclude else "")
                )
            if r.unit:
                entry["unit"] = _UNIT_NOTES[r.unit]
            if r.mode:
                entry["mode"] = _MODE_NOTES[r.mode]
            if r.sequence_target:
                notes.append(
                    f"{r.target} (logged after truncation) unless the run's config sets "
                    f"algorithm.rollout_correction.rollout_is=sequence, then {r.sequence_target}"
                )
            elif r.target == CAPPED_IMPORTANCE_WEIGHT_MAX:
                notes.append("logged after truncation: never shown as the raw max")
            if r.note:
                notes.append(r.note)
            if notes:
                entry["note"] = "; ".join(notes)
            rules.append(entry)
        derived = [
            {
                "canonical": d.target,
                "from": [list(keys) for keys in d.inputs],
                "formula": _FORMULAS[d.formula],
                "source": d.source,
                **({"optional_operands": d.optional} if d.optional else {}),
                **({"per": list(d.per)} if d.per else {}),
                **({"mode": _MODE_NOTES[d.mode]} if d.mode else {}),
                **({"note": d.note} if d.note else {}),
            }
            for d in fw.derived
        ]
        out.append(
            {
                "framework": fw.name,
                "title": fw.title,
                "repository": fw.repo,
                "commit": fw.commit,
                "config_names": sorted({fw.name, fw.title.lower(), *fw.aliases}),
                "key_prefixes": list(fw.prefixes),
                "modes": {
                    "config_keys": [{"key": m.path, "reads": m.reads, "source": m.source, "bound": m.bound,
                                     **({"per": list(m.per)} if m.per else {})}
                                    for m in fw.mode_keys],
                    "async_markers": list(fw.async_markers),
                    "idle_wait": ({"wait": fw.idle_wait[0], "train": list(fw.idle_wait[1]), "share": QUIET_WAIT_SHARE,
                                   "async_after": QUIET_WAITS_ASYNC, "sync_after": LOUD_WAITS_SYNC}
                                  if fw.idle_wait else None),
                    "default": "synchronous" if fw.default_synchronous else "asynchronous",
                    "note": fw.modes_note,
                },
                "rules": rules,
                "derived": derived,
            }
        )
    return out
