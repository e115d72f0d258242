"""The store: plain entities in, plain entities out; SQL stays inside.

``Store`` is the interface the API, the rules and the dashboard depend on;
``server.store.sql.SqlStore`` implements it on SQLite and PostgreSQL.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from parallax.ingest.points import Batch

RUN_STATUSES = ("running", "finished", "failed")


class RunNotFound(LookupError):
    def __init__(self, run_id: int):
        self.run_id = run_id
        super().__init__(f"run {run_id} not found")


@dataclass(frozen=True, slots=True)
class Run:
    id: int
    project: str
    name: str
    config: dict[str, Any]
    tags: list[str]
    notes: str
    status: str
    created_at: float
    last_seen_at: float | None
    last_step: int | None
    heartbeat_at: float | None = None  # the trainer's process last said it is alive


@dataclass(frozen=True, slots=True)
class IngestResult:
    accepted: int  # points stored by this batch (all of them: a batch is atomic)
    replaced: int  # of those, points that overwrote an earlier, different value
    non_finite: int  # of those, NaN or infinite values


@dataclass(frozen=True, slots=True)
class PointValue:
    """One stored point; ``value`` is None when ``nonfinite`` marks NaN or an infinity."""

    metric: str
    step: int
    value: float | None
    nonfinite: int
    time: float


#: A metric's newest point in a run (``latest``, ``latest_all``) or the last one before a step (``values_before``).
LatestValue = PointValue


@dataclass(frozen=True, slots=True)
class PointsPage:
    points: list[PointValue]
    next: tuple[int, int] | None  # (metric key id, step) to pass as ``after`` for the next page; None at the end


@dataclass(frozen=True, slots=True)
class Event:
    id: int
    run_id: int
    step: int
    kind: str
    message: str
    time: float


@dataclass(slots=True)
class Series:
    """One metric's points, possibly downsampled into buckets.

    Each entry is a bucket reported by its last point (``steps``, ``values``,
    ``times``) with the bucket's ``vmin``/``vmax``; without downsampling a
    bucket is one point. Non-finite values are ``None`` in ``values`` and
    listed in ``non_finite`` as (step, marker).
    """

    metric: str
    steps: list[int] = field(default_factory=list)
    values: list[float | None] = field(default_factory=list)
    vmin: list[float | None] = field(default_factory=list)
    vmax: list[float | None] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    non_finite: list[tuple[int, int]] = field(default_factory=list)
    downsampled: bool = False


class Store(Protocol):
    dialect: str

    def create_run(self, project: str, name: str, config: dict, tags: list[str]) -> tuple[Run, bool]: ...
    def get_run(self, run_id: int) -> Run: ...
    def find_run(self, project: str, name: str) -> Run | None: ...
    def list_runs(self, project: str | None = None, tag: str | None = None, status: str | None = None) -> list[Run]: ...
    def update_run(self, run_id: int, *, status: str | None = None, tags: list[str] | None = None, notes: str | None = None) -> Run: ...
    def write_points(self, run_id: int, batch: "Batch", *, now: float | None = None) -> IngestResult: ...
    def add_events(self, run_id: int, events: list[tuple[int, str, str, float]]) -> int: ...
    def list_events(self, run_id: int) -> list[Event]: ...
    def latest(self, run_id: int) -> list[LatestValue]: ...
    def latest_all(self, metrics: frozenset[str], *, ended_since: float | None = None) -> list[tuple[Run, LatestValue]]: ...
    def values_before(self, run_id: int, metrics: list[str], step: int) -> dict[str, LatestValue]: ...
    def series(self, run_id: int, metrics: list[str], *, max_points: int, since_step: int | None = None) -> list[Series]: ...
    def points(self, run_id: int, metrics: list[str] | None = None, *, after: tuple[int, int] | None = None, since_step: int | None = None, limit: int = 10_000) -> PointsPage: ...
    def save_audit(self, run_id: int, reports: list[dict[str, Any]], *, now: float) -> int: ...
    def audit_summary(self, run_id: int, *, since_step: int | None = None, examples: int = 5) -> dict[str, Any]: ...
    def ping(self) -> bool: ...
    def can_write(self, probe_after_s: float = 10.0) -> Any: ...  # None, or a health.StorageFailure
    def close(self) -> None: ...
