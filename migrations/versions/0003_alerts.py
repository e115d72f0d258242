"""Alerts, their transitions, silences and notification deliveries.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

OPEN = sa.text("state IN ('pending', 'firing')")


def upgrade() -> None:
    op.create_table(
        "alerts",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("rule", sa.String(200), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("severity", sa.String(16), nullable=False),
        sa.Column("active_since_step", sa.BigInteger(), nullable=False),
        sa.Column("active_since_time", sa.Double(), nullable=False),
        sa.Column("last_active_step", sa.BigInteger(), nullable=False),
        sa.Column("fired_step", sa.BigInteger(), nullable=True),
        sa.Column("fired_time", sa.Double(), nullable=True),
        sa.Column("ended_step", sa.BigInteger(), nullable=True),
        sa.Column("ended_time", sa.Double(), nullable=True),
        sa.Column("value", sa.Double(), nullable=True),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("causes", sa.JSON(), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("acked_at", sa.Double(), nullable=True),
        sa.Column("acked_by", sa.String(200), nullable=True),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_alerts_run_id_runs", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_alerts"),
    )
    op.create_index("ix_alerts_state_run_id", "alerts", ["state", "run_id"])
    op.create_index("uq_alerts_open", "alerts", ["run_id", "rule"], unique=True, sqlite_where=OPEN, postgresql_where=OPEN)
    op.create_table(
        "alert_transitions",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("alert_id", sa.Integer(), nullable=False),
        sa.Column("from_state", sa.String(16), nullable=False),
        sa.Column("to_state", sa.String(16), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("time", sa.Double(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("causes", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["alert_id"], ["alerts.id"], name="fk_alert_transitions_alert_id_alerts", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_alert_transitions"),
    )
    op.create_index("ix_alert_transitions_alert_id", "alert_transitions", ["alert_id"])
    op.create_table(
        "silences",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("rule", sa.String(200), nullable=True),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("until", sa.Double(), nullable=False),
        sa.Column("comment", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_silences_run_id_runs", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_silences"),
    )
    op.create_table(
        "alert_deliveries",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("alert_id", sa.Integer(), nullable=False),
        sa.Column("notification_id", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("channel", sa.String(200), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("ok", sa.Boolean(), nullable=False),
        sa.Column("final", sa.Boolean(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(["alert_id"], ["alerts.id"], name="fk_alert_deliveries_alert_id_alerts", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_alert_deliveries"),
    )
    op.create_index("ix_alert_deliveries_alert_id", "alert_deliveries", ["alert_id"])


def downgrade() -> None:
    op.drop_table("alert_deliveries")
    op.drop_table("silences")
    op.drop_table("alert_transitions")
    op.drop_table("alerts")
