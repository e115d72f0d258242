"""Prometheus inputs: the Pushgateway's URL grouping key and the text exposition format.

Stored names: a sample is stored under its metric name, followed by its
labels (other than the ones that pick the run) in Prometheus's own notation,
sorted by label name: ``pass_at_k{k="8"}``, ``latency_seconds_bucket{le="0.5"}``
(see ``ingest.names.labelled_name``). Counters, histograms and summaries are
stored as the samples the exposition carries (``_total``, ``_bucket``,
``_sum``, ``_count``, quantiles); the ``_created`` timestamps that
prometheus_client adds to them are metadata, not measurements, and are left out.

A label with an empty value is the same as no label, as in Prometheus: it is
never part of a stored name (``entropy{rank=""}`` is ``entropy``).

This module knows nothing of HTTP or the store: errors are ``PromInputError``
with a message that says what was wrong and where.
"""

from __future__ import annotations

import base64
import math
import re
from dataclasses import dataclass
from urllib.parse import unquote

from parallax.ingest.names import MAX_NAME_LENGTH, is_valid_name, labelled_name

#: Labels that pick the run (with ``job``); never part of a stored name.
RUN_LABEL = "run"
PROJECT_LABEL = "project"
#: Gauges whose value is the step of the other samples (``step`` first).
STEP_NAMES = ("step", "global_step")
#: Labels left out of stored names by default: the target labels Prometheus adds to every series.
DEFAULT_IGNORED_LABELS = ("job", "instance")
#: Sample timestamps past this are refused: the same bound (10^11 s) as a JSON point's time.
MAX_TIMESTAMP_MS = 10**14
#: The gauge a trainer sets to 1 when it is done: its run is marked finished (0 again: running).
FINISHED_GAUGE = "parallax_run_finished"
#: Series Prometheus itself writes for every scrape (about the scrape, not the trainer): never a run's data.
SCRAPE_SERIES = frozenset((
    "up", "scrape_duration_seconds", "scrape_samples_scraped", "scrape_samples_post_metric_relabeling",
    "scrape_series_added", "scrape_timeout_seconds", "scrape_sample_limit", "scrape_body_size_bytes",
))
#: Names Parallax's own /metrics exposes start so (``parallax_metric{run=...}``, ...): scraped back, they are
#: never a run's data, whatever the relabelling. ``FINISHED_GAUGE`` is the trainer's, not Parallax's.
OWN_PREFIX = "parallax_"


def is_own_series(name: str) -> bool:
    """Whether a metric name is one of Parallax's own exposition (never stored as a run's data)."""
    return name.startswith(OWN_PREFIX) and name != FINISHED_GAUGE

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_SAMPLE_HEAD = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)[ \t]*")
_LABEL = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\\n]|\\.)*)"[ \t]*')
_ESCAPE = re.compile(r"\\(.)")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}
_CREATED_TYPES = frozenset(("counter", "histogram", "summary", "gaugehistogram"))
_TYPES = frozenset(("counter", "gauge", "histogram", "summary", "untyped", "unknown", "gaugehistogram", "info", "stateset"))


class PromInputError(ValueError):
    """What was wrong with a Prometheus input (a 400)."""


# -- the grouping key in the URL -------------------------------------------------------------


_ESCAPE_OK = re.compile(r"%[0-9A-Fa-f]{2}")
_B64URL = re.compile(r"[A-Za-z0-9_-]*")


def parse_grouping_path(raw_path: str) -> dict[str, str]:
    """``job/<job>{/<label>/<value>}`` (the part after ``/metrics/``, as sent) as a dict, read as the Pushgateway
    (1.5) reads it.

    The path is percent-decoded first, then split at ``/`` (so ``%2F`` splits too: a value holding ``/`` goes
    as ``<label>@base64/<value>``, as prometheus_client sends it). ``@base64`` values are base64url, padding
    optional (``=`` alone is the empty value). A label given twice keeps its last value; ``job`` is the path's
    first. Labels with an empty value are left out, as Prometheus leaves them out of a series.
    """
    if "%" in raw_path and len(_ESCAPE_OK.findall(raw_path)) != raw_path.count("%"):
        raise PromInputError("the path has an invalid percent-escape (% must be followed by two hex digits)")
    try:
        path = unquote(raw_path, errors="strict")
    except UnicodeDecodeError:
        raise PromInputError("the path is not valid UTF-8 once percent-decoded") from None
    head, _, labels = path.partition("/")
    job, sep, labels = labels.partition("/")
    if head not in ("job", "job@base64"):
        raise PromInputError(f"the path must start with /metrics/job/<job>, not /metrics/{head}")
    if not path.startswith(head + "/"):
        raise PromInputError("the path must be /metrics/job/<job>{/<label>/<value>}: the job is missing")
    if head == "job@base64":
        job = _b64(job, "job")
    if not job:
        raise PromInputError("the job name must not be empty")
    key: dict[str, str] = {}
    parts = labels.split("/") if sep and labels else []
    if len(parts) % 2:
        raise PromInputError(
            f"the path must be /metrics/job/<job>{{/<label>/<value>}}: odd number of components in {('/' + labels)!r}"
            " (a label has no value; a value holding '/' goes base64url-encoded as <label>@base64/<value>)"
        )
    for i in range(0, len(parts), 2):
        name, value = parts[i], parts[i + 1]
        if name.endswith("@base64"):
            name = name[: -len("@base64")]
            value = _b64(value, name)
        if not _LABEL_NAME.fullmatch(name) or name.startswith("__"):
            raise PromInputError(
                f"invalid grouping label name {name!r}: letters, digits and _, not starting with a digit or __"
            )
        key[name] = value
    key["job"] = job
    return {k: v for k, v in key.items() if v != ""}


def _b64(value: str, label: str) -> str:
    """A base64url grouping value, decoded as the Pushgateway does (trailing ``=`` dropped, then unpadded)."""
    raw = value.rstrip("=")
    if not _B64URL.fullmatch(raw) or len(raw) % 4 == 1:
        raise PromInputError(f"the value of grouping label {label!r} is not valid base64url: {_shown(value, 60)}")
    decoded = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))
    try:
        return decoded.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PromInputError(
            f"the value of grouping label {label!r} is not valid UTF-8 once base64-decoded (byte {exc.start})"
        ) from None


# -- the text exposition format ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PromSample:
    name: str  # the sample's metric name (reqs_total, lat_bucket, ...)
    labels: dict[str, str]
    value: float
    timestamp_ms: int | None
    line: int


def decode_text(body: bytes) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = body.count(b"\n", 0, exc.start) + 1
        raise PromInputError(
            f"the body is not valid UTF-8: byte 0x{body[exc.start]:02x} at offset {exc.start} (line {line})"
        ) from None


def parse_text(text: str) -> list[PromSample]:
    """Samples of a text-format (0.0.4, or OpenMetrics 1.0) exposition, strictly: any malformed line is an error naming it."""
    samples: list[PromSample] = []
    created_of: set[str] = set()  # families whose _created samples are left out
    for lineno, line in enumerate(text.split("\n"), start=1):
        line = line.rstrip("\r")
        stripped = line.strip(" \t")
        if not stripped:
            continue
        if stripped[0] == "#":
            _comment(stripped, lineno, created_of)
            continue
        sample = _sample(line, lineno)
        if sample.name.endswith("_created") and sample.name[: -len("_created")] in created_of:
            continue
        samples.append(sample)
    return samples


def _comment(line: str, lineno: int, created_of: set[str]) -> None:
    parts = line[1:].split(None, 3)
    if len(parts) >= 2 and parts[0] == "TYPE":
        if len(parts) != 3:
            raise PromInputError(f"line {lineno}: a TYPE line is '# TYPE <metric name> <type>'")
        name, kind = parts[1], parts[2]
        if not _METRIC_NAME.fullmatch(name):
            raise PromInputError(f"line {lineno}: invalid metric name {name!r} in TYPE line")
        if kind not in _TYPES:
            raise PromInputError(f"line {lineno}: unknown metric type {kind!r}")
        if kind in _CREATED_TYPES:
            created_of.add(name)
            if name.endswith("_total"):
                created_of.add(name[: -len("_total")])
    elif len(parts) >= 2 and parts[0] == "HELP" and not _METRIC_NAME.fullmatch(parts[1]):
        raise PromInputError(f"line {lineno}: invalid metric name {parts[1]!r} in HELP line")


def _sample(line: str, lineno: int) -> PromSample:
    start = len(line) - len(line.lstrip(" \t"))
    m = _SAMPLE_HEAD.match(line, start)
    if m is None:
        raise PromInputError(f"line {lineno}: expected a metric name at column {start + 1}: {_shown(line)}")
    name = m.group(1)
    pos = m.end()
    if pos == m.end(1) and pos < len(line) and line[pos] != "{":
        raise PromInputError(
            f"line {lineno}: invalid character {line[pos]!r} in metric name {name!r}: "
            f"a metric name is ASCII letters, digits, _ and : (not starting with a digit): {_shown(line)}"
        )
    labels: dict[str, str] = {}
    if pos < len(line) and line[pos] == "{":
        pos += 1
        while True:
            if pos < len(line) and line[pos] == "}":
                pos += 1
                break
            lm = _LABEL.match(line, pos)
            if lm is None:
                raise PromInputError(f"line {lineno}: malformed label at column {pos + 1} (expected name=\"value\"): {_shown(line)}")
            lname = lm.group(1)
            if lname in labels:
                raise PromInputError(f"line {lineno}: label {lname!r} given twice")
            labels[lname] = _unescape(lm.group(2), lineno)
            pos = lm.end()
            if pos < len(line) and line[pos] == ",":
                pos += 1
            elif pos >= len(line) or line[pos] != "}":
                raise PromInputError(f"line {lineno}: expected ',' or '}}' at column {pos + 1}: {_shown(line)}")
    rest = line[pos:].split()
    if not rest or len(rest) > 2:
        raise PromInputError(
            f"line {lineno}: expected '<value> [timestamp]' after the metric {'name' if not labels else 'labels'}: {_shown(line)}"
        )
    value = _float(rest[0], lineno)
    ts = None
    if len(rest) == 2:
        try:
            ts = int(rest[1])
        except ValueError:
            raise PromInputError(f"line {lineno}: the timestamp must be an integer in milliseconds, not {rest[1]!r}") from None
        if not 0 <= ts < MAX_TIMESTAMP_MS:
            raise PromInputError(f"line {lineno}: the timestamp must be Unix milliseconds from 0 to {MAX_TIMESTAMP_MS - 1}, not {_shown(rest[1], 40)}")
    return PromSample(name, labels, value, ts, lineno)


def _unescape(raw: str, lineno: int) -> str:
    if "\\" not in raw:
        return raw

    def one(m: re.Match) -> str:
        c = m.group(1)
        if c not in _ESCAPES:
            raise PromInputError(f"line {lineno}: unknown escape '\\{c}' in a label value (only \\\\, \\\" and \\n)")
        return _ESCAPES[c]

    return _ESCAPE.sub(one, raw)


_SPECIAL = {"nan": math.nan, "+inf": math.inf, "inf": math.inf, "-inf": -math.inf}


def _float(token: str, lineno: int) -> float:
    special = _SPECIAL.get(token.lower())
    if special is not None:
        return special
    if "_" not in token:
        try:
            return float(token)
        except ValueError:
            pass
    raise PromInputError(f"line {lineno}: {token!r} is not a number")


def _shown(line: str, limit: int = 120) -> str:
    return repr(line if len(line) <= limit else line[:limit] + "...")


# -- names ---------------------------------------------------------------------------------------


def stored_name(name: str, labels: dict[str, str], where: str) -> str:
    """``name{labels}`` as stored (labels with an empty value left out), or PromInputError if it breaks the name
    rule (too long, or a name Parallax cannot store)."""
    if labels and "" in labels.values():
        labels = {k: v for k, v in labels.items() if v != ""}
    full = labelled_name(name, labels)
    if len(full) > MAX_NAME_LENGTH:
        raise PromInputError(f"{where}: the stored name {full[:60]!r}... is longer than {MAX_NAME_LENGTH} characters")
    if not is_valid_name(full):
        raise PromInputError(f"{where}: {full!r} is not a name Parallax can store (label values may not hold control characters)")
    return full


def step_value(value: float, where: str) -> int:
    """The step a ``step`` gauge gives, or PromInputError."""
    if not math.isfinite(value) or value < 0 or value != int(value) or value >= 2**63:
        raise PromInputError(f"{where}: the step must be a non-negative integer, not {value!r}")
    return int(value)


# -- labelled canonical indicators ------------------------------------------------------------------


def canonical_copies(groups: dict[str, list], k: int) -> int:
    """Feed the canonical pass@k panels from labelled samples, in place: ``pass_at_k{k="<k>"}`` (the run's k) is
    also stored as ``pass_at_k``, and ``pass_at_k{k="1"}`` as ``pass_at_1``, as ``ingest.aliases`` does for a
    framework's ``pass@<k>`` keys. The labelled name stays; a canonical name the batch already carries is never
    overwritten. Returns the points added."""
    added = 0
    for target, wanted in (("pass_at_k", str(k)), ("pass_at_1", "1")):
        source = labelled_name("pass_at_k", {"k": wanted})
        samples = groups.get(source)
        if samples and target not in groups:
            groups[target] = samples  # shared, not copied: the store only reads it
            added += len(samples)
    return added
