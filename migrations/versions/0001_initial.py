"""Runs, metric keys, points, latest values and rollup blocks.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("project", sa.String(200), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("tags", sa.JSON(), nullable=False),
        sa.Column("notes", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("last_seen_at", sa.Double(), nullable=True),
        sa.Column("last_step", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_runs"),
        sa.UniqueConstraint("project", "name", name="uq_runs_project_name"),
    )
    op.create_table(
        "metric_keys",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_metric_keys"),
        sa.UniqueConstraint("name", name="uq_metric_keys_name"),
    )
    op.create_table(
        "points",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("key_id", sa.Integer(), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("value", sa.Double(), nullable=True),
        sa.Column("nonfinite", sa.SmallInteger(), nullable=False),
        sa.Column("time", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "key_id", "step", name="pk_points"),
        sqlite_with_rowid=False,
    )
    op.create_index(
        "ix_points_nonfinite",
        "points",
        ["run_id", "key_id", "step", "nonfinite"],
        sqlite_where=sa.text("nonfinite != 0"),
        postgresql_where=sa.text("nonfinite != 0"),
    )
    op.create_table(
        "latest",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("key_id", sa.Integer(), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("value", sa.Double(), nullable=True),
        sa.Column("nonfinite", sa.SmallInteger(), nullable=False),
        sa.Column("time", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "key_id", name="pk_latest"),
        sqlite_with_rowid=False,
    )
    op.create_table(
        "rollups",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("key_id", sa.Integer(), nullable=False),
        sa.Column("level", sa.SmallInteger(), nullable=False),
        sa.Column("block", sa.BigInteger(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("vmin", sa.Double(), nullable=True),
        sa.Column("vmax", sa.Double(), nullable=True),
        sa.Column("last_step", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "key_id", "level", "block", name="pk_rollups"),
        sqlite_with_rowid=False,
    )


def downgrade() -> None:
    op.drop_table("rollups")
    op.drop_table("latest")
    op.drop_index("ix_points_nonfinite", table_name="points")
    op.drop_table("points")
    op.drop_table("metric_keys")
    op.drop_table("runs")
