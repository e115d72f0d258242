"""`parallax rules test FILE`: unit tests for rules, written in YAML, like `promtool test rules`.

```yaml
rule_files: [default]            # "default" = the built-in pack; others relative to this file
tests:
  - name: stale rollouts make importance weights spike
    config: {staleness_bound: 2}
    interval: 10                 # wall seconds per step
    series:                      # one token per step from step 0
      importance_weight_max: "1.1x40 9 12 11 10 9"
      staleness_mean: "0.5x40 3 4 4 4 4"
    events: [{step: 20, kind: resume}]
    silent_from: 500             # optional: the run stops reporting (wall seconds) -> timer rules
    expect:
      - at_step: 44
        firing: [{rule: importance_weight_spike, top_cause: stale_rollouts}]
        pending: [some_rule]     # optional
```

Series tokens: a number, ``_`` (no point at that step), ``nan``, ``inf``,
``-inf``, ``AxN`` (A repeated N times), ``_xN`` (N steps without a point, as in promtool),
``A+BxN`` (A, A+B, … N+1 values).
``firing`` lists exactly the alerts firing after that step's evaluation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from parallax.alerts.engine import replay
from parallax.alerts.rules import Rule, load_rules

_REPEAT = re.compile(r"^([-+]?[\d.eE+-]+?|nan|inf|-inf)(?:([-+][\d.eE]+))?x(\d+)$")
_GAP = re.compile(r"^_x(\d+)$")


class RuleTestError(ValueError):
    """The test file itself is wrong (not a failing test)."""


def expand_series(text: str | list) -> list[float | None]:
    """One value per step; None where the metric has no point."""
    if isinstance(text, list):
        return [None if v in ("_", None) else float(v) for v in text]
    out: list[float | None] = []
    for token in str(text).split():
        low = token.lower()
        if low == "_":
            out.append(None)
            continue
        gap = _GAP.match(low)
        if gap:
            out.extend([None] * int(gap.group(1)))
            continue
        m = _REPEAT.match(low)
        if m:
            try:
                start, incr, times = float(m.group(1)), m.group(2), int(m.group(3))
                if incr is not None:
                    float(incr)
            except ValueError:
                raise RuleTestError(f"series token {token!r} is not a number, '_', 'AxN', '_xN' or 'A+BxN'") from None
            if incr is None:
                out.extend([start] * times)
            else:
                out.extend(start + float(incr) * i for i in range(times + 1))
            continue
        try:
            out.append(float(low))
        except ValueError:
            raise RuleTestError(f"series token {token!r} is not a number, '_', 'AxN', '_xN' or 'A+BxN'") from None
    return out


@dataclass
class TestOutcome:
    name: str
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


def _rules_for(doc: dict, path: Path) -> list[Rule]:
    files = doc.get("rule_files", ["default"])
    paths = [path.parent / f for f in files if f != "default"]
    return load_rules(paths, include_default="default" in files)


def run_file(path: str | Path) -> list[TestOutcome]:
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise RuleTestError(f"{path}: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("tests"), list):
        raise RuleTestError(f"{path}: expected a mapping with a 'tests' list")
    rules = _rules_for(doc, path)
    return [run_case(rules, case, i) for i, case in enumerate(doc["tests"])]


#: The keys a test case may have: another one is a typo (``alerts:`` for ``expect:``) whose checks would never run.
CASE_KEYS = frozenset({"name", "config", "interval", "series", "events", "silent_from", "expect", "expect_after_silence"})
EXPECT_KEYS = frozenset({"at_step", "firing", "pending"})


def _check_case(case: Any, index: int) -> None:
    if not isinstance(case, dict):
        raise RuleTestError(f"test {index}: expected a mapping with 'name', 'series' and 'expect'")
    name = case.get("name", f"test {index}")
    unknown = sorted(set(case) - CASE_KEYS)
    if unknown:
        raise RuleTestError(f"test {name!r}: unknown key {unknown[0]!r} (one of {', '.join(sorted(CASE_KEYS))})")
    if not case.get("expect") and "expect_after_silence" not in case:
        raise RuleTestError(f"test {name!r}: nothing to check - give 'expect' (or 'expect_after_silence')")
    for exp in case.get("expect") or []:
        if not isinstance(exp, dict) or "at_step" not in exp:
            raise RuleTestError(f"test {name!r}: each 'expect' item needs 'at_step'")
        bad = sorted(set(exp) - EXPECT_KEYS)
        if bad:
            raise RuleTestError(f"test {name!r}: unknown key {bad[0]!r} in 'expect' (one of {', '.join(sorted(EXPECT_KEYS))})")


def run_case(rules: list[Rule], case: dict[str, Any], index: int = 0) -> TestOutcome:
    _check_case(case, index)
    name = str(case.get("name", f"test {index}"))
    outcome = TestOutcome(name)
    interval = float(case.get("interval", 10))
    series: dict[str, dict[int, float]] = {}
    for metric, text in (case.get("series") or {}).items():
        series[metric] = {step: v for step, v in enumerate(expand_series(text)) if v is not None}
    times = {s: s * interval for pts in series.values() for s in pts}
    events = [(int(e["step"]), str(e["kind"])) for e in case.get("events", [])]
    result = replay(rules, series, times=times, config=case.get("config") or {}, events=events,
                    silent_from=case.get("silent_from"))
    for exp in case.get("expect", []):
        step = int(exp["at_step"])
        expected = exp.get("firing") or []
        got = result.firing_at(step)
        if set(got) != {a["rule"] for a in expected} or any(
            "top_cause" in a and got.get(a["rule"]) != a["top_cause"] for a in expected
        ):
            shown = [f"{r} ({c})" for r, c in sorted(got.items())]
            outcome.failures.append(f"at step {step}: expected firing {expected}, got {shown}")
        if "pending" in exp:
            want_p = set(exp["pending"] or [])
            got_p = result.pending_at(step)
            if got_p != want_p:
                outcome.failures.append(f"at step {step}: expected pending {sorted(want_p)}, got {sorted(got_p)}")
    if case.get("silent_from") is not None and "expect_after_silence" in case:
        want = {(a["rule"], a.get("top_cause")) for a in case["expect_after_silence"]}
        got = {(f.rule, f.top_cause) for f in result.firing if f.ended_step is None}
        if got != want:
            outcome.failures.append(f"after silence: expected firing {sorted(want, key=str)}, got {sorted(got, key=str)}")
    return outcome
