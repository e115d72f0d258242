"""Prometheus Alertmanager: the alert in its v2 API's shape, so Alertmanager routes, groups and silences it."""

from __future__ import annotations

from typing import Any, Mapping

from parallax.alerts.notify.httpchannel import HttpNotifier
from parallax.alerts.notify.notification import RESOLVED, Notification
from parallax.alerts.notify.text import TOP_CAUSES, causes_text, dashboard_url, headline, ranked_causes, rfc3339
from parallax.alerts.render import advice_lines


class AlertmanagerNotifier(HttpNotifier):
    """``POST {url}/api/v2/alerts`` with one alert in Alertmanager's v2 shape.

    The labels identify the alert to Alertmanager (rule + run), so the resolved
    message matches the firing one. Alertmanager ends a firing alert by itself
    after its ``resolve_timeout`` unless it is sent again, as Prometheus re-sends
    firing alerts every minute.
    """

    name = "alertmanager"

    def __init__(
        self,
        url: str,
        timeout: float = 5.0,
        *,
        headers: Mapping[str, str] | None = None,
        external_url: str | None = None,
    ):
        super().__init__(url, headers=headers, timeout=timeout, external_url=external_url)

    def _target(self) -> str:
        return self.url.rstrip("/") + "/api/v2/alerts"

    def body(self, n: Notification) -> list[dict[str, Any]]:
        a = n.alert
        labels = {str(k): str(v) for k, v in (a.get("labels") or {}).items() if v is not None and v != ""}
        core = {
            "alertname": a.get("rule"),
            "run": a.get("run_name"),
            "run_id": a.get("run_id"),
            "project": a.get("project"),
            "severity": a.get("severity"),
        }
        # As in Prometheus, a rule's own labels cannot override the ones that identify the alert.
        labels.update({k: str(v) for k, v in core.items() if v is not None and v != ""})
        advice = [f"{c.get('id')}: {x}" for c in ranked_causes(a)[:TOP_CAUSES] for x in advice_lines(c)]
        annotations = {
            "summary": str(a.get("summary") or headline(n)),
            "causes": causes_text({"causes": [{**c, "advice": None} for c in ranked_causes(a)]}, TOP_CAUSES),
            "advice": "\n".join(advice),
            "reason": n.reason,
            "parallax_alert_id": str(a.get("id")),
        }
        started = a.get("started_at")
        alert: dict[str, Any] = {
            "labels": labels,
            "annotations": {k: v for k, v in annotations.items() if v},
            "startsAt": rfc3339(started if started is not None else n.created_at),
        }
        if n.kind == RESOLVED:
            ended = a.get("ended_at")
            alert["endsAt"] = rfc3339(ended if ended is not None else n.created_at)
        link = dashboard_url(a, self.external_url)
        if link:
            alert["generatorURL"] = link
        return [alert]
