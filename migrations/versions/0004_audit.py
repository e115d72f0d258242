"""Harness audit reports: per run and step, the checks' counts and the worst examples.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit_reports",
        sa.Column("run_id", sa.Integer(), nullable=False, autoincrement=False),
        sa.Column("step", sa.BigInteger(), nullable=False, autoincrement=False),
        sa.Column("report", sa.JSON(), nullable=False),
        sa.Column("time", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_audit_reports_run_id_runs", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", "step", name="pk_audit_reports"),
    )


def downgrade() -> None:
    op.drop_table("audit_reports")
