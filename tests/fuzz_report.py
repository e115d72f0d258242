"""What the fuzz tests tried, for the report: set PARALLAX_FUZZ_REPORT=path to get it as JSON.

The fuzz test modules import ``tally`` (they record every input they try) and
the autouse ``fuzz_report`` fixture, which rewrites the file after each module.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterator

import pytest

from bench.fuzz import Tally

tally = Tally()


@pytest.fixture(scope="module", autouse=True)
def fuzz_report() -> Iterator[None]:
    yield
    path = os.environ.get("PARALLAX_FUZZ_REPORT")
    if path:
        Path(path).write_text(json.dumps(tally.summary(), indent=2) + "\n")
