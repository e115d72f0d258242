"""The retention side of SqlStore: finished runs whose last point is old lose their points, a chunk at a time.

A chunk is one short transaction (on SQLite, one job of the single writer), so
ingest batches run between chunks. Each chunk deletes a prefix of the run's
points in key order (metric by metric, lowest step first) and brings that
metric's rollup blocks and latest row in line in the same transaction: the
store is consistent after every chunk, so a deletion interrupted anywhere (the
server stops, the run is resumed) leaves nothing to repair.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, text

#: What stays of a purged run: its row (config, tags, notes, last step),
#: events, alerts and audit reports; points, rollups and latest values go.
FINISHED_STATUSES = ("finished", "failed")

_CANDIDATES = text(
    "SELECT id FROM runs WHERE status IN ('finished', 'failed') "
    "AND coalesce(last_seen_at, created_at) < :cutoff "
    "AND EXISTS (SELECT 1 FROM latest WHERE latest.run_id = runs.id) ORDER BY id"
)
_RUN_STATE = "SELECT status, coalesce(last_seen_at, created_at) AS seen, last_step FROM runs WHERE id = :r"
# The point at which this chunk stops: the limit-th point of the run in key order.
_CHUNK_END = text(
    "SELECT key_id, step FROM points WHERE run_id = :r ORDER BY key_id, step LIMIT 1 OFFSET :skip"
)
# Two statements, each a range of the primary key (an OR of both makes SQLite scan every point of the run).
_DELETE_POINTS_UPTO = text("DELETE FROM points WHERE run_id = :r AND key_id = :k AND step <= :s")
_DELETE_ALL = {table: text(f"DELETE FROM {table} WHERE run_id = :r") for table in ("points", "rollups", "latest")}
_DELETE_KEYS_BELOW = {
    table: text(f"DELETE FROM {table} WHERE run_id = :r AND key_id < :k") for table in ("points", "rollups", "latest")
}
_DELETE_BLOCKS_UPTO = text(
    "DELETE FROM rollups WHERE run_id = :r AND key_id = :k AND level = :level AND block <= :block"
)
_DELETE_LATEST_IF_EMPTY = text(
    "DELETE FROM latest WHERE run_id = :r AND key_id = :k "
    "AND NOT EXISTS (SELECT 1 FROM points WHERE run_id = :r AND key_id = :k)"
)
_RETENTION_EVENT = text(
    "INSERT INTO events (run_id, step, kind, message, time) VALUES (:r, :step, 'retention', :message, :now)"
)


@dataclass(frozen=True, slots=True)
class PurgeChunk:
    deleted: int  # points deleted by this chunk
    done: bool  # nothing left to delete: the run has no points, or no longer qualifies


class RetentionMixin:
    def retention_candidates(self, cutoff: float) -> list[int]:
        """Ids of finished or failed runs that still hold points and sent nothing since ``cutoff``."""
        with self._read() as conn:  # type: ignore[attr-defined]
            return [r for (r,) in conn.execute(_CANDIDATES, {"cutoff": cutoff})]

    def purge_points_chunk(self, run_id: int, cutoff: float, limit: int, *, message: str, now: float) -> PurgeChunk:
        """Delete at most ``limit`` of the run's points, with their rollups and latest rows, in one transaction.

        The run is checked again inside the transaction (on PostgreSQL its row
        is locked, as ingest locks it): a run that was resumed or sent points
        since ``cutoff`` is left alone. The chunk that deletes the last point
        records a ``retention`` event with ``message``.
        """
        if limit < 1:
            raise ValueError("limit must be at least 1")
        from parallax.server.store.sql import ROLLUP_LEVELS  # sql.py builds SqlStore from this mixin

        lock = " FOR UPDATE" if self.dialect == "postgresql" else ""  # type: ignore[attr-defined]
        run_state = text(_RUN_STATE + lock)

        def job(conn: Connection) -> PurgeChunk:
            run = conn.execute(run_state, {"r": run_id}).first()
            if run is None or run.status not in FINISHED_STATUSES or run.seen >= cutoff:
                return PurgeChunk(0, True)
            end = conn.execute(_CHUNK_END, {"r": run_id, "skip": limit - 1}).first()
            if end is None:  # the rest fits in this chunk
                deleted = conn.execute(_DELETE_ALL["points"], {"r": run_id}).rowcount
                conn.execute(_DELETE_ALL["rollups"], {"r": run_id})
                conn.execute(_DELETE_ALL["latest"], {"r": run_id})
                conn.execute(
                    _RETENTION_EVENT, {"r": run_id, "step": run.last_step or 0, "message": message, "now": now}
                )
                return PurgeChunk(deleted, True)
            k, s = end
            p = {"r": run_id, "k": k, "s": s}
            deleted = conn.execute(_DELETE_KEYS_BELOW["points"], p).rowcount
            deleted += conn.execute(_DELETE_POINTS_UPTO, p).rowcount
            for table in ("rollups", "latest"):
                conn.execute(_DELETE_KEYS_BELOW[table], p)
            # Metric k lost its steps up to s: blocks wholly at or below s go, the block holding s is rebuilt.
            conn.execute(
                _DELETE_BLOCKS_UPTO, [{**p, "level": level, "block": s // size} for level, size in ROLLUP_LEVELS]
            )
            self._refresh_derived(conn, run_id, [(k, s, s)])  # type: ignore[attr-defined]
            conn.execute(_DELETE_LATEST_IF_EMPTY, p)
            return PurgeChunk(deleted, False)

        result: Any = self._write(job)  # type: ignore[attr-defined]
        return result
