"""What the fuzz tests tried, for the report: set PARALLAX_FUZZ_REPORT=path to get it as JSON.

The fuzz test modules import ``tally`` (they record every input they try) and
the autouse ``fuzz_report`` fixture, which rewrites the file after each module.
On pytest-xdist workers (``make test``) each worker's tally goes back to the
controlling process instead (``workeroutput``), which adds them up and writes
the file once at the end (tests/conftest.py's hooks call ``worker_done`` and
``write_merged``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterator

import pytest

from bench.fuzz import Tally

tally = Tally()
WORKEROUTPUT_KEY = "parallax_fuzz_tally"
_from_workers: list[dict] = []


def _write(t: Tally) -> None:
    path = os.environ.get("PARALLAX_FUZZ_REPORT")
    if path:
        Path(path).write_text(json.dumps(t.summary(), indent=2) + "\n")


@pytest.fixture(scope="module", autouse=True)
def fuzz_report(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if not hasattr(request.config, "workerinput"):  # a worker's tally is only part of the report
        _write(tally)


def worker_done(config: pytest.Config) -> None:
    """On an xdist worker: hand this process's tally to the controlling process."""
    if hasattr(config, "workeroutput") and sum(tally.examples.values()):
        config.workeroutput[WORKEROUTPUT_KEY] = tally.state()


def worker_down(workeroutput: dict) -> None:
    """On the controlling process: keep a finished worker's tally."""
    if WORKEROUTPUT_KEY in workeroutput:
        _from_workers.append(workeroutput[WORKEROUTPUT_KEY])


def write_merged() -> None:
    """On the controlling process: the report of every worker's tally added up."""
    if not _from_workers:
        return
    merged = Tally()
    for part in _from_workers:
        merged.merge(part)
    _write(merged)
