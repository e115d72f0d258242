"""Read metric logs from files: CSV (a W&B export, or `parallax export`), JSONL, TensorBoard event files.

Each reader yields ``Record``s (a step, its metrics, a wall time when the file
has one) and counts what it had to leave out in a ``Tally``, so an import can
say what it skipped instead of failing on the first odd cell. Keys are turned
into metric names by ``NameMap``: a key that breaks the name rule
(``ingest.names``) is cleaned (each run of other characters becomes ``_``)
rather than dropped; the aliases are applied by the server on ingest, not here.
"""

from __future__ import annotations

import csv
import heapq
import json
import math
import re
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from typing import Any, Callable, Iterator

from parallax.ingest.names import MAX_NAME_LENGTH, is_valid_name

MAX_STEP = 2**63 - 1
MAX_EXAMPLES = 10
#: Column (CSV) or field (JSONL) holding the step, in order of preference: W&B writes `Step` or `_step`.
STEP_KEYS = ("step", "Step", "_step", "global_step")
#: Unix seconds of the point, when present.
TIME_KEYS = ("time", "_timestamp")
#: W&B chart exports add a downsampled min/max envelope beside each metric.
ENVELOPE_SUFFIXES = ("__MIN", "__MAX")

#: A text cell starting with one of these is a formula to a spreadsheet (OWASP's CSV injection list).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_text(cell: str) -> str:
    """A text cell for a CSV a spreadsheet may open: one that would start a formula gets a leading single quote
    (OWASP's advice), so a metric named ``-A1`` or ``@SUM`` is shown, never evaluated. Numbers are not text cells:
    a negative value stays a number. ``read_csv`` takes the quote off again."""
    return "'" + cell if cell.startswith(FORMULA_STARTS) else cell


def _unquoted(cell: str) -> str:
    """A header cell of a CSV that ``spreadsheet_text`` wrote, as it was (a metric name never starts with ')."""
    return cell[1:] if cell.startswith("'") and cell[1:].startswith(FORMULA_STARTS) else cell
TENSORBOARD_HINT = "pip install 'rl-parallax[tensorboard]'"

Progress = Callable[[int], None]  # bytes read since the last call


class FileError(Exception):
    """The file cannot be imported at all (missing, no step column, a library missing)."""


@dataclass(slots=True)
class Record:
    step: int
    metrics: dict[str, float]
    time: float | None = None


@dataclass
class Tally:
    """What a reader left out, for the import's summary."""

    empty: int = 0  # empty cells: normal in a wide W&B export, not an error
    non_numeric: int = 0
    bad_names: int = 0
    bad_lines: int = 0
    bad_line_examples: list[str] = field(default_factory=list)
    renamed: dict[str, str] = field(default_factory=dict)
    ignored_columns: list[str] = field(default_factory=list)
    non_scalar_tags: set[str] = field(default_factory=set)

    @property
    def skipped(self) -> int:
        return self.non_numeric + self.bad_names

    def bad_line(self, where: str, why: str) -> None:
        self.bad_lines += 1
        if len(self.bad_line_examples) < MAX_EXAMPLES:
            self.bad_line_examples.append(f"{where}: {why}")


_NAME_CHARS = re.compile(r"[^A-Za-z0-9_:./@-]+")


class NameMap:
    """Key → metric name, once per key: valid names as they are, others cleaned; collisions and empties skipped."""

    def __init__(self, tally: Tally):
        self.tally = tally
        self._names: dict[str, str | None] = {}
        self._owner: dict[str, str] = {}  # metric name → the key that took it

    def __call__(self, key: str) -> str | None:
        try:
            return self._names[key]
        except KeyError:
            pass
        name: str | None = key if is_valid_name(key) else _NAME_CHARS.sub("_", key).strip("_")
        if not name or len(name) > MAX_NAME_LENGTH or self._owner.setdefault(name, key) != key:
            name = None  # nothing left, too long, or another key already maps there
        elif name != key:
            self.tally.renamed[key] = name
        self._names[key] = name
        return name


def number(v: Any) -> float | None:
    """A JSON value as a float (NaN and infinities kept), None when it is not a number."""
    if type(v) is float:
        return v
    if type(v) is int:
        try:
            return float(v)
        except OverflowError:
            return math.inf if v > 0 else -math.inf
    return None


def parse_step(v: Any) -> int | None:
    """A non-negative integer step; integral floats (pandas writes ``12.0``) count too."""
    if isinstance(v, str):
        v = v.strip()
        try:
            v = int(v)
        except ValueError:
            try:
                v = float(v)
            except ValueError:
                return None
    if type(v) is float and v.is_integer():
        v = int(v)
    if type(v) is not int or not 0 <= v <= MAX_STEP:
        return None
    return v


def parse_time(v: Any) -> float | None:
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            return None
    if type(v) not in (int, float) or not 0 <= v < 1e11:
        return None
    return float(v)


def _open_text(path: Path) -> Any:
    if not path.is_file():
        raise FileError(f"{path}: no such file")
    return path.open("r", encoding="utf-8-sig", newline="")


# -- CSV ------------------------------------------------------------------


def read_csv(path: Path, tally: Tally, progress: Progress | None = None) -> Iterator[Record]:
    """A wide CSV: a step column (`step`, `Step`, `_step` or `global_step`) and one column per metric.

    Empty cells are skipped, as are cells that are not numbers. W&B's own
    columns (`_runtime`, `_wandb...`, any other leading `_`) and chart
    envelopes (`X__MIN`, `X__MAX`) are left out; `_timestamp` or `time`
    becomes the point's time. A chart export's `<run> - ` prefix, when every
    metric column has the same one, is removed.
    """
    f = _open_text(path)  # the header is checked now, before anything is sent; the rows are read lazily
    try:
        reader = csv.reader(f)
        try:
            header = next(reader)
        except StopIteration:
            raise FileError(f"{path}: empty file") from None
        except csv.Error as exc:
            raise FileError(f"{path}: not a CSV file ({exc})") from None
        step_col = next((header.index(k) for k in STEP_KEYS if k in header), None)
        if step_col is None:
            raise FileError(
                f"{path}: no step column: expected one of {', '.join(STEP_KEYS)} in the header, found {', '.join(header[:8]) or 'nothing'}"
            )
        time_col = next((header.index(k) for k in TIME_KEYS if k in header), None)
        columns: list[tuple[int, str]] = []
        header = [_unquoted(key) for key in header]
        for i, key in enumerate(header):
            if i in (step_col, time_col):
                continue
            if key.startswith("_") or key.endswith(ENVELOPE_SUFFIXES) or not key.strip():
                tally.ignored_columns.append(key)
                continue
            columns.append((i, key))
        columns = _strip_run_prefix(columns)
        names = NameMap(tally)
        metric_cols = []
        for i, key in columns:
            name = names(key)
            if name is None:
                tally.bad_names += 1  # counted once per column, not per cell
                continue
            metric_cols.append((i, name))
    except BaseException:
        f.close()
        raise
    return _csv_records(f, reader, step_col, time_col, metric_cols, tally, progress)


def _csv_records(
    f: Any, reader: Any, step_col: int, time_col: int | None, metric_cols: list[tuple[int, str]], tally: Tally, progress: Progress | None
) -> Iterator[Record]:
    with f:
        for row in _rows(reader, tally):
            if progress is not None:
                progress(sum(len(c) for c in row) + len(row))  # about the line's length
            lineno = reader.line_num
            step = parse_step(row[step_col]) if step_col < len(row) else None
            if step is None:
                cell = row[step_col] if step_col < len(row) else ""
                tally.bad_line(f"line {lineno}", f"step {cell!r} is not a non-negative integer")
                continue
            metrics: dict[str, float] = {}
            for i, name in metric_cols:
                cell = row[i].strip() if i < len(row) else ""
                if not cell:
                    tally.empty += 1
                    continue
                try:
                    metrics[name] = float(cell)
                except ValueError:
                    tally.non_numeric += 1
            t = parse_time(row[time_col]) if time_col is not None and time_col < len(row) else None
            if metrics:
                yield Record(step, metrics, t)


def _rows(reader: Any, tally: Tally) -> Iterator[list[str]]:
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            tally.bad_line(f"line {reader.line_num}", str(exc))
            continue
        if row:
            yield row


def _strip_run_prefix(columns: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """``run-a - train/loss`` → ``train/loss`` when every metric column starts with the same ``<run> - ``."""
    prefixes = {key.partition(" - ")[0] for _, key in columns if " - " in key}
    if len(prefixes) != 1 or not all(" - " in key for _, key in columns):
        return columns
    return [(i, key.partition(" - ")[2]) for i, key in columns]


# -- JSONL ----------------------------------------------------------------


def read_jsonl(path: Path, tally: Tally, progress: Progress | None = None) -> Iterator[Record]:
    """One JSON object per line: ``{"step": N, "loss": 1.2, ...}`` or ``{"step": N, "metrics": {...}, "time": T}``.

    Nested objects are flattened with ``/`` (``{"train": {"loss": 1}}`` is
    ``train/loss``); fields with a leading ``_`` other than ``_step`` and
    ``_timestamp`` (W&B's bookkeeping) are left out. ``NaN`` and ``Infinity``
    are read as Python's json writes them. A line that is not an object with
    a step is reported by number and skipped.
    """
    return _jsonl_records(_open_text(path), tally, progress)


def _jsonl_records(f: Any, tally: Tally, progress: Progress | None) -> Iterator[Record]:
    names = NameMap(tally)
    with f:
        for lineno, line in enumerate(f, start=1):
            if progress is not None:
                progress(len(line))
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
            except (json.JSONDecodeError, RecursionError) as exc:
                tally.bad_line(f"line {lineno}", f"not JSON ({exc.msg if isinstance(exc, json.JSONDecodeError) else 'nested too deeply'})")
                continue
            if type(doc) is not dict:
                tally.bad_line(f"line {lineno}", "not a JSON object")
                continue
            key = next((k for k in STEP_KEYS if k in doc), None)
            step = parse_step(doc[key]) if key is not None and not isinstance(doc[key], str) else None
            if step is None:
                why = "no step field" if key is None else f"step {doc[key]!r} is not a non-negative integer"
                tally.bad_line(f"line {lineno}", why)
                continue
            tkey = next((k for k in TIME_KEYS if k in doc), None)
            t = parse_time(doc[tkey]) if tkey is not None else None
            if type(doc.get("metrics")) is dict:
                source = doc["metrics"]
            else:
                source = {k: v for k, v in doc.items() if k not in (key, tkey) and not k.startswith("_")}
            metrics: dict[str, float] = {}
            for raw, v in _flatten(source):
                value = number(v)
                if value is None:
                    tally.non_numeric += 1
                    continue
                name = names(raw)
                if name is None:
                    tally.bad_names += 1
                    continue
                metrics[name] = value
            if metrics:
                yield Record(step, metrics, t)


def _flatten(doc: dict, prefix: str = "") -> Iterator[tuple[str, Any]]:
    for k, v in doc.items():
        if type(v) is dict:
            yield from _flatten(v, f"{prefix}{k}/")
        else:
            yield f"{prefix}{k}", v


# -- TensorBoard ------------------------------------------------------------


def event_files(root: Path) -> dict[Path, list[Path]]:
    """Event files under ``root`` (or ``root`` itself), grouped by their directory, in name (= creation) order."""
    if root.is_file():
        return {Path("."): [root]}
    if not root.is_dir():
        raise FileError(f"{root}: no such directory")
    found: dict[Path, list[Path]] = {}
    for f in sorted(root.rglob("events.out.tfevents.*")):
        if f.is_file():
            found.setdefault(f.parent.relative_to(root), []).append(f)
    if not found:
        raise FileError(f"{root}: no TensorBoard event files (events.out.tfevents.*) in it or below it")
    return found


def _event_loader() -> Any:
    try:
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
        from tensorboard.util.tensor_util import make_ndarray
    except ImportError:
        raise FileError(f"reading TensorBoard event files needs the tensorboard package: {TENSORBOARD_HINT}") from None
    return EventFileLoader, make_ndarray


def read_tensorboard(root: Path, tally: Tally, progress: Progress | None = None) -> Iterator[Record]:
    """Scalars of every event file under ``root``, as TensorBoard shows them.

    TensorBoard calls each directory holding event files a run. When all the
    files sit in one directory, tags are used as they are; when several
    directories hold them (``train/`` and ``eval/`` beside each other), each
    tag is prefixed with its directory relative to ``root``
    (``eval/accuracy``), so the same tag logged by two of them stays two
    metrics. Both TF1/tensorboardX ``simple_value`` scalars and TF2 tensor
    scalars are read (TensorBoard's loader turns the former into the latter).
    Histograms, images and text are left out.
    """
    loader, make_ndarray = _event_loader()  # both checked now, before anything is sent
    return _tensorboard_records(event_files(root), loader, make_ndarray, tally, progress)


def _tensorboard_records(
    groups: dict[Path, list[Path]], loader: Any, make_ndarray: Callable, tally: Tally, progress: Progress | None
) -> Iterator[Record]:
    """Every file's records merged by step (one record per step): ``train/`` and ``eval/`` side by side reach the
    server step by step, so rules reading both (held-out vs train reward) judge each step with both."""
    prefixed = len(groups) > 1
    names = NameMap(tally)

    def one_file(path: Path, prefix: str) -> Iterator[Record]:
        try:
            for event in loader(str(path)).Load():
                if not event.HasField("summary"):
                    continue
                metrics: dict[str, float] = {}
                for v in event.summary.value:
                    value = _scalar(v, make_ndarray)
                    if value is None:
                        tally.non_scalar_tags.add(prefix + v.tag)
                        continue
                    name = names(prefix + v.tag)
                    if name is None:
                        tally.bad_names += 1
                        continue
                    metrics[name] = value
                if metrics and event.step >= 0:
                    yield Record(int(event.step), metrics, parse_time(event.wall_time))
        except Exception as exc:  # a truncated or corrupt file: keep what was read, say so
            tally.bad_line(str(path), f"unreadable event file ({type(exc).__name__}: {exc})")
        if progress is not None:
            progress(path.stat().st_size)

    streams = []
    for directory, files in groups.items():
        prefix = "" if not prefixed or directory == Path(".") else directory.as_posix() + "/"
        streams += [one_file(path, prefix) for path in files]
    # Each file is in step order (a restarted run's files each are); equal steps keep the files' order, so a
    # later file's value of a metric wins, as the server's upsert would have it.
    for step, group in groupby(heapq.merge(*streams, key=lambda r: r.step), key=lambda r: r.step):
        first = next(group)
        metrics, t = first.metrics, first.time
        for rec in group:
            metrics = {**metrics, **rec.metrics}
            t = rec.time if t is None or (rec.time is not None and rec.time > t) else t
        yield Record(step, metrics, t)


def _scalar(v: Any, make_ndarray: Callable) -> float | None:
    kind = v.WhichOneof("value")
    if kind == "simple_value":
        return float(v.simple_value)
    if kind != "tensor" or v.metadata.plugin_data.plugin_name != "scalars":
        return None
    array = make_ndarray(v.tensor)
    if array.size != 1 or array.dtype.kind not in "fiub":
        return None
    return float(array.reshape(()).item())
