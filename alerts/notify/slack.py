"""Slack: an incoming webhook's message, a short text and Block Kit blocks."""

from __future__ import annotations

from typing import Any

from parallax.alerts.notify.httpchannel import HttpNotifier
from parallax.alerts.notify.notification import FIRING, Notification
from parallax.alerts.notify.text import TOP_CAUSES, dashboard_url, headline, ranked_causes, run_label, step_range
from parallax.alerts.render import advice_lines, evidence_text, value_text


def _mrkdwn(text: Any) -> str:
    """Text as Slack shows it literally: its three control characters as the entities Slack asks for, so a run
    or rule name cannot write ``<!channel>`` (a ping), ``<https://evil|docs>`` (a disguised link) or ``<@U1>``."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _slack_link(url: str, label: str) -> str:
    """``<url|label>``: the URL escaped like text and its ``|`` percent-encoded, so it cannot end the link early."""
    return f"<{_mrkdwn(url).replace('|', '%7C')}|{_mrkdwn(label)}>"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class SlackNotifier(HttpNotifier):
    """A Slack incoming webhook: a short ``text`` (the push notification) and Block Kit ``blocks``."""

    name = "slack"

    def __init__(self, url: str, timeout: float = 5.0, *, external_url: str | None = None):
        super().__init__(url, timeout=timeout, external_url=external_url)

    def body(self, n: Notification) -> dict[str, Any]:
        a = n.alert
        link = dashboard_url(a, self.external_url)
        icon = ":rotating_light:" if n.kind == FIRING else ":white_check_mark:"
        # The top-level text is the push notification and the fallback, parsed as mrkdwn like the blocks.
        text = _mrkdwn(f"{headline(n)} ({step_range(a)})")
        blocks: list[dict[str, Any]] = [
            {
                "type": "header",
                "text": {"type": "plain_text", "text": _cut(f"{icon} {headline(n)}", 150), "emoji": True},
            },
            {
                "type": "section",
                "fields": [
                    {"type": "mrkdwn", "text": _cut(f"*Run*\n{_mrkdwn(run_label(a))}", 2000)},
                    {"type": "mrkdwn", "text": _cut(f"*Severity*\n{_mrkdwn(a.get('severity') or 'n/a')}", 2000)},
                    {"type": "mrkdwn", "text": _cut(f"*Steps*\n{_mrkdwn(step_range(a))}", 2000)},
                    {"type": "mrkdwn", "text": _cut(f"*Rule*\n`{_mrkdwn(a.get('rule'))}`", 2000)},
                ],
            },
        ]
        if a.get("summary"):
            blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": _cut(_mrkdwn(a["summary"]), 3000)}})
        causes = []
        for i, cause in enumerate(ranked_causes(a)[:TOP_CAUSES], 1):
            score = cause.get("score")
            line = f"{i}. *{_mrkdwn(cause.get('id'))}*" + (f" (score {value_text(score)})" if score is not None else "")
            evidence = "; ".join(evidence_text(e) for e in cause.get("evidence") or [])
            if evidence:
                line += f"\n      {_mrkdwn(evidence)}"
            for advice in advice_lines(cause):
                line += f"\n      _{_mrkdwn(advice)}_"
            causes.append(line)
        if causes:
            body = "*Likely causes*\n" + "\n".join(causes)
            blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": _cut(body, 3000)}})
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": _cut(_mrkdwn(n.reason), 3000)}]})
        if link:
            text += " " + _slack_link(link, "open in Parallax")
            blocks.append(
                {
                    "type": "actions",
                    "elements": [
                        {"type": "button", "text": {"type": "plain_text", "text": "Open in Parallax"}, "url": link}
                    ],
                }
            )
        return {"text": text, "blocks": blocks}
