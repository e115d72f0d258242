"""Metric links: a run's canonical name that shows another key's points (an alias stored once).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "metric_links",
        sa.Column("run_id", sa.Integer(), nullable=False, autoincrement=False),
        sa.Column("key_id", sa.Integer(), nullable=False, autoincrement=False),
        sa.Column("source_key_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name="fk_metric_links_run_id_runs", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", "key_id", name="pk_metric_links"),
    )


def downgrade() -> None:
    op.drop_table("metric_links")
