"""Whether the store can write: the outcome of its latest write, and a tiny write when none is recent.

A full disk once left ``/healthz`` at 200 while every write failed (a plain-text 500, and the connection reset):
reaching the database is not the same as writing to it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from sqlalchemy.exc import OperationalError

#: PostgreSQL's SQLSTATEs for a disk that is full (``disk_full``, and class 53's ``insufficient_resources``).
_PG_FULL = ("53100", "53000")
#: Failures between concurrent writers that the store retries: not a store that cannot write.
_PG_TRANSIENT = ("40P01", "40001")


@dataclass(frozen=True, slots=True)
class StorageFailure:
    """Why the store cannot write; ``full``: its disk is (HTTP 507), else it is unavailable (503)."""

    full: bool
    reason: str


def storage_failure(exc: BaseException) -> StorageFailure | None:
    """What an exception from the database says about the store, or None when it is not about the store (a
    constraint, a value it refuses: the request's fault)."""
    if not isinstance(exc, OperationalError):
        return None
    orig = exc.orig
    sqlstate = getattr(orig, "sqlstate", None)
    if sqlstate in _PG_TRANSIENT:
        return None
    name = getattr(orig, "sqlite_errorname", "")
    text = str(orig).lower()
    if sqlstate in _PG_FULL or name == "SQLITE_FULL" or "disk is full" in text or "no space left" in text:
        return StorageFailure(True, "the database's disk is full")
    if sqlstate == "25006" or name == "SQLITE_READONLY" or "readonly" in text or "read-only" in text:
        return StorageFailure(False, "the database is read-only")
    if name == "SQLITE_IOERR" or sqlstate == "58030" or "i/o error" in text:
        return StorageFailure(False, "the database cannot write to its disk (I/O error)")
    return StorageFailure(False, "the database is not available")


class WriteHealth:
    """The outcome of the store's latest write (a real one, or a probe), and when it was."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.failure: StorageFailure | None = None
        self.at: float | None = None  # monotonic

    def record(self, failure: StorageFailure | None) -> None:
        with self._lock:
            self.failure, self.at = failure, time.monotonic()

    def stale(self, after_s: float) -> bool:
        with self._lock:
            return self.at is None or time.monotonic() - self.at >= after_s
