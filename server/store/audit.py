"""The harness-audit side of SqlStore: one report per (run, step), replaced by a later audit of that step."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, delete, select

from parallax.ingest.audit import EXAMPLES_PER_CHECK, combine
from parallax.server.store.schema import audit_reports


class AuditMixin:
    def save_audit(self, run_id: int, reports: list[dict[str, Any]], *, now: float) -> int:
        """Store step reports (``ingest.audit.StepAudit.report()``); a step audited again is replaced."""
        self._require_run(run_id)  # type: ignore[attr-defined]
        if not reports:
            return 0

        def job(conn: Connection) -> int:
            steps = [r["step"] for r in reports]
            conn.execute(delete(audit_reports).where(audit_reports.c.run_id == run_id, audit_reports.c.step.in_(steps)))
            conn.execute(audit_reports.insert(), [{"run_id": run_id, "step": r["step"], "report": r, "time": now} for r in reports])
            return len(reports)

        return self._write(job)  # type: ignore[attr-defined]

    def audit_reports(self, run_id: int, *, since_step: int | None = None, limit: int = 1000) -> list[dict[str, Any]]:
        """The run's step reports, oldest first (the newest ``limit`` of them)."""
        self._require_run(run_id)  # type: ignore[attr-defined]
        q = select(audit_reports.c.report).where(audit_reports.c.run_id == run_id)
        if since_step is not None:
            q = q.where(audit_reports.c.step > since_step)
        q = q.order_by(audit_reports.c.step.desc()).limit(limit)
        with self._read() as conn:  # type: ignore[attr-defined]
            return [r.report for r in conn.execute(q)][::-1]

    def audit_summary(self, run_id: int, *, since_step: int | None = None, examples: int = EXAMPLES_PER_CHECK) -> dict[str, Any]:
        """The run's harness audit for the dashboard: the three checks pass/fail with counts, the worst examples per check,
        and the per-step reports (``ingest.audit.combine``); ``steps`` is empty when no trajectory was ever sent."""
        reports = self.audit_reports(run_id, since_step=since_step)
        return {"run_id": run_id, **combine(reports, examples), "per_step": [_step_row(r) for r in reports]}


def _step_row(r: dict[str, Any]) -> dict[str, Any]:
    return {
        "step": r["step"],
        "turns": r["turns"],
        "checks": {c: v["failed"] for c, v in r["checks"].items()},
        "metrics": r["metrics"],
    }
