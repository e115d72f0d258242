"""A generic webhook: the notification as JSON, for any receiver."""

from __future__ import annotations

from typing import Any, Mapping
from urllib.parse import urlsplit

from parallax.alerts.notify.httpchannel import HttpNotifier
from parallax.alerts.notify.notification import Notification
from parallax.alerts.notify.text import dashboard_url


class WebhookNotifier(HttpNotifier):
    """POSTs ``{"version": "1", "id", "kind", "reason", "created_at", "alert", "url"}`` as JSON."""

    def __init__(
        self,
        url: str,
        headers: Mapping[str, str] | None = None,
        timeout: float = 5.0,
        *,
        external_url: str | None = None,
    ):
        super().__init__(url, headers=headers, timeout=timeout, external_url=external_url)
        parts = urlsplit(url)
        self.name = f"webhook:{parts.hostname}" + (f":{parts.port}" if parts.port else "")

    def body(self, n: Notification) -> dict[str, Any]:
        return {
            "version": "1",
            "id": n.id,
            "kind": n.kind,
            "reason": n.reason,
            "created_at": n.created_at,
            "alert": dict(n.alert),
            "url": dashboard_url(n.alert, self.external_url),
        }
