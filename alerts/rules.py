"""Rule packs: loading and validating YAML, and evaluating one rule for one run.

A pack is ``rules: [...]``; each rule has a condition (``expr``), how long it
must hold (``for``, in steps), severity, labels, a summary template, and the
causes it may point to, each with a score expression that ranks it, evidence
expressions shown with the alert, and advice (DESIGN §2, §5). Invalid packs are
refused with ``file:line:col: rule NAME: message``. Evaluation is pure: the
lifecycle (pending/firing/resolved) lives in :mod:`parallax.alerts.lifecycle`.
"""

from __future__ import annotations

import math
import re
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import yaml

from parallax.alerts.expr import Definition, EvalContext, Expr, ExprError, parse_definition, parse_expr, parse_signature

__all__ = [
    "CAUSE_IDS",
    "DEFAULT_PACK",
    "CauseSpec",
    "EvalContext",
    "Evaluation",
    "RankedCause",
    "Rule",
    "RuleError",
    "SEVERITIES",
    "evaluate",
    "load_pack_text",
    "load_rules",
]

DEFAULT_PACK: Path = Path(__file__).parent / "rules" / "default.yaml"

#: The stable cause ids of DESIGN §2, in its order; the API returns them whatever a rule is called.
CAUSE_ORDER: tuple[str, ...] = (
    "stale_rollouts",
    "token_mismatch",
    "unbalanced_groups",
    "padding_imbalance",
    "exploration_collapse",
    "reward_hacking",
    "numerical_blowup",
    "trainer_silent",
)
CAUSE_IDS: frozenset[str] = frozenset(CAUSE_ORDER)

SEVERITIES = ("critical", "warning", "info")
RULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")
VALUE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
LABEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")
# A format spec for one number: [[fill]align][sign][#][0][width][,|_][.precision][type]
FORMAT_SPEC = re.compile(r"(.?[<>=^])?[+\- ]?#?0?\d{0,3}[,_]?(\.\d{1,2})?[eEfFgGn%d]?")
TEMPLATE_BUILTINS = frozenset({"value", "step", "rule"})
MAX_YAML_NODES = 100_000

RULE_KEYS = frozenset(
    {"name", "expr", "for", "keep_firing_for", "severity", "labels", "summary", "values", "hold_after_resume", "causes", "description"}
)
CAUSE_KEYS = frozenset({"id", "score", "evidence", "advice"})


# -- data -----------------------------------------------------------------------------


@dataclass(frozen=True)
class CauseSpec:
    id: str
    score: Expr
    evidence: tuple[Expr, ...]
    advice: str  # a template, filled like the summary


@dataclass(frozen=True)
class Rule:
    name: str
    condition: Expr
    for_steps: int
    keep_firing_for: int
    severity: str
    labels: dict
    summary: str  # a template: {name} or {name:.2f} for each entry of `values`, plus {value}, {step}, {rule}
    causes: tuple[CauseSpec, ...]
    metrics: frozenset[str]
    windows: dict[str, int]
    on_timer: bool
    hold_after_resume: int
    source: str
    values: dict[str, Expr] = field(default_factory=dict)
    description: str = ""


@dataclass
class RankedCause:
    id: str
    score: float
    evidence: list[dict]
    advice: str


@dataclass
class Evaluation:
    active: bool
    value: float | None
    summary: str
    causes: list[RankedCause]


class RuleError(ValueError):
    """A rule pack that cannot be used; str() is ``file:line:col: rule NAME: message``."""

    def __init__(
        self, message: str, *, path: str, rule: str | None = None, line: int | None = None, column: int | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.rule = rule
        self.line = line  # 1-based line in the file
        self.column = column  # 1-based column in the file

    def __str__(self) -> str:
        where = self.path
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        who = f" rule {self.rule}:" if self.rule else ""
        return f"{where}:{who} {self.message}"


# -- YAML with positions ------------------------------------------------------------------


class _Y:
    """A YAML value with the position of its node (1-based line and column)."""

    __slots__ = ("value", "line", "column", "node")

    def __init__(self, value: Any, node: yaml.Node) -> None:
        self.value = value
        self.node = node
        self.line = node.start_mark.line + 1
        self.column = node.start_mark.column + 1


class _Pack:
    def __init__(self, text: str, source: str) -> None:
        self.text = text
        self.lines = text.splitlines()
        self.source = source
        self._constructor = yaml.SafeLoader("")
        self._nodes = 0
        self._keys: dict[int, dict[str, _Y]] = {}  # id(mapping) -> its keys, for key positions

    def error(self, message: str, at: _Y | None = None, rule: str | None = None) -> RuleError:
        return RuleError(
            message, path=self.source, rule=rule, line=at.line if at else None, column=at.column if at else None
        )

    def compose(self) -> _Y | None:
        try:
            node = yaml.compose(self.text, Loader=yaml.SafeLoader)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            raise RuleError(
                f"invalid YAML: {exc.problem or exc.context}",
                path=self.source,
                line=mark.line + 1 if mark else None,
                column=mark.column + 1 if mark else None,
            ) from None
        except yaml.YAMLError as exc:
            raise RuleError(f"invalid YAML: {exc}", path=self.source) from None
        return None if node is None else self.walk(node)

    def walk(self, node: yaml.Node) -> _Y:
        self._nodes += 1
        if self._nodes > MAX_YAML_NODES:
            raise RuleError(f"more than {MAX_YAML_NODES} YAML nodes (aliases expanded)", path=self.source)
        if isinstance(node, yaml.MappingNode):
            out: dict[str, _Y] = {}
            keys: dict[str, _Y] = {}
            for k, v in node.value:
                key = self.walk(k)
                if not isinstance(key.value, str):
                    raise self.error(f"keys must be strings, not {key.value!r}", key)
                if key.value in out:
                    raise self.error(f"duplicate key {key.value!r}", key)
                out[key.value] = self.walk(v)
                keys[key.value] = key
            y = _Y(out, node)
            self._keys[id(y)] = keys
            return y
        if isinstance(node, yaml.SequenceNode):
            return _Y([self.walk(v) for v in node.value], node)
        try:
            value = self._constructor.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            raise self.error(f"invalid YAML value: {exc}", _Y(None, node)) from None
        return _Y(value, node)

    def key_at(self, mapping: _Y, key: str) -> _Y:
        return self._keys.get(id(mapping), {}).get(key, mapping)

    # expression positions: map an offset in the scalar's text to the file
    def expr_position(self, y: _Y, offset: int) -> tuple[int, int]:
        node = y.node
        style = getattr(node, "style", None)
        start, end = node.start_mark, node.end_mark
        segments: list[tuple[int, int, int]] = []  # (line 0-based, column 0-based, length)
        if style in ("|", ">"):
            first = start.line + 1
            last = max(first, end.line - (1 if end.column == 0 else 0))
            for ln in range(first, min(last + 1, len(self.lines))):
                raw = self.lines[ln]
                stripped = raw.lstrip(" ")
                if stripped:
                    segments.append((ln, len(raw) - len(stripped), len(stripped.rstrip())))
        else:
            quote = 1 if style in ("'", '"') else 0
            for ln in range(start.line, min(end.line + 1, len(self.lines))):
                raw = self.lines[ln]
                if ln == start.line:
                    col = start.column + quote
                    stop = end.column - quote if end.line == ln else len(raw.rstrip())
                    segments.append((ln, col, max(0, stop - col)))
                else:
                    stripped = raw.lstrip(" ")
                    col = len(raw) - len(stripped)
                    stop = end.column - quote if end.line == ln else len(raw.rstrip())
                    segments.append((ln, col, max(0, stop - col)))
        pos = 0
        for ln, col, length in segments:
            if offset <= pos + length:
                return ln + 1, col + (offset - pos) + 1
            pos += length + 1
        return y.line, y.column


# -- validation ------------------------------------------------------------------------------


def load_pack_text(text: str, source: str) -> list[Rule]:
    """Parse and validate one pack's YAML text; ``source`` names it in errors and in ``Rule.source``."""
    rules, _ = _load_pack(text, source)
    return rules


def _load_pack(text: str, source: str) -> tuple[list[Rule], dict[str, _Y]]:
    pack = _Pack(text, source)
    doc = pack.compose()
    if doc is None:
        raise RuleError("empty rule file: expected `rules: [...]`", path=source)
    if not isinstance(doc.value, dict):
        raise pack.error("a rule file is a mapping with a `rules:` list", doc)
    unknown = sorted(set(doc.value) - {"rules", "define"})
    if unknown:
        raise pack.error(
            f"unknown key {unknown[0]!r} (a rule file has `rules:` and optionally `define:`)", pack.key_at(doc, unknown[0])
        )
    if "rules" not in doc.value:
        raise pack.error("missing `rules:` list", doc)
    definitions, signatures = _definitions(pack, doc)
    used: set[str] = set()
    items = doc.value["rules"]
    rules: list[Rule] = []
    positions: dict[str, _Y] = {}
    if items.value is not None and not isinstance(items.value, list):
        raise pack.error("`rules:` must be a list of rules", items)
    for item in items.value or ():
        rule = _rule(pack, item, definitions, used)
        if rule.name in positions:
            first = positions[rule.name]
            raise pack.error(
                f"duplicate rule name (first defined at line {first.line})", pack.key_at(item, "name"), rule.name
            )
        positions[rule.name] = item
        rules.append(rule)
    for name in definitions:
        if name not in used:  # dead text in a pack is a typo or a leftover; say so, as for an unknown key
            raise pack.error(f"definition {name}() is not used by any rule", signatures[name])
    return rules, positions


def _definitions(pack: _Pack, doc: _Y) -> tuple[dict[str, Definition], dict[str, _Y]]:
    """The pack's ``define:`` mapping: ``name(params): expression``, each callable in the pack's expressions."""
    y = doc.value.get("define")
    if y is None or y.value is None:
        return {}, {}
    if not isinstance(y.value, dict):
        raise pack.error("`define:` must be a mapping of `name(params)` to expressions", y)
    definitions: dict[str, Definition] = {}
    signatures: dict[str, _Y] = {}
    for signature, body in y.value.items():
        key = pack.key_at(y, signature)
        if isinstance(body.value, bool) or not isinstance(body.value, (str, int, float)):
            raise pack.error(f"definition {signature}: the body must be an expression (a string)", body)
        src = body.value if isinstance(body.value, str) else repr(body.value)
        try:
            parse_signature(signature)
        except ExprError as exc:
            raise pack.error(f"definition {signature}: {exc.message}", key) from None
        try:
            d = parse_definition(signature, src)
        except ExprError as exc:
            line, col = pack.expr_position(body, exc.column) if isinstance(body.value, str) else (body.line, body.column)
            raise RuleError(f"definition {signature}: {exc.message}", path=pack.source, line=line, column=col) from None
        if d.name in definitions:
            raise pack.error(f"{d.name}() defined twice (first at line {signatures[d.name].line})", key)
        definitions[d.name] = d
        signatures[d.name] = key
    return definitions, signatures


def _rule(pack: _Pack, item: _Y, definitions: dict[str, Definition], used: set[str]) -> Rule:
    if not isinstance(item.value, dict):
        raise pack.error("each rule is a mapping with at least `name` and `expr`", item)
    d: dict[str, _Y] = item.value
    name_y = d.get("name")
    name = name_y.value if name_y is not None else None
    if name_y is None:
        raise pack.error("rule has no `name`", item)
    if not isinstance(name, str) or not RULE_NAME.fullmatch(name):
        raise pack.error("`name` must be letters, digits and _ (starting with a letter or _), at most 100", name_y)
    unknown = sorted(set(d) - RULE_KEYS)
    if unknown:
        raise pack.error(
            f"unknown key {unknown[0]!r} (allowed: {', '.join(sorted(RULE_KEYS))})", pack.key_at(item, unknown[0]), name
        )

    def expr(y: _Y, what: str) -> Expr:
        value = y.value
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise pack.error(f"{what} must be an expression (a string)", y, name)
        src = value if isinstance(value, str) else repr(value)
        try:
            return parse_expr(src, definitions, used)
        except ExprError as exc:
            line, col = pack.expr_position(y, exc.column) if isinstance(value, str) else (y.line, y.column)
            raise RuleError(
                f"{what}: {exc.message} (column {exc.column} of the expression)",
                path=pack.source,
                rule=name,
                line=line,
                column=col,
            ) from None

    def steps(key: str) -> int:
        y = d.get(key)
        if y is None:
            return 0
        if type(y.value) is not int or y.value < 0:
            raise pack.error(f"`{key}` must be a whole number of steps >= 0", y, name)
        return y.value

    if "expr" not in d:
        raise pack.error("rule has no `expr`", item, name)
    condition = expr(d["expr"], "expr")
    severity = "warning"
    if "severity" in d:
        severity = d["severity"].value
        if severity not in SEVERITIES:
            raise pack.error(f"`severity` must be one of {', '.join(SEVERITIES)}", d["severity"], name)

    labels: dict[str, str] = {}
    if "labels" in d and d["labels"].value is not None:
        if not isinstance(d["labels"].value, dict):
            raise pack.error("`labels` must be a mapping of names to strings", d["labels"], name)
        for k, v in d["labels"].value.items():
            if not LABEL_NAME.fullmatch(k):
                raise pack.error(f"invalid label name {k!r}", pack.key_at(d["labels"], k), name)
            if isinstance(v.value, (dict, list)) or v.value is None:
                raise pack.error(f"label {k!r} must be a string", v, name)
            labels[k] = v.value if isinstance(v.value, str) else _plain(v.value)

    values: dict[str, Expr] = {}
    if "values" in d and d["values"].value is not None:
        if not isinstance(d["values"].value, dict):
            raise pack.error("`values` must be a mapping of names to expressions", d["values"], name)
        for k, v in d["values"].value.items():
            if not VALUE_NAME.fullmatch(k) or (k in TEMPLATE_BUILTINS and k != "value"):
                raise pack.error(
                    f"invalid value name {k!r} (an identifier, not "
                    f"{', '.join(sorted(TEMPLATE_BUILTINS - {'value'}))}; `value` sets the alert's value)",
                    pack.key_at(d["values"], k),
                    name,
                )
            values[k] = expr(v, f"values.{k}")

    def template(y: _Y | None, what: str) -> str:
        if y is None or y.value is None:
            return ""
        if not isinstance(y.value, str):
            raise pack.error(f"`{what}` must be a string", y, name)
        problem = _check_template(y.value, set(values) | TEMPLATE_BUILTINS)
        if problem:
            raise pack.error(f"`{what}`: {problem}", y, name)
        return y.value

    summary = template(d.get("summary"), "summary")
    description = ""
    if "description" in d and d["description"].value is not None:
        if not isinstance(d["description"].value, str):
            raise pack.error("`description` must be a string", d["description"], name)
        description = d["description"].value

    causes: list[CauseSpec] = []
    if "causes" in d and d["causes"].value is not None:
        if not isinstance(d["causes"].value, list):
            raise pack.error("`causes` must be a list", d["causes"], name)
        seen: set[str] = set()
        for cy in d["causes"].value:
            if not isinstance(cy.value, dict):
                raise pack.error("each cause is a mapping with `id`, `score`, `evidence`, `advice`", cy, name)
            c = cy.value
            bad = sorted(set(c) - CAUSE_KEYS)
            if bad:
                raise pack.error(
                    f"unknown cause key {bad[0]!r} (allowed: {', '.join(sorted(CAUSE_KEYS))})", pack.key_at(cy, bad[0]), name
                )
            if "id" not in c:
                raise pack.error("cause has no `id`", cy, name)
            cid = c["id"].value
            if cid not in CAUSE_IDS:
                raise pack.error(f"unknown cause id {cid!r} (known: {', '.join(sorted(CAUSE_IDS))})", c["id"], name)
            if cid in seen:
                raise pack.error(f"cause {cid!r} listed twice", c["id"], name)
            seen.add(cid)
            score = expr(c["score"], f"cause {cid} score") if "score" in c else parse_expr("1")
            evidence: list[Expr] = []
            if "evidence" in c and c["evidence"].value is not None:
                if not isinstance(c["evidence"].value, list):
                    raise pack.error("`evidence` must be a list of expressions", c["evidence"], name)
                evidence = [expr(e, f"cause {cid} evidence") for e in c["evidence"].value]
            advice = template(c.get("advice"), f"cause {cid} advice")
            causes.append(CauseSpec(id=cid, score=score, evidence=tuple(evidence), advice=advice))

    hold = steps("hold_after_resume")
    exprs = [condition, *values.values()] + [e for c in causes for e in (c.score, *c.evidence)]
    windows: dict[str, int] = {}
    for e in exprs:
        for m, n in e.windows.items():
            windows[m] = max(windows.get(m, 0), n)
    if hold:  # after a resume its windows leave the hold's points out (engine.HeldSeries): as many more are kept
        windows = {m: n + hold for m, n in windows.items()}
    return Rule(
        name=name,
        condition=condition,
        for_steps=steps("for"),
        keep_firing_for=steps("keep_firing_for"),
        severity=severity,
        labels=labels,
        summary=summary,
        causes=tuple(causes),
        metrics=frozenset(windows),
        windows=windows,
        on_timer=any(e.uses_time for e in exprs),
        hold_after_resume=hold,
        source=pack.source,
        values=values,
        description=description,
    )


def _plain(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _check_template(text: str, names: set[str]) -> str | None:
    try:
        parts = list(string.Formatter().parse(text))
    except ValueError as exc:
        return f"invalid template ({exc}); write {{{{ and }}}} for literal braces"
    for _, field_name, spec, conversion in parts:
        if field_name is None:
            continue
        if field_name not in names:
            known = ", ".join(sorted(names))
            return f"unknown name {{{field_name}}} in template (known: {known})"
        if conversion:
            return f"conversions (!{conversion}) are not allowed in templates"
        if spec and not FORMAT_SPEC.fullmatch(spec):
            return f"format {spec!r} for {{{field_name}}} is not a number format such as .2f, .0%, .3g"
    return None


def render(template: str, values: dict[str, Any]) -> str:
    """Fill a template checked by :func:`_check_template`; never evaluates anything."""
    out: list[str] = []
    unknown = False
    for literal, field_name, spec, _ in string.Formatter().parse(template):
        if unknown:  # "{stall:.3g}s" of an unknown value reads "n/a", not "n/as"
            literal = _UNIT_AFTER.sub("", literal, count=1)
        out.append(literal)
        unknown = False
        if field_name is None:
            continue
        v = values.get(field_name)
        if v is None:
            out.append("n/a")
            unknown = True
        elif isinstance(v, bool):
            out.append("yes" if v else "no")
        elif isinstance(v, (int, float)) and spec:
            try:
                out.append(format(v, spec))
            except (ValueError, TypeError):
                out.append(_short(v))
        elif isinstance(v, float):
            out.append(_short(v))
        else:
            out.append(str(v))
    return "".join(out)


#: A unit written right after a value in a template (``{x:.3g}s``, ``{x}%``, ``{x:.2f}:1``).
_UNIT_AFTER = re.compile(r"^(?:s|ms|%|x|:1)(?![A-Za-z0-9])")


def _short(v: float) -> str:
    return f"{v:.4g}"


# -- files ------------------------------------------------------------------------------------


def load_rules(paths: Sequence[str | Path] = (), *, include_default: bool = True) -> list[Rule]:
    """The built-in pack (unless excluded), then each file in order; a directory means its
    ``*.yaml`` files except ``*.test.yaml``. Rule names must be unique across all of them."""
    files: list[tuple[Path, str]] = []
    if include_default:
        files.append((DEFAULT_PACK, "default"))
    for p in paths:
        path = Path(p)
        if path.is_dir():
            files.extend(
                (f, str(f)) for f in sorted(path.glob("*.yaml")) + sorted(path.glob("*.yml")) if not f.name.endswith((".test.yaml", ".test.yml"))
            )
        else:
            files.append((path, str(p)))
    rules: list[Rule] = []
    where: dict[str, tuple[str, int]] = {}
    for path, source in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise RuleError(f"cannot read rule file: {getattr(exc, 'strerror', None) or exc}", path=source) from None
        pack_rules, positions = _load_pack(text, source)
        for rule in pack_rules:
            if rule.name in where:
                first_source, first_line = where[rule.name]
                y = positions[rule.name]
                raise RuleError(
                    f"duplicate rule name (first defined at {first_source}:{first_line})",
                    path=source,
                    rule=rule.name,
                    line=y.line,
                    column=y.column,
                )
            where[rule.name] = (source, positions[rule.name].line)
            rules.append(rule)
    return rules


# -- evaluation ------------------------------------------------------------------------------


class _Cached:
    """One fetch per metric per evaluation (the rule's widest window, sliced for narrower ones),
    and each window call computed once however often the rule's expressions repeat it."""

    __slots__ = ("ctx", "windows", "cache", "memo", "step", "config", "pair_cache")

    def __init__(self, ctx: EvalContext, windows: dict[str, int]) -> None:
        self.ctx = ctx
        self.windows = windows
        # a context may share these between the rules it is evaluated with (the engine's: one per step)
        cache, memo = getattr(ctx, "cache", None), getattr(ctx, "memo", None)
        self.cache: dict[str, tuple[int, list]] = cache if cache is not None else {}
        self.memo: dict[tuple, float | bool | None] = memo if memo is not None else {}  # window calls already computed
        self.step = ctx.step
        self.config = ctx.config
        self.pair_cache = getattr(ctx, "pair_cache", None)

    def points(self, metric: str, n: int) -> list[tuple[int, float | None]]:
        hit = self.cache.get(metric)
        if hit is None or (n > hit[0] and len(hit[1]) >= hit[0]):
            want = max(n, self.windows.get(metric, n))
            hit = (want, list(self.ctx.points(metric, want)))
            self.cache[metric] = hit
        pts = hit[1]
        return pts[-n:] if len(pts) > n else pts

    def seconds_since_report(self) -> float | None:
        return self.ctx.seconds_since_report()

    def steps_since_resume(self) -> int | None:
        return self.ctx.steps_since_resume()

    def report_interval(self) -> float | None:
        method = getattr(self.ctx, "report_interval", None)
        return method() if callable(method) else None

    def longest_pause(self) -> float | None:
        method = getattr(self.ctx, "longest_pause", None)
        return method() if callable(method) else None

    def longest_pause_outside_evals(self) -> float | None:
        method = getattr(self.ctx, "longest_pause_outside_evals", None)
        return method() if callable(method) else None

    def heartbeat_age(self) -> float | None:
        method = getattr(self.ctx, "heartbeat_age", None)
        return method() if callable(method) else None


def _json_value(v: float | bool | None) -> float | bool | None:
    if v is None or isinstance(v, bool):
        return v
    return float(f"{v:.6g}")


def _evidence(e: Expr, ctx: _Cached) -> dict | None:
    v = e.evaluate(ctx)
    if v is None:
        return None
    item: dict[str, Any] = {"expr": e.source}
    if len(e.metrics) == 1:
        (metric,) = e.metrics
        item["metric"] = metric
        call = e.window_call
        window = call[1] if call else e.windows[metric]
        item["window"] = window
        pts = ctx.points(metric, window)
        if pts:
            item["steps"] = [pts[0][0], pts[-1][0]]
    item["value"] = _json_value(v)
    return item


def active_many(rule: Rule, ctxs: Sequence[EvalContext]) -> list[bool]:
    """For each context, whether ``evaluate(rule, ctx)`` would be active, from the condition alone (no headline,
    causes or evidence): the engine's first pass over the steps of a batch, where most rules are quiet."""
    values = rule.condition.evaluate_many(ctxs)
    return [bool(v) and not _held_back(rule, ctx) for v, ctx in zip(values, ctxs)]  # unknown (None) is inactive


def _held_back(rule: Rule, ctx: EvalContext) -> bool:
    """Within ``hold_after_resume`` steps of a resume: the rule stays inactive."""
    if not rule.hold_after_resume:
        return False
    since = ctx.steps_since_resume()
    return since is not None and since < rule.hold_after_resume


def _headline(rule: Rule, ctx: EvalContext) -> float | None:
    """The alert's value: the rule's ``values.value`` when it sets one, else the left side of the condition's
    first comparison."""
    e = rule.values.get("value")
    if e is None:
        return rule.condition.headline(ctx)
    v = e.evaluate(ctx)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def evaluate(rule: Rule, ctx: EvalContext) -> Evaluation | None:
    """Evaluate ``rule`` at ``ctx.step``. None = inactive: within ``hold_after_resume`` steps of a
    resume, or the condition is unknown (a metric it needs has no data). Causes, evidence and the
    summary are computed only when the condition holds."""
    if _held_back(rule, ctx):
        return None
    cctx = _Cached(ctx, rule.windows)
    holds = rule.condition.evaluate(cctx)
    if holds is None:
        return None
    value = _headline(rule, cctx)
    if not holds:
        return Evaluation(active=False, value=value, summary="", causes=[])
    named: dict[str, Any] = {name: e.evaluate(cctx) for name, e in rule.values.items()}
    named.update(value=value, step=ctx.step, rule=rule.name)
    causes: list[RankedCause] = []
    for spec in rule.causes:
        s = spec.score.evaluate(cctx)
        score = 0.0 if s is None else float(s)
        if not math.isfinite(score):
            score = 0.0
        evidence = [item for item in (_evidence(e, cctx) for e in spec.evidence) if item is not None]
        causes.append(RankedCause(id=spec.id, score=round(score, 6), evidence=evidence, advice=render(spec.advice, named)))
    causes.sort(key=lambda c: -c.score)  # stable: ties keep the pack's order
    return Evaluation(active=True, value=value, summary=render(rule.summary, named), causes=causes)
