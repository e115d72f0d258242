"""`parallax import` and `parallax export`: move metric logs between files and a running server over HTTP.

Like ``wandb sync``, an import goes through the server's API, so the server
applies the aliases, the rules and its (run, metric, step) upsert: importing
the same file twice stores every point once. Unlike the trainer-side
``ParallaxClient`` (fire and forget), this is a plain synchronous loop that
stops with a clear message on the first error it cannot retry.
"""

from __future__ import annotations

import csv
import heapq
import json
import math
import sys
import time
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, TextIO

import httpx

from parallax.ingest.files import Record, Tally, spreadsheet_text

#: Values per request: well under the server's body limit, big enough to amortise a request.
BATCH_VALUES = 5_000
RETRIES = 3
RETRY_STATUSES = frozenset((429, 502, 503, 504))
NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class TransferError(Exception):
    """The import or export cannot go on; the message says why and what to do."""


class Api:
    """The few API calls an import or export makes, with errors turned into TransferError."""

    def __init__(self, url: str, token: str | None = None, timeout: float = 60.0):
        self.url = url.rstrip("/")
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> "Api":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        for attempt in range(RETRIES + 1):
            try:
                r = self.http.request(method, path, **kwargs)
            except httpx.ConnectError as exc:
                raise TransferError(
                    f"cannot reach Parallax at {self.url} ({exc}); is `parallax serve` running? "
                    "Pass --url or set PARALLAX_URL"
                ) from None
            except httpx.TransportError as exc:
                if attempt == RETRIES:
                    raise TransferError(f"{method} {self.url}{path} failed: {type(exc).__name__}: {exc}") from None
            else:
                if r.status_code not in RETRY_STATUSES or attempt == RETRIES:
                    break
            time.sleep(0.5 * 2**attempt)
        if r.status_code in (401, 403):
            raise TransferError(
                f"{self.url} refused the request ({r.status_code}): pass the server's token with --token or PARALLAX_TOKEN"
            )
        if r.status_code >= 400:
            raise TransferError(f"{method} {path}: HTTP {r.status_code}: {_detail(r)}")
        try:
            return r.json()
        except ValueError:
            raise TransferError(f"{self.url} answered {method} {path} with something other than JSON: is it a Parallax server?") from None

    def ensure_run(self, project: str, name: str, config: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", "/api/v1/runs", json={"project": project, "name": name, "config": config})

    def send_points(self, run_id: int, points: list[dict[str, Any]]) -> dict[str, int]:
        # The standard library writes NaN/Infinity as the API accepts them (orjson would write null).
        body = json.dumps({"points": points}, separators=(",", ":")).encode()
        return self.request(
            "POST", f"/api/v1/runs/{run_id}/metrics", content=body, headers={"content-type": "application/json"}
        )

    def find_run(self, ref: str) -> dict[str, Any]:
        """A run by id, or by ``project/name`` (either may itself contain ``/``)."""
        if ref.isdigit():
            return self.request("GET", f"/api/v1/runs/{int(ref)}")
        splits = [i for i, c in enumerate(ref) if c == "/"]
        for i in splits:
            project, name = ref[:i], ref[i + 1 :]
            for run in self.request("GET", "/api/v1/runs", params={"project": project})["runs"]:
                if run["name"] == name:
                    return run
        if not splits:
            raise TransferError(f"run {ref!r}: give a run id or project/name")
        raise TransferError(f"no run {ref!r} on {self.url}")

    def metric_names(self, run_id: int) -> list[str]:
        return [m["name"] for m in self.request("GET", f"/api/v1/runs/{run_id}/metrics")["metrics"]]

    def points(self, run_id: int, metric: str, page: int) -> Iterator[tuple[int, float, float]]:
        """(step, value, time) of every point of one metric, in step order; NaN and infinities as floats."""
        cursor = None
        while True:
            params: dict[str, Any] = {"metric": metric, "limit": page}
            if cursor is not None:
                params["cursor"] = cursor
            doc = self.request("GET", f"/api/v1/runs/{run_id}/points", params=params)
            for p in doc["points"]:
                value = p["value"] if p["value"] is not None else NONFINITE[p["non_finite"]]
                yield p["step"], value, p["time"]
            cursor = doc["next_cursor"]
            if cursor is None:
                return


def _detail(r: httpx.Response) -> str:
    try:
        doc = r.json()
    except ValueError:
        doc = r.text
    detail = doc.get("detail", doc) if isinstance(doc, dict) else doc
    text = detail if isinstance(detail, str) else json.dumps(detail)
    return text[:500]


# -- import -------------------------------------------------------------------


@dataclass
class ImportResult:
    run: dict[str, Any]
    sent: int = 0  # values sent
    stored: int = 0  # the server's `accepted` (alias copies not included)
    replaced: int = 0
    non_finite: int = 0
    aliased: int = 0
    requests: int = 0
    steps: tuple[int, int] | None = None


def upload(
    api: Api,
    records: Iterable[Record],
    *,
    project: str,
    run: str,
    config: dict[str, Any] | None = None,
    batch_values: int = BATCH_VALUES,
    on_batch: Callable[[ImportResult], None] | None = None,
) -> ImportResult:
    """Create (or find) the run and send the records in batches of at most ``batch_values`` values."""
    found = api.ensure_run(project, run, config or {})
    result = ImportResult(run=found)
    points: list[dict[str, Any]] = []
    values = 0
    lo = hi = None

    def flush() -> None:
        nonlocal points, values
        if not points:
            return
        counts = api.send_points(found["id"], points)
        result.sent += values
        result.stored += counts.get("accepted", 0)
        result.replaced += counts.get("replaced", 0)
        result.non_finite += counts.get("non_finite", 0)
        result.aliased += counts.get("aliased", 0)
        result.requests += 1
        points, values = [], 0
        if on_batch is not None:
            on_batch(result)

    for rec in records:
        lo = rec.step if lo is None else min(lo, rec.step)
        hi = rec.step if hi is None else max(hi, rec.step)
        items = list(rec.metrics.items())
        # A record wider than a batch (a W&B export with thousands of columns) is split.
        for start in range(0, len(items), batch_values):
            chunk = dict(items[start : start + batch_values])
            if values + len(chunk) > batch_values:
                flush()
            point: dict[str, Any] = {"step": rec.step, "metrics": chunk}
            if rec.time is not None:
                point["time"] = rec.time
            points.append(point)
            values += len(chunk)
    flush()
    result.steps = None if lo is None else (lo, hi)
    return result


def summary_lines(source: str, result: ImportResult, tally: Tally, url: str) -> list[str]:
    run = result.run
    steps = f"steps {result.steps[0]}..{result.steps[1]}" if result.steps else "no steps"
    lines = [
        f"{source} -> {run['project']}/{run['name']} (run {run['id']}, {url.rstrip('/')}/dashboard/runs/{run['id']}): "
        f"{result.sent} points sent, {result.stored} stored ({result.replaced} replaced, {result.non_finite} non-finite, "
        f"{result.aliased} alias copies), {tally.skipped} skipped ({tally.non_numeric} non-numeric, "
        f"{tally.bad_names} invalid names), {tally.empty} empty cells; {steps}; {result.requests} requests"
    ]
    if tally.renamed:
        shown = ", ".join(f"{k!r} -> {v}" for k, v in list(tally.renamed.items())[:5])
        more = f" and {len(tally.renamed) - 5} more" if len(tally.renamed) > 5 else ""
        lines.append(f"renamed to fit the metric name rule: {shown}{more}")
    if tally.ignored_columns:
        shown = ", ".join(tally.ignored_columns[:8])
        more = f" and {len(tally.ignored_columns) - 8} more" if len(tally.ignored_columns) > 8 else ""
        lines.append(f"columns left out: {shown}{more}")
    if tally.non_scalar_tags:
        tags = sorted(tally.non_scalar_tags)
        lines.append(f"non-scalar tags left out: {', '.join(tags[:8])}{' ...' if len(tags) > 8 else ''}")
    if tally.bad_lines:
        lines.append(f"{tally.bad_lines} lines could not be read and were skipped:")
        lines.extend(f"  {e}" for e in tally.bad_line_examples)
        if tally.bad_lines > len(tally.bad_line_examples):
            lines.append(f"  ... and {tally.bad_lines - len(tally.bad_line_examples)} more")
    return lines


# -- export -------------------------------------------------------------------


@dataclass
class ExportResult:
    run: dict[str, Any]
    metrics: list[str] = field(default_factory=list)
    steps: int = 0
    points: int = 0


def step_rows(api: Api, run_id: int, metrics: list[str]) -> Iterator[tuple[int, float, dict[str, float]]]:
    """(step, latest time, {metric: value}) for every step of the run, ascending, at full resolution.

    Each metric is paged on its own and the pages are merged by step, so
    memory holds a page per metric, never the whole run.
    """
    page = max(500, min(10_000, 200_000 // max(1, len(metrics))))

    def stream(i: int) -> Iterator[tuple[int, int, float, float]]:
        for step, value, t in api.points(run_id, metrics[i], page):
            yield step, i, value, t  # (step, column): never compares two values, which may be NaN

    streams = [stream(i) for i in range(len(metrics))]
    for step, group in groupby(heapq.merge(*streams), key=lambda p: p[0]):
        row: dict[str, float] = {}
        latest = 0.0
        for _, i, value, t in group:
            row[metrics[i]] = value
            latest = max(latest, t)
        yield step, latest, row


def _cell(v: float) -> str:
    if v != v:
        return "nan"
    return repr(v) if not math.isinf(v) else ("inf" if v > 0 else "-inf")


def export(
    api: Api,
    run: dict[str, Any],
    out: TextIO,
    fmt: str,
    *,
    metrics: list[str] | None = None,
    on_step: Callable[[int], None] | None = None,
) -> ExportResult:
    """Write every point of the run: CSV wide (`step` + one column per metric, empty where absent), or
    JSONL (`{"step", "time", "metrics": {...}}` a line, which `parallax import jsonl` reads back)."""
    names = api.metric_names(run["id"])
    if metrics:
        unknown = [m for m in metrics if m not in names]
        if unknown:
            raise TransferError(f"run {run['project']}/{run['name']} has no metric {', '.join(unknown)}")
        names = list(dict.fromkeys(metrics))
    result = ExportResult(run=run, metrics=sorted(names))
    names = result.metrics
    writer = csv.writer(out, lineterminator="\n") if fmt == "csv" else None
    if writer is not None:
        writer.writerow(["step", *(spreadsheet_text(n) for n in names)])
    for step, t, row in step_rows(api, run["id"], names):
        if writer is not None:
            writer.writerow([step, *(_cell(row[m]) if m in row else "" for m in names)])
        else:
            out.write(json.dumps({"step": step, "time": t, "metrics": row}, separators=(",", ":")) + "\n")
        result.steps += 1
        result.points += len(row)
        if on_step is not None:
            on_step(step)
    return result


def open_output(path: str | None) -> tuple[TextIO, bool]:
    """The file to write (stdout for None or ``-``), and whether to close it."""
    if path is None or path == "-":
        return sys.stdout, False
    return open(path, "w", encoding="utf-8", newline=""), True


# -- command line ---------------------------------------------------------------


def _progress(console: Any, *, in_bytes: bool) -> Any:
    """A bar on stderr, drawn only on a terminal (a pipe or CI log gets just the summary line)."""
    from rich.progress import BarColumn, DownloadColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        DownloadColumn() if in_bytes else MofNCompleteColumn(),
        TextColumn("{task.fields[points]} points"),
        TimeElapsedColumn(),
        console=console,
        disable=not console.is_terminal,
        transient=False,
    )


def run_import(
    kind: str,
    path: str,
    *,
    url: str,
    token: str | None,
    project: str,
    run: str | None,
    config: dict[str, Any] | None = None,
    batch_values: int = BATCH_VALUES,
) -> int:
    """``parallax import``: 0 when every line was read, 1 when some were skipped as unreadable, 2 on an error."""
    from rich.console import Console

    from parallax.ingest.files import FileError, event_files, read_csv, read_jsonl, read_tensorboard

    readers = {"csv": read_csv, "jsonl": read_jsonl, "tensorboard": read_tensorboard}
    source = Path(path)
    console = Console(stderr=True)
    tally = Tally()
    if run is None:  # the log dir's name, or the file's without its extension
        if kind == "tensorboard":
            run = (source if source.is_dir() else source.parent).resolve().name or "run"
        else:
            run = source.stem or "run"
    sent = 0
    try:
        if kind == "tensorboard":
            total = sum(f.stat().st_size for fs in event_files(source).values() for f in fs)
        else:
            if not source.is_file():
                raise FileError(f"{source}: no such file")
            total = source.stat().st_size
        with Api(url, token) as api, _progress(console, in_bytes=True) as bar:
            task = bar.add_task(f"import {source.name}", total=total, points=0)

            def on_batch(r: ImportResult) -> None:
                nonlocal sent
                sent = r.sent
                bar.update(task, points=r.sent)

            records = readers[kind](source, tally, lambda n: bar.advance(task, n))
            result = upload(
                api, records, project=project, run=run, config=config, batch_values=batch_values, on_batch=on_batch
            )
            bar.update(task, completed=total, points=result.sent)
    except (FileError, TransferError) as exc:
        print(f"parallax: {exc}", file=sys.stderr)
        if sent:
            print(f"parallax: {sent} points had been sent; importing again is safe (a point is stored once)", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"parallax: cannot read {path}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    for line in summary_lines(path, result, tally, url):
        print(line, file=sys.stderr)
    return 1 if tally.bad_lines else 0


def run_export(ref: str, *, fmt: str, output: str | None, url: str, token: str | None, metrics: list[str] | None) -> int:
    """``parallax export``: 0 when written, 2 on an error."""
    from rich.console import Console

    console = Console(stderr=True)
    try:
        with Api(url, token) as api:
            run = api.find_run(ref)
            out, owned = open_output(output)
            try:
                with _progress(console, in_bytes=False) as bar:
                    task = bar.add_task(f"export {run['project']}/{run['name']}", total=run.get("last_step") or None, points=0)
                    result = export(api, run, out, fmt, metrics=metrics,
                                    on_step=lambda step: bar.update(task, completed=step))
                    bar.update(task, points=result.points)
            except BaseException:
                if owned:  # no half-written file left behind to be mistaken for the run
                    out.close()
                    Path(output).unlink(missing_ok=True)
                raise
            if owned:
                out.close()
            else:
                out.flush()
    except TransferError as exc:
        print(f"parallax: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"parallax: cannot write {output or 'stdout'}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    where = output if output and output != "-" else "stdout"
    print(
        f"{run['project']}/{run['name']} (run {run['id']}) -> {where}: {result.points} points, "
        f"{len(result.metrics)} metrics, {result.steps} steps ({fmt})",
        file=sys.stderr,
    )
    return 0
