"""The message text the channels share: headline, run label, step range, the ranked causes, the plain-text body."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Mapping
from urllib.parse import quote

from parallax.alerts.notify.notification import Notification
from parallax.alerts.render import advice_lines, evidence_text, value_text


#: Causes shown in short messages (Slack, Alertmanager annotations); e-mail lists them all.
TOP_CAUSES = 3


def dashboard_url(alert: Mapping[str, Any], external_url: str | None) -> str | None:
    """The run's dashboard page under ``external_url`` (e.g. http://127.0.0.1:8050), or None."""
    run_id = alert.get("run_id")
    if not external_url or run_id is None:
        return None
    return f"{external_url.rstrip('/')}/dashboard/runs/{quote(str(run_id), safe='')}"


def run_label(alert: Mapping[str, Any]) -> str:
    name, project = alert.get("run_name"), alert.get("project")
    if not name:
        return f"run {alert.get('run_id')}"
    return f"{project}/{name}" if project else str(name)


def headline(n: Notification) -> str:
    """``FIRING importance_weight_spike on proj/run-3``."""
    return f"{n.kind.upper()} {n.alert.get('rule')} on {run_label(n.alert)}"


def step_range(alert: Mapping[str, Any]) -> str:
    start, end = alert.get("started_step"), alert.get("ended_step")
    if start is None:
        return "unknown steps" if end is None else f"until step {end}"
    return f"steps {start}-{end}" if end is not None else f"from step {start} (ongoing)"


def rfc3339(ts: float) -> str:
    """Unix seconds as RFC 3339 in UTC: ``2025-11-29T19:52:00.000Z``."""
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def ranked_causes(alert: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for c in (alert.get("causes") or []) if isinstance(c, Mapping)]


def _cause_title(cause: Mapping[str, Any]) -> str:
    score = cause.get("score")
    return f"{cause.get('id')}" + (f" (score {value_text(score)})" if score is not None else "")


def causes_text(alert: Mapping[str, Any], limit: int | None = None) -> str:
    """The ranked causes with their evidence and advice, one block per cause."""
    lines = []
    causes = ranked_causes(alert)
    for i, cause in enumerate(causes[:limit] if limit else causes, 1):
        lines.append(f"{i}. {_cause_title(cause)}")
        for ev in cause.get("evidence") or []:
            lines.append(f"   - {evidence_text(ev)}")
        for a in advice_lines(cause):
            lines.append(f"   advice: {a}")
    return "\n".join(lines)


def plain_text(n: Notification, external_url: str | None = None) -> str:
    """The full message as plain text (the e-mail body)."""
    a = n.alert
    lines = [f"{headline(n)} (severity: {a.get('severity') or 'n/a'})", ""]
    lines.append(f"Run:      {run_label(a)} (id {a.get('run_id')})")
    lines.append(f"Rule:     {a.get('rule')}")
    lines.append(f"Steps:    {step_range(a)}")
    if a.get("started_at") is not None:
        lines.append(f"Started:  {rfc3339(a['started_at'])}")
    if a.get("ended_at") is not None:
        lines.append(f"Ended:    {rfc3339(a['ended_at'])}")
    lines.append(f"Why sent: {n.reason}")
    if a.get("summary"):
        lines += ["", str(a["summary"])]
    causes = causes_text(a)
    lines += ["", "Likely causes, best first:", causes] if causes else ["", "No cause ranked."]
    labels = a.get("labels") or {}
    if labels:
        lines += ["", "Labels: " + ", ".join(f"{k}={v}" for k, v in labels.items())]
    link = dashboard_url(a, external_url)
    if link:
        lines += ["", f"Dashboard: {link}"]
    lines += ["", f"Alert {a.get('id')}, notification {n.id}, sent by Parallax."]
    return "\n".join(lines) + "\n"
