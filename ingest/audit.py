"""Harness audit: check the exact prefix, the chat template and the token stream on the trajectories themselves.

Pure numpy and the standard library (no server imports), shared by
``POST /api/v1/runs/{id}/trajectories`` and ``parallax audit FILE.jsonl``.

A trajectory is ``{"step", "policy_version"?, "id"?, "turns": [turn, ...]}``; a
turn holds the rollout engine's ``prompt_ids`` and ``completion_ids`` and
optionally the trainer's ``trainer_ids`` for the same sequence, per-token
``rollout_logprobs``/``trainer_logprobs`` (one per completion token, or one per
prompt + completion token of which only the completion's count), and the
rendered ``prompt_text``/``completion_text``. A turn with texts and no ids is
accepted and flagged: the rollouts did not travel as tokens.

The three checks (DESIGN §1):

* ``prefix``   the harness keeps the exact prefix: turn t+1's prompt starts
  with turn t's prompt + completion (failures: history summarised, history edited);
* ``template`` the chat template keeps earlier reasoning (failure: the
  previous completion's ``<think>…</think>`` block is missing from the next prompt);
* ``tokens``   rollouts travel as tokens (failures: trainer ids differ from
  prompt + completion ids, re-tokenization drift, text-only turns).

Every break of the exact prefix, whatever its class, counts in
``prefix_break_rate``; ``token_mismatch_rate`` is the share of turns with
trainer ids whose ids differ; ``logprob_diff_max`` and ``importance_weight_max``
= max exp(trainer - rollout) are taken over action (completion) tokens only.
"""

from __future__ import annotations

import array
import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

CHECKS = ("prefix", "template", "tokens")
CHECK_TITLES = {
    "prefix": "exact prefix (history kept, not summarised)",
    "template": "template keeps earlier reasoning",
    "tokens": "rollouts travel as tokens (TITO)",
}
#: break / finding kind -> the check it fails
KIND_CHECK = {
    "history_summarised": "prefix",
    "history_edited": "prefix",
    "reasoning_removed": "template",
    "retokenization_drift": "tokens",
    "token_stream_mismatch": "tokens",
    "text_only": "tokens",
}
KIND_TITLES = {
    "history_summarised": "history summarised/compressed",
    "history_edited": "history edited",
    "reasoning_removed": "earlier reasoning removed by the template",
    "retokenization_drift": "re-tokenization drift",
    "token_stream_mismatch": "trainer ids differ from rollout ids",
    "text_only": "rollouts not stored as tokens",
}

TURN_FIELDS = frozenset(
    ("prompt_ids", "completion_ids", "trainer_ids", "rollout_logprobs", "trainer_logprobs", "prompt_text", "completion_text")
)
TRAJECTORY_FIELDS = frozenset(("step", "policy_version", "id", "turns"))
MAX_TOKEN_ID = 2**31 - 1
MAX_STEP = 2**63 - 1
MAX_ERRORS = 50
WINDOW = 8  # tokens shown on each side of a first difference
LOCAL_EDIT = 16  # a difference that re-aligns within this many tokens is local (re-tokenization)
ANCHOR = 8  # tokens used to find where two sequences re-align
SKIP_ANCHOR = 4  # tokens that show a completion resuming after a dropped span
SUMMARY_RATIO = 0.8  # a next prompt shorter than this share of the history cannot hold it: summarised
EXAMPLES_PER_CHECK = 5
THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)


class AuditInputError(ValueError):
    """Trajectories that cannot be audited. ``errors`` follow FastAPI's error shape (loc, msg, type)."""

    def __init__(self, errors: list[dict[str, Any]], status_code: int = 422):
        self.errors = errors
        self.status_code = status_code
        super().__init__(errors[0]["msg"] if errors else "invalid trajectories")


# -- parsing and validation ---------------------------------------------------------


@dataclass(slots=True)
class Turn:
    prompt: np.ndarray | None  # int32 ids; None for a text-only turn
    completion: np.ndarray | None
    trainer: np.ndarray | None = None
    rollout_lp: np.ndarray | None = None  # float64, one per completion (action) token
    trainer_lp: np.ndarray | None = None
    prompt_text: str | None = None
    completion_text: str | None = None

    @property
    def text_only(self) -> bool:
        return self.prompt is None

    @property
    def tokens(self) -> int:
        return 0 if self.prompt is None else len(self.prompt) + len(self.completion)


@dataclass(slots=True)
class Trajectory:
    step: int
    turns: list[Turn]
    index: int = 0  # position in the batch or line in the file (0-based)
    id: str | None = None
    policy_version: int | None = None


_EMPTY_IDS = np.zeros(0, dtype=np.int32)


def _err(loc: list, msg: str, kind: str) -> dict[str, Any]:
    return {"loc": loc, "msg": msg, "type": kind}


def _ids(value: Any, loc: list, errors: list) -> np.ndarray | None:
    if type(value) is not list:
        errors.append(_err(loc, "token ids must be a list of non-negative integers", "list_type"))
        return None
    if not value:
        return _EMPTY_IDS
    try:
        # array.array is strict (no floats, strings or lists) and 1.5x faster than np.asarray on a list.
        arr = np.frombuffer(array.array("q", value), dtype=np.int64)
    except (TypeError, OverflowError):
        try:
            arr = np.asarray(value)
        except (ValueError, OverflowError):
            arr = None
    if arr is None or arr.ndim != 1 or arr.dtype.kind not in "iu":
        bad = next((i for i, v in enumerate(value) if type(v) is not int), None)
        what = "a nested list" if arr is not None and arr.ndim != 1 else f"{type(value[bad]).__name__ if bad is not None else 'a value out of range'}"
        errors.append(_err(loc + ([bad] if bad is not None else []), f"token ids must be non-negative integers, not {what}", "int_type"))
        return None
    if arr.dtype.kind == "i" and len(arr) and arr.min() < 0:
        i = int(np.flatnonzero(arr < 0)[0])
        errors.append(_err(loc + [i], f"token ids must be non-negative integers, not {int(arr[i])}", "int_range"))
        return None
    if len(arr) and arr.max() > MAX_TOKEN_ID:
        i = int(np.flatnonzero(arr > MAX_TOKEN_ID)[0])
        errors.append(_err(loc + [i], f"token id {int(arr[i])} is above {MAX_TOKEN_ID}", "int_range"))
        return None
    return arr.astype(np.int32, copy=False)


def _logprobs(value: Any, loc: list, errors: list, n_prompt: int, n_completion: int) -> np.ndarray | None:
    if type(value) is not list:
        errors.append(_err(loc, "log-probabilities must be a list of numbers", "list_type"))
        return None
    try:
        arr = np.frombuffer(array.array("d", value), dtype=np.float64) if value else np.zeros(0)
    except (TypeError, OverflowError):
        try:
            arr = np.asarray(value)
        except (ValueError, OverflowError):
            arr = None
    if arr is None or arr.ndim != 1 or arr.dtype.kind not in "fiu":
        bad = next((i for i, v in enumerate(value) if type(v) not in (int, float)), None)
        errors.append(_err(loc + ([bad] if bad is not None else []), "log-probabilities must be numbers", "float_type"))
        return None
    n = len(arr)
    if n == n_completion:
        return arr.astype(np.float64, copy=False)
    if n == n_prompt + n_completion:
        return arr[n_prompt:].astype(np.float64, copy=False)  # loss mask: prompt (task, observation) tokens are 0
    errors.append(
        _err(
            loc,
            f"{n} log-probabilities for {n_completion} completion ids ({n_prompt + n_completion} with the prompt): "
            "give one per completion token, or one per prompt + completion token",
            "length_mismatch",
        )
    )
    return None


def _text(value: Any, loc: list, errors: list) -> str | None:
    if value is None:
        return None
    if type(value) is not str:
        errors.append(_err(loc, "text must be a string", "string_type"))
        return None
    return value


def parse_trajectory(doc: Any, index: int, loc: list, errors: list) -> Trajectory | None:
    """One trajectory object, or None with what is wrong appended to ``errors`` (loc names trajectory, turn, field)."""
    n_errors = len(errors)
    if type(doc) is not dict:
        errors.append(_err(loc, "a trajectory must be an object with 'step' and 'turns'", "object_type"))
        return None
    extra = set(doc) - TRAJECTORY_FIELDS
    if extra:
        errors.append(_err(loc + [sorted(extra)[0]], "unknown field; a trajectory has 'step', 'turns', 'policy_version' and 'id'", "extra_forbidden"))
    step = doc.get("step")
    if type(step) is not int or not 0 <= step <= MAX_STEP:
        msg = "field required" if "step" not in doc else "step must be a non-negative integer"
        errors.append(_err(loc + ["step"], msg, "missing" if "step" not in doc else "int_type"))
    version = doc.get("policy_version")
    if version is not None and (type(version) is not int or version < 0):
        errors.append(_err(loc + ["policy_version"], "policy_version must be a non-negative integer", "int_type"))
    tid = doc.get("id")
    if tid is not None and type(tid) not in (str, int):
        errors.append(_err(loc + ["id"], "id must be a string or an integer", "string_type"))
    raw_turns = doc.get("turns")
    if type(raw_turns) is not list or not raw_turns:
        msg = "field required" if "turns" not in doc else "turns must be a non-empty list of turn objects"
        errors.append(_err(loc + ["turns"], msg, "missing" if "turns" not in doc else "list_type"))
        return None
    turns = []
    for t, raw in enumerate(raw_turns):
        if len(errors) >= MAX_ERRORS:
            break
        tloc = loc + ["turns", t]
        if type(raw) is not dict:
            errors.append(_err(tloc, "a turn must be an object", "object_type"))
            continue
        extra = set(raw) - TURN_FIELDS
        if extra:
            errors.append(_err(tloc + [sorted(extra)[0]], f"unknown field; a turn has {', '.join(sorted(TURN_FIELDS))}", "extra_forbidden"))
            continue
        p_text = _text(raw.get("prompt_text"), tloc + ["prompt_text"], errors)
        c_text = _text(raw.get("completion_text"), tloc + ["completion_text"], errors)
        has_p, has_c = raw.get("prompt_ids") is not None, raw.get("completion_ids") is not None
        if not has_p and not has_c:
            if p_text is None and c_text is None:
                errors.append(_err(tloc + ["prompt_ids"], "a turn needs prompt_ids and completion_ids (or at least its texts)", "missing"))
                continue
            for name in ("trainer_ids", "rollout_logprobs", "trainer_logprobs"):
                if raw.get(name) is not None:
                    errors.append(_err(tloc + [name], f"{name} without prompt_ids and completion_ids", "missing"))
            turns.append(Turn(None, None, prompt_text=p_text, completion_text=c_text))
            continue
        if not has_p or not has_c:
            missing = "prompt_ids" if not has_p else "completion_ids"
            errors.append(_err(tloc + [missing], "field required (a turn has both prompt_ids and completion_ids)", "missing"))
            continue
        prompt = _ids(raw["prompt_ids"], tloc + ["prompt_ids"], errors)
        completion = _ids(raw["completion_ids"], tloc + ["completion_ids"], errors)
        trainer = _ids(raw["trainer_ids"], tloc + ["trainer_ids"], errors) if raw.get("trainer_ids") is not None else None
        if prompt is None or completion is None:
            continue
        n_p, n_c = len(prompt), len(completion)
        r_lp = raw.get("rollout_logprobs")
        t_lp = raw.get("trainer_logprobs")
        r_lp = _logprobs(r_lp, tloc + ["rollout_logprobs"], errors, n_p, n_c) if r_lp is not None else None
        t_lp = _logprobs(t_lp, tloc + ["trainer_logprobs"], errors, n_p, n_c) if t_lp is not None else None
        turns.append(Turn(prompt, completion, trainer, r_lp, t_lp, p_text, c_text))
    if len(errors) > n_errors:
        return None
    return Trajectory(step=step, turns=turns, index=index, id=None if tid is None else str(tid), policy_version=version)


def parse_trajectories(items: Iterable[Any], loc: list | None = None) -> list[Trajectory]:
    """Validate every trajectory; raise AuditInputError listing (up to 50) errors, or return them all."""
    loc = ["body", "trajectories"] if loc is None else loc
    errors: list[dict[str, Any]] = []
    out = []
    for i, doc in enumerate(items):
        if len(errors) >= MAX_ERRORS:
            break
        tr = parse_trajectory(doc, i, loc + [i], errors)
        if tr is not None:
            out.append(tr)
    if errors:
        for e in errors:
            e.setdefault("trajectory", e["loc"][len(loc)] if len(e["loc"]) > len(loc) else None)
            if len(e["loc"]) > len(loc) + 2 and e["loc"][len(loc) + 1] == "turns":
                e.setdefault("turn", e["loc"][len(loc) + 2])
        raise AuditInputError(errors[:MAX_ERRORS])
    return out


# -- analysis -----------------------------------------------------------------------


@dataclass(slots=True)
class Finding:
    kind: str
    step: int
    trajectory: int  # index in the batch / file
    turn: int  # the turn whose ids (or whose prompt) differ
    severity: float  # larger is worse; orders the worst examples
    position: int | None = None  # first differing token position
    window_start: int | None = None
    expected: list[int] | None = None  # ids around the difference as they should be
    actual: list[int] | None = None  # ids around the difference as they are
    detail: str = ""
    trajectory_id: str | None = None
    text: dict[str, str] | None = None  # text excerpts around the difference when texts were given

    @property
    def check(self) -> str:
        return KIND_CHECK[self.kind]

    def as_dict(self) -> dict[str, Any]:
        d = {
            "check": self.check,
            "kind": self.kind,
            "title": KIND_TITLES[self.kind],
            "step": self.step,
            "trajectory": self.trajectory,
            "trajectory_id": self.trajectory_id,
            "turn": self.turn,
            "severity": self.severity,
            "position": self.position,
            "window_start": self.window_start,
            "expected": self.expected,
            "actual": self.actual,
            "detail": self.detail,
        }
        if self.text:
            d["text"] = self.text
        return d


@dataclass(slots=True)
class StepAudit:
    """What the audit found in one step's trajectories; ``metrics`` are the canonical values for that step."""

    step: int
    trajectories: int = 0
    turns: int = 0
    tokens: int = 0
    pairs: int = 0  # consecutive turn pairs whose prefix was checked
    breaks: int = 0  # pairs whose exact prefix broke, whatever the class
    trainer_turns: int = 0
    mismatches: int = 0
    text_only_turns: int = 0
    action_tokens: int = 0  # tokens with both log-probabilities
    logprob_diff_max: float | None = None
    importance_weight_max: float | None = None
    kinds: dict[str, int] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    policy_versions: set[int] = field(default_factory=set)

    def metrics(self) -> dict[str, float]:
        m: dict[str, float] = {"audit_turns": float(self.turns), "audit_trajectories": float(self.trajectories)}
        if self.pairs:
            m["prefix_break_rate"] = self.breaks / self.pairs
        if self.trainer_turns:
            m["token_mismatch_rate"] = self.mismatches / self.trainer_turns
        if self.turns:
            m["audit_text_only_rate"] = self.text_only_turns / self.turns
        if self.logprob_diff_max is not None:
            m["logprob_diff_max"] = self.logprob_diff_max
            m["importance_weight_max"] = self.importance_weight_max
        for kind in KIND_CHECK:
            if kind != "token_stream_mismatch" and kind != "text_only":
                m[f"audit_{kind}"] = float(self.kinds.get(kind, 0))
        return m

    def checks(self) -> dict[str, dict[str, Any]]:
        failed = {c: 0 for c in CHECKS}
        for kind, n in self.kinds.items():
            failed[KIND_CHECK[kind]] += n
        checked = {"prefix": self.pairs, "template": self.pairs, "tokens": self.turns}
        return {
            c: {"title": CHECK_TITLES[c], "checked": checked[c], "failed": failed[c], "passed": failed[c] == 0}
            for c in CHECKS
        }

    def report(self, examples: int = EXAMPLES_PER_CHECK) -> dict[str, Any]:
        """A JSON-able summary: counts, checks, metrics and the worst examples of each failing check."""
        return {
            "step": self.step,
            "trajectories": self.trajectories,
            "turns": self.turns,
            "tokens": self.tokens,
            "pairs": self.pairs,
            "breaks": self.breaks,
            "trainer_turns": self.trainer_turns,
            "mismatches": self.mismatches,
            "text_only_turns": self.text_only_turns,
            "action_tokens": self.action_tokens,
            "policy_versions": sorted(self.policy_versions),
            "kinds": dict(sorted(self.kinds.items())),
            "checks": self.checks(),
            "metrics": {k: _json_number(v) for k, v in self.metrics().items()},
            "examples": [f.as_dict() for f in worst(self.findings, examples)],
        }


def _json_number(v: float) -> float | str:
    """A finite float, or "NaN"/"Infinity"/"-Infinity" (stored JSON must be strict: PostgreSQL refuses NaN)."""
    if v - v == 0.0:
        return v
    return "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")


def worst(findings: list[Finding], per_check: int = EXAMPLES_PER_CHECK) -> list[Finding]:
    """The ``per_check`` most severe findings of each check."""
    out: list[Finding] = []
    for check in CHECKS:
        mine = [f for f in findings if f.check == check]
        mine.sort(key=lambda f: (-f.severity, f.step, f.trajectory, f.turn))
        out.extend(mine[:per_check])
    return out


def _first_diff(a: np.ndarray, b: np.ndarray) -> int | None:
    """First position where a and b differ (one ending early counts), or None when equal."""
    n = min(len(a), len(b))
    if n:
        ne = a[:n] != b[:n]
        i = int(ne.argmax())
        if ne[i]:
            return i
    return None if len(a) == len(b) else n


def _realign(expected: np.ndarray, actual: np.ndarray, p: int) -> tuple[int, int] | None:
    """Where the sequences agree again after the first difference at ``p``: (skip in expected, skip in actual).

    Looks for the rest of ``expected`` after skipping ``a`` tokens, inside
    ``actual`` after skipping ``b`` <= LOCAL_EDIT tokens; returns the first such
    (a, b) whose whole remainder matches, or None. An expected sequence that is
    used up counts as re-aligned (the difference is at its very end).
    """
    rest = expected[p:]
    if len(rest) <= LOCAL_EDIT:
        return (len(rest), 0)
    windows = np.lib.stride_tricks.sliding_window_view(rest, ANCHOR) if len(rest) >= ANCHOR else None
    for b in range(0, LOCAL_EDIT + 1):
        anchor = actual[p + b : p + b + ANCHOR]
        if len(anchor) < ANCHOR or windows is None:
            break
        hits = np.flatnonzero((windows == anchor).all(axis=1))
        for a in hits[:8]:
            a = int(a)
            tail = rest[a:]
            if np.array_equal(tail, actual[p + b : p + b + len(tail)]):
                return (a, b)
    return None


def _resumes_later(expected: np.ndarray, actual: np.ndarray, p: int, n: int) -> int | None:
    """A span of ``expected`` starting at ``p`` was dropped: how many tokens, when ``actual`` (within a few
    tokens of ``p``) goes on with a later part of ``expected[:n]`` (the rest of a completion after its reasoning)."""
    rest = expected[p + LOCAL_EDIT : n]
    if len(rest) < SKIP_ANCHOR:
        return None
    windows = np.lib.stride_tricks.sliding_window_view(rest, SKIP_ANCHOR)
    for b in range(0, LOCAL_EDIT + 1):
        anchor = actual[p + b : p + b + SKIP_ANCHOR]
        if len(anchor) < SKIP_ANCHOR:
            break
        hits = np.flatnonzero((windows == anchor).all(axis=1))
        if len(hits):
            return int(hits[0]) + LOCAL_EDIT
    return None


def _window(seq: np.ndarray, start: int) -> list[int]:
    return seq[start : start + 2 * WINDOW].tolist()


def _text_excerpt(text: str, at: int) -> str:
    return text[max(0, at - 40) : at + 40]


def _classify_texts(prev: Turn, nxt_prompt: str) -> tuple[str | None, str]:
    """Classify a break by the rendered texts alone: (kind or None, detail)."""
    expected = (prev.prompt_text or "") + (prev.completion_text or "")
    if nxt_prompt.startswith(expected):
        return "retokenization_drift", "the texts agree but the ids differ"
    comp = prev.completion_text or ""
    blocks = [m for m in THINK.finditer(comp) if m.group(1).strip()]
    if blocks:
        reasoning = [m.group(1).strip() for m in blocks]
        answer = THINK.sub("", comp).strip()
        answer_kept = not answer or answer[: max(1, min(len(answer), 64))] in nxt_prompt
        if answer_kept and not any(r in nxt_prompt for r in reasoning):
            chars = sum(len(m.group(0)) for m in blocks)
            return "reasoning_removed", f"the previous completion's <think> block ({chars} characters) is missing from the next prompt"
    if prev.prompt_text is not None and not nxt_prompt.startswith(prev.prompt_text[: len(prev.prompt_text) // 2]):
        if len(nxt_prompt) < SUMMARY_RATIO * len(expected):
            return "history_summarised", f"the next prompt ({len(nxt_prompt)} characters) is shorter than the history ({len(expected)})"
    return None, ""


def _check_pair(tr: Trajectory, t: int, out: StepAudit) -> None:
    """Turn t+1's prompt against turn t's prompt + completion."""
    prev, nxt = tr.turns[t], tr.turns[t + 1]
    out.pairs += 1
    if prev.text_only or nxt.text_only:
        # Text-only turns: the prefix can still be checked on the texts.
        if prev.prompt_text is None or nxt.prompt_text is None:
            out.pairs -= 1
            return
        expected = prev.prompt_text + (prev.completion_text or "")
        if nxt.prompt_text.startswith(expected):
            return
        kind, detail = _classify_texts(prev, nxt.prompt_text)
        if kind == "retokenization_drift":  # cannot happen with equal texts; keep the type checker honest
            return
        kind = kind or ("history_summarised" if len(nxt.prompt_text) < SUMMARY_RATIO * len(expected) else "history_edited")
        at = next((i for i, (x, y) in enumerate(zip(expected, nxt.prompt_text)) if x != y), min(len(expected), len(nxt.prompt_text)))
        _add(out, Finding(kind, tr.step, tr.index, t + 1, float(len(expected) - at), detail=detail or KIND_TITLES[kind] + " (texts)",
                          trajectory_id=tr.id, text={"expected": _text_excerpt(expected, at), "actual": _text_excerpt(nxt.prompt_text, at)}))
        return
    n_p, n_c = len(prev.prompt), len(prev.completion)
    actual = nxt.prompt
    n = n_p + n_c
    if len(actual) >= n and np.array_equal(actual[:n_p], prev.prompt) and np.array_equal(actual[n_p:n], prev.completion):
        return  # the common case: two slice compares, no concatenation
    expected = np.concatenate((prev.prompt, prev.completion))
    p = _first_diff(expected, actual[:n])
    assert p is not None
    lost = n - p  # history tokens after the first difference
    kind, detail = None, ""
    if prev.prompt_text is not None and prev.completion_text is not None and nxt.prompt_text is not None:
        kind, detail = _classify_texts(prev, nxt.prompt_text)
    if kind is None:
        shift = _realign(expected, actual, p)
        skipped = _resumes_later(expected, actual, p, n) if p >= n_p else None
        if skipped is not None:
            kind, detail = "reasoning_removed", f"{skipped} tokens of the previous completion are missing from the next prompt"
        elif len(actual) < SUMMARY_RATIO * n:
            kind, detail = "history_summarised", f"the next prompt ({len(actual)} tokens) is shorter than the history ({n})"
        elif shift is not None and shift[0] <= LOCAL_EDIT and shift[1] <= LOCAL_EDIT:
            kind, detail = "retokenization_drift", f"ids differ over {max(shift)} tokens then agree again"
        elif shift is not None and shift[0] > shift[1]:
            kind, detail = "history_summarised", f"{shift[0] - shift[1]} history tokens were compressed away"
        else:
            kind, detail = "history_edited", "the history differs from what the rollout saw"
    start = max(0, p - WINDOW)
    _add(
        out,
        Finding(
            kind, tr.step, tr.index, t + 1, float(lost), position=p, window_start=start,
            expected=_window(expected, start), actual=_window(actual, start), detail=detail, trajectory_id=tr.id,
        ),
    )


def _add(out: StepAudit, f: Finding) -> None:
    if f.check in ("prefix", "template") or f.kind == "retokenization_drift":
        out.breaks += 1
    out.kinds[f.kind] = out.kinds.get(f.kind, 0) + 1
    out.findings.append(f)


def audit_trajectory(tr: Trajectory, out: StepAudit) -> None:
    """Add one trajectory's checks to its step's audit."""
    out.trajectories += 1
    if tr.policy_version is not None:
        out.policy_versions.add(tr.policy_version)
    turns = tr.turns
    lp_max = out.logprob_diff_max
    iw_max = out.importance_weight_max
    for t, turn in enumerate(turns):
        out.turns += 1
        if turn.prompt is None:
            out.text_only_turns += 1
            _add(out, Finding("text_only", tr.step, tr.index, t, 0.0, detail="rollouts not stored as tokens", trajectory_id=tr.id))
        else:
            out.tokens += len(turn.prompt) + len(turn.completion)
            if turn.trainer is not None:
                out.trainer_turns += 1
                n_p, n_c, tr_ids = len(turn.prompt), len(turn.completion), turn.trainer
                if not (len(tr_ids) == n_p + n_c and np.array_equal(tr_ids[:n_p], turn.prompt) and np.array_equal(tr_ids[n_p:], turn.completion)):
                    out.mismatches += 1
                    seq = np.concatenate((turn.prompt, turn.completion))
                    p = _first_diff(seq, tr_ids)
                    m = min(len(seq), len(tr_ids))
                    differing = int(np.count_nonzero(seq[:m] != tr_ids[:m])) + abs(len(seq) - len(tr_ids))
                    start = max(0, p - WINDOW)
                    _add(out, Finding("token_stream_mismatch", tr.step, tr.index, t, float(differing), position=p, window_start=start,
                                      expected=_window(seq, start), actual=_window(tr_ids, start), trajectory_id=tr.id,
                                      detail=f"{differing} of {len(seq)} trainer ids differ from the rollout's (first at {p})"))
            if turn.rollout_lp is not None and turn.trainer_lp is not None and len(turn.rollout_lp):
                d = turn.trainer_lp - turn.rollout_lp
                out.action_tokens += len(d)
                hi, lo = float(d.max()), float(d.min())
                dm = max(abs(hi), abs(lo)) if hi - hi == 0 and lo - lo == 0 else float(np.abs(d).max())
                lp_max = dm if lp_max is None or not dm <= lp_max else lp_max
                w = math.nan if hi != hi or dm != dm else (math.exp(hi) if hi < 709 else math.inf)
                iw_max = w if iw_max is None or not w <= iw_max else iw_max
        if t + 1 < len(turns):
            _check_pair(tr, t, out)
    out.logprob_diff_max = lp_max
    out.importance_weight_max = iw_max


def audit(trajectories: Iterable[Trajectory]) -> dict[int, StepAudit]:
    """Audit trajectories, grouped by step (ascending)."""
    steps: dict[int, StepAudit] = {}
    for tr in trajectories:
        out = steps.get(tr.step)
        if out is None:
            out = steps[tr.step] = StepAudit(tr.step)
        audit_trajectory(tr, out)
    return dict(sorted(steps.items()))


def metric_rows(steps: dict[int, StepAudit], now: float) -> list[tuple[str, int, float | None, int, float]]:
    """Rows ``(name, step, value, nonfinite, time)`` for the ingest pipeline (ingest.points.Batch.of)."""
    rows = []
    for step, a in steps.items():
        for name, v in a.metrics().items():
            if v - v == 0.0:
                rows.append((name, step, float(v), 0, now))
            else:
                rows.append((name, step, None, 1 if v != v else (2 if v > 0 else 3), now))
    return rows


# -- summaries over steps (the API, the CLI and the dashboard) -------------------------


def combine(reports: list[dict[str, Any]], examples: int = EXAMPLES_PER_CHECK) -> dict[str, Any]:
    """Sum step reports (``StepAudit.report()``) into one: the three checks with counts, and the worst examples."""
    total = {k: 0 for k in ("trajectories", "turns", "tokens", "pairs", "breaks", "trainer_turns", "mismatches", "text_only_turns", "action_tokens")}
    kinds: dict[str, int] = {}
    lp_max: float | None = None
    iw_max: float | None = None
    found: list[dict[str, Any]] = []
    for r in reports:
        for k in total:
            total[k] += r.get(k, 0)
        for kind, n in r.get("kinds", {}).items():
            kinds[kind] = kinds.get(kind, 0) + n
        m = r.get("metrics", {})
        if m.get("logprob_diff_max") is not None:
            v = float(m["logprob_diff_max"])  # "NaN" and "Infinity" too
            lp_max = v if lp_max is None or not v <= lp_max else lp_max
        if m.get("importance_weight_max") is not None:
            v = float(m["importance_weight_max"])
            iw_max = v if iw_max is None or not v <= iw_max else iw_max
        found.extend(r.get("examples", []))
    failed = {c: 0 for c in CHECKS}
    for kind, n in kinds.items():
        failed[KIND_CHECK[kind]] += n
    checked = {"prefix": total["pairs"], "template": total["pairs"], "tokens": total["turns"]}
    checks = {c: {"title": CHECK_TITLES[c], "checked": checked[c], "failed": failed[c], "passed": failed[c] == 0} for c in CHECKS}
    worst_examples = []
    for c in CHECKS:
        mine = sorted((e for e in found if e["check"] == c), key=lambda e: (-e["severity"], e["step"], e["trajectory"], e["turn"]))
        worst_examples.extend(mine[:examples])
    return {
        **total,
        "steps": [r["step"] for r in reports],
        "kinds": dict(sorted(kinds.items())),
        "checks": checks,
        "passed": all(c["passed"] for c in checks.values()),
        "prefix_break_rate": total["breaks"] / total["pairs"] if total["pairs"] else None,
        "token_mismatch_rate": total["mismatches"] / total["trainer_turns"] if total["trainer_turns"] else None,
        "logprob_diff_max": lp_max,
        "importance_weight_max": iw_max,
        "examples": worst_examples,
    }


# -- offline use: `parallax audit FILE.jsonl` ---------------------------------------------


def read_file(path: str) -> list[Trajectory]:
    """Trajectories from a JSONL dump (one per line) or a JSON object with 'trajectories'; ``-`` reads stdin."""
    import json
    import sys

    text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
    stripped = text.lstrip()
    if stripped.startswith("{") and '"trajectories"' in stripped[:200]:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError:
            doc = None
        if isinstance(doc, dict) and isinstance(doc.get("trajectories"), list):
            return parse_trajectories(doc["trajectories"], ["trajectories"])
    docs = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            docs.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise AuditInputError([_err([f"line {lineno}"], f"malformed JSON: {exc.msg}", "json_invalid")]) from None
    try:
        return parse_trajectories(docs, [])
    except AuditInputError as exc:
        for e in exc.errors:  # name lines as people see them in the file
            if e["loc"] and type(e["loc"][0]) is int:
                e["loc"][0] = f"line {_line_of(text, e['loc'][0])}"
        raise


def _line_of(text: str, index: int) -> int:
    seen = -1
    for lineno, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            seen += 1
            if seen == index:
                return lineno
    return index + 1


def _loc(loc: list) -> str:
    return ".".join(str(p) for p in loc)


def render(summary: dict[str, Any], file: Any = None) -> None:
    """Print a ``combine`` summary as tables (rich when installed, plain text otherwise)."""
    import sys

    file = file or sys.stdout
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # pragma: no cover - rich comes with the test extra
        Console = None  # type: ignore[assignment]
    rows = [
        (CHECK_TITLES[c], "PASS" if v["passed"] else "FAIL", str(v["checked"]), str(v["failed"]))
        for c, v in summary["checks"].items()
    ]
    fmt = lambda v: "-" if v is None else f"{v:.4g}"  # noqa: E731
    metrics = [
        ("prefix_break_rate", fmt(summary["prefix_break_rate"])),
        ("token_mismatch_rate", fmt(summary["token_mismatch_rate"])),
        ("logprob_diff_max", fmt(summary["logprob_diff_max"])),
        ("importance_weight_max", fmt(summary["importance_weight_max"])),
    ]
    head = (
        f"{summary['trajectories']} trajectories, {summary['turns']} turns, {summary['tokens']:,} tokens, "
        f"{len(summary['steps'])} steps"
    )
    ex = [
        (e["check"], KIND_TITLES[e["kind"]], str(e["step"]), str(e["trajectory_id"] if e["trajectory_id"] is not None else e["trajectory"]),
         str(e["turn"]), "" if e["position"] is None else str(e["position"]), _example_text(e))
        for e in summary["examples"]
    ]
    if Console is None:
        print(head, file=file)
        for r in rows:
            print(f"{r[1]:4}  {r[0]}: {r[3]} of {r[2]} failed", file=file)
        for name, v in metrics:
            print(f"{name} = {v}", file=file)
        for e in ex:
            print(f"[{e[0]}] {e[1]} step {e[2]} trajectory {e[3]} turn {e[4]} at {e[5]}: {e[6]}", file=file)
        return
    console = Console(file=file, width=None if getattr(file, "isatty", lambda: False)() else 140)
    t = Table(title="Harness audit", caption=head)
    for col in ("check", "result", "checked", "failed"):
        t.add_column(col, justify="left" if col == "check" else "right")
    for title, result, checked, failed in rows:
        t.add_row(title, f"[green]{result}[/green]" if result == "PASS" else f"[red]{result}[/red]", checked, failed)
    console.print(t)
    m = Table(title="Metrics (canonical names)")
    m.add_column("metric")
    m.add_column("value", justify="right")
    for name, v in metrics:
        m.add_row(name, v)
    console.print(m)
    if ex:
        w = Table(title="Worst examples")
        for col in ("check", "finding", "step", "trajectory", "turn", "position", "expected → actual"):
            w.add_column(col, overflow="fold")
        for e in ex:
            w.add_row(*e)
        console.print(w)


def _example_text(e: dict[str, Any]) -> str:
    if e.get("expected") is not None:
        return f"{e['detail']}: {e['expected']} → {e['actual']} (from token {e['window_start']})"
    if e.get("text"):
        return f"{e['detail']}: {e['text']['expected']!r} → {e['text']['actual']!r}"
    return e["detail"]


def run_audit_file(path: str, *, as_json: bool = False, examples: int = EXAMPLES_PER_CHECK) -> int:
    """``parallax audit``: 0 when every check passes, 1 when one fails, 2 when the file cannot be audited."""
    import json
    import sys

    try:
        trajectories = read_file(path)
    except OSError as exc:
        print(f"parallax: cannot read {path}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except AuditInputError as exc:
        for e in exc.errors:
            print(f"parallax: {path}: {_loc(e['loc'])}: {e['msg']}", file=sys.stderr)
        return 2
    steps = audit(trajectories)
    summary = combine([a.report(examples) for a in steps.values()], examples)
    if as_json:
        print(json.dumps(summary, indent=2))
    else:
        render(summary)
    return 0 if summary["passed"] else 1
