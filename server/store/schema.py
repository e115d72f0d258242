"""Tables. Alembic migrations in migrations/ must agree with this (tests/test_migrations.py).

High-volume tables (points, latest, rollups) are clustered on their key
(SQLite WITHOUT ROWID) and carry no foreign keys: the store checks the run
before writing, and a per-row foreign-key check would cost ingest throughput.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

runs = Table(
    "runs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("project", String(200), nullable=False),
    Column("name", String(200), nullable=False),
    Column("config", JSON, nullable=False),
    Column("tags", JSON, nullable=False),
    Column("notes", Text, nullable=False),
    Column("status", String(16), nullable=False),
    Column("created_at", Double, nullable=False),
    Column("last_seen_at", Double, nullable=True),
    Column("last_step", BigInteger, nullable=True),
    Column("heartbeat_at", Double, nullable=True),  # the trainer's process last said it is alive
    UniqueConstraint("project", "name"),
)

metric_keys = Table(
    "metric_keys",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(200), nullable=False, unique=True),
)

# One row per (run, metric, step). ``value`` is NULL when ``nonfinite`` is
# 1 (NaN), 2 (+Infinity) or 3 (-Infinity): SQLite cannot store NaN.
points = Table(
    "points",
    metadata,
    Column("run_id", Integer, primary_key=True, autoincrement=False),
    Column("key_id", Integer, primary_key=True, autoincrement=False),
    Column("step", BigInteger, primary_key=True, autoincrement=False),
    Column("value", Double, nullable=True),
    Column("nonfinite", SmallInteger, nullable=False),
    Column("time", Double, nullable=False),
    sqlite_with_rowid=False,
)
# Covering (it holds ``nonfinite`` too), or SQLite prefers the primary key and
# scans every point of the metric to find the few non-finite ones.
Index(
    "ix_points_nonfinite",
    points.c.run_id,
    points.c.key_id,
    points.c.step,
    points.c.nonfinite,
    sqlite_where=points.c.nonfinite != 0,
    postgresql_where=points.c.nonfinite != 0,
)

# The point with the highest step of each (run, metric), kept current in the
# same transaction as the points.
latest = Table(
    "latest",
    metadata,
    Column("run_id", Integer, primary_key=True, autoincrement=False),
    Column("key_id", Integer, primary_key=True, autoincrement=False),
    Column("step", BigInteger, nullable=False),
    Column("value", Double, nullable=True),
    Column("nonfinite", SmallInteger, nullable=False),
    Column("time", Double, nullable=False),
    sqlite_with_rowid=False,
)

# A run's canonical metric that shows another key's points unchanged (an alias: ``entropy`` is the run's
# ``actor/entropy``), stored once as that key's points and read through this link.
metric_links = Table(
    "metric_links",
    metadata,
    Column("run_id", Integer, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True, autoincrement=False),
    Column("key_id", Integer, primary_key=True, autoincrement=False),  # the canonical name
    Column("source_key_id", Integer, nullable=False),  # the key whose points it shows
)

# Pre-aggregated blocks of steps (level 1: 64 steps, level 2: 4096 steps) so
# that a series of millions of points downsamples without scanning them. A
# block's last point is the one a downsampled bucket reports.
rollups = Table(
    "rollups",
    metadata,
    Column("run_id", Integer, primary_key=True, autoincrement=False),
    Column("key_id", Integer, primary_key=True, autoincrement=False),
    Column("level", SmallInteger, primary_key=True, autoincrement=False),
    Column("block", BigInteger, primary_key=True, autoincrement=False),
    Column("n", Integer, nullable=False),
    Column("vmin", Double, nullable=True),
    Column("vmax", Double, nullable=True),
    Column("last_step", BigInteger, nullable=False),
    sqlite_with_rowid=False,
)

events = Table(
    "events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", Integer, ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("step", BigInteger, nullable=False),
    Column("kind", String(32), nullable=False),
    Column("message", Text, nullable=False),
    Column("time", Double, nullable=False),
)
Index("ix_events_run_id_step", events.c.run_id, events.c.step)

# -- alerts (one row per alert instance of a (rule, run); at most one open) --

alerts = Table(
    "alerts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", Integer, ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("rule", String(200), nullable=False),
    Column("state", String(16), nullable=False),  # pending | firing | resolved | dropped
    Column("severity", String(16), nullable=False),
    Column("active_since_step", BigInteger, nullable=False),
    Column("active_since_time", Double, nullable=False),
    Column("last_active_step", BigInteger, nullable=False),
    Column("fired_step", BigInteger, nullable=True),
    Column("fired_time", Double, nullable=True),
    Column("ended_step", BigInteger, nullable=True),
    Column("ended_time", Double, nullable=True),
    Column("value", Double, nullable=True),
    Column("summary", Text, nullable=False),
    Column("causes", JSON, nullable=False),
    Column("labels", JSON, nullable=False),
    Column("acked_at", Double, nullable=True),
    Column("acked_by", String(200), nullable=True),
    Column("updated_at", Double, nullable=False),
)
Index("ix_alerts_state_run_id", alerts.c.state, alerts.c.run_id)
Index(
    "uq_alerts_open",
    alerts.c.run_id,
    alerts.c.rule,
    unique=True,
    sqlite_where=alerts.c.state.in_(["pending", "firing"]),
    postgresql_where=alerts.c.state.in_(["pending", "firing"]),
)

# Every lifecycle transition, with the evidence at that moment.
alert_transitions = Table(
    "alert_transitions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("alert_id", Integer, ForeignKey("alerts.id", ondelete="CASCADE"), nullable=False),
    Column("from_state", String(16), nullable=False),
    Column("to_state", String(16), nullable=False),
    Column("step", BigInteger, nullable=False),
    Column("time", Double, nullable=False),
    Column("summary", Text, nullable=False),
    Column("causes", JSON, nullable=False),
)
Index("ix_alert_transitions_alert_id", alert_transitions.c.alert_id)

# A silence mutes notifications of a rule (or every rule when NULL) on a run (or every run) until a time.
silences = Table(
    "silences",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("rule", String(200), nullable=True),
    Column("run_id", Integer, ForeignKey("runs.id", ondelete="CASCADE"), nullable=True),
    Column("until", Double, nullable=False),
    Column("comment", Text, nullable=False),
    Column("created_at", Double, nullable=False),
)

# Every delivery attempt of a notification to a channel, or why none was made.
alert_deliveries = Table(
    "alert_deliveries",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("alert_id", Integer, ForeignKey("alerts.id", ondelete="CASCADE"), nullable=False),
    Column("notification_id", String(64), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("channel", String(200), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("ok", Boolean, nullable=False),
    Column("final", Boolean, nullable=False),
    Column("error", Text, nullable=True),
    Column("reason", Text, nullable=False),
    Column("at", Double, nullable=False),
)
Index("ix_alert_deliveries_alert_id", alert_deliveries.c.alert_id)

# -- harness audit (one row per run and step: the checks' counts and the worst examples) --

audit_reports = Table(
    "audit_reports",
    metadata,
    Column("run_id", Integer, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True, autoincrement=False),
    Column("step", BigInteger, primary_key=True, autoincrement=False),
    Column("report", JSON, nullable=False),
    Column("time", Double, nullable=False),
)
