"""Alert notifications: what is sent (``Notification``), where (the notifiers) and how it gets there (``Dispatcher``).

Modelled on Alertmanager's integrations, one module per channel beside the dispatcher:

    notification.py  Notification, DeliveryResult, DeliveryAttempt, the Notifier protocol
    text.py          the message text the channels share (headline, causes, the plain-text body)
    httpchannel.py   what the HTTP channels share (one kept client, the JSON body, reading the answer)
    webhook.py, slack.py, alertmanager.py, email.py   the channels
    config.py        NotifyConfig and build_notifiers: the channels the settings ask for
    dispatcher.py    Dispatcher: delivery in the background, retries, records

A notifier's ``send`` never raises: it returns a ``DeliveryResult`` that says
whether a failure is worth retrying (429, 5xx, SMTP 4xx, a refused or
timed-out connection) or not (other 4xx, SMTP 5xx, a bad URL). The
``Dispatcher`` retries the retryable ones with exponential backoff and jitter,
one worker thread per channel so a slow or failing channel never holds back the
others, and hands every attempt (and every delivery it had to drop) to a
``record`` callback; each notification carries the reason it was sent.

Standard library and httpx only: nothing here imports FastAPI, Dash or the server.
"""

from parallax.alerts.notify.alertmanager import AlertmanagerNotifier
from parallax.alerts.notify.config import NotifyConfig, build_notifiers
from parallax.alerts.notify.dispatcher import Dispatcher
from parallax.alerts.notify.email import EmailNotifier
from parallax.alerts.notify.httpchannel import USER_AGENT, HttpNotifier, http_result
from parallax.alerts.notify.notification import (
    FIRING,
    KINDS,
    RESOLVED,
    DeliveryAttempt,
    DeliveryResult,
    Notification,
    Notifier,
)
from parallax.alerts.notify.slack import SlackNotifier
from parallax.alerts.notify.text import (
    TOP_CAUSES,
    causes_text,
    dashboard_url,
    headline,
    plain_text,
    rfc3339,
    run_label,
    step_range,
)
from parallax.alerts.notify.webhook import WebhookNotifier

__all__ = [
    "FIRING",
    "KINDS",
    "RESOLVED",
    "TOP_CAUSES",
    "USER_AGENT",
    "AlertmanagerNotifier",
    "DeliveryAttempt",
    "DeliveryResult",
    "Dispatcher",
    "EmailNotifier",
    "HttpNotifier",
    "Notification",
    "Notifier",
    "NotifyConfig",
    "SlackNotifier",
    "WebhookNotifier",
    "build_notifiers",
    "causes_text",
    "dashboard_url",
    "headline",
    "http_result",
    "plain_text",
    "rfc3339",
    "run_label",
    "step_range",
]
