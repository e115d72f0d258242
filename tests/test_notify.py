"""Alert notifications against real peers: an SMTP server (aiosmtpd) and HTTP receivers on 127.0.0.1.

Only the clock between retries is fake (an injected ``sleep``), so the tests stay fast.
"""

from __future__ import annotations

import email
import email.policy
import json
import logging
import re
import socket
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest
from aiosmtpd.controller import Controller

from parallax.alerts.notify import (
    AlertmanagerNotifier,
    DeliveryAttempt,
    DeliveryResult,
    Dispatcher,
    EmailNotifier,
    Notification,
    NotifyConfig,
    SlackNotifier,
    WebhookNotifier,
    build_notifiers,
)
from parallax.server.config import Settings

EXTERNAL = "http://127.0.0.1:8050"
STARTED_AT = 1764000000.0
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")


def make_alert(**changes: Any) -> dict[str, Any]:
    alert = {
        "id": 17,
        "run_id": 3,
        "rule": "importance_weight_spike",
        "state": "firing",
        "severity": "critical",
        "started_step": 120,
        "ended_step": None,
        "causes": [
            {
                "id": "token_mismatch",
                "score": 0.82,
                "evidence": [
                    {"metric": "token_mismatch_rate", "window": 5, "value": 0.031},
                    {"metric": "staleness_mean", "window": 5, "value": 0.2},
                    {"expr": "median_over(logprob_diff_max, 5)", "value": 2.5, "steps": [116, 120]},  # as the engine writes it
                ],
                "advice": "Send rollouts to the trainer as token ids (TITO), never as strings.",
            },
            {
                "id": "stale_rollouts",
                "score": 0.11,
                "evidence": [{"metric": "logprob_diff_max", "window": 5, "value": float("nan")}],
                "advice": ["Lower the async lag bound.", "Check weight-sync time."],
            },
        ],
        "summary": "importance_weight_max reached 48.2 (> 10) while staleness stayed < 1",
        "run_name": "run-3",
        "project": "proj",
        "labels": {"team": "rl"},
        "started_at": STARTED_AT,
        "ended_at": None,
    }
    alert.update(changes)
    return alert


def firing(**changes: Any) -> Notification:
    return Notification.for_alert(make_alert(**changes), created_at=STARTED_AT + 5)


def resolved() -> Notification:
    alert = make_alert(state="resolved", ended_step=180, ended_at=STARTED_AT + 600)
    return Notification.for_alert(alert, created_at=STARTED_AT + 601)


class Records:
    """The ``record`` callback: keeps every DeliveryAttempt and lets a test wait for final ones."""

    def __init__(self) -> None:
        self.items: list[DeliveryAttempt] = []
        self._cond = threading.Condition()

    def __call__(self, attempt: DeliveryAttempt) -> None:
        with self._cond:
            self.items.append(attempt)
            self._cond.notify_all()

    def finals(self, channel: str | None = None) -> list[DeliveryAttempt]:
        with self._cond:
            return [a for a in self.items if a.final and (channel is None or a.channel == channel)]

    def wait_finals(self, count: int, channel: str | None = None, timeout: float = 5.0) -> list[DeliveryAttempt]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.finals(channel)) < count:
                left = deadline - time.monotonic()
                assert left > 0, f"only {self.finals(channel)} after {timeout}s; all: {self.items}"
                self._cond.wait(left)
        return self.finals(channel)


class FakeSleep:
    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


# -- a real HTTP receiver -----------------------------------------------------


class Receiver:
    """Records each request and answers the scripted statuses in turn (then 200)."""

    def __init__(self, script: list[Any], hang: float) -> None:
        self.script = list(script)
        self.hang = hang
        self.requests: list[dict[str, Any]] = []
        self.got = threading.Event()
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.url = ""

    def json(self, i: int = -1) -> Any:
        # Strict JSON: a NaN or Infinity token would make a real receiver (Go, JS) reject the body.
        return json.loads(self.requests[i]["body"], parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))


@pytest.fixture
def receiver() -> Iterator[Any]:
    started: list[tuple[Receiver, ThreadingHTTPServer, threading.Thread]] = []

    def start(script: list[Any] = (), hang: float = 0.0) -> Receiver:  # type: ignore[assignment]
        rec = Receiver(list(script), hang)

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                with rec.lock:
                    rec.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                    step = rec.script.pop(0) if rec.script else 200
                rec.got.set()
                if rec.hang:
                    rec.release.wait(rec.hang)
                status, headers = step if isinstance(step, tuple) else (step, {})
                payload = b"ok" if status < 300 else b"no_service"
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that timed out and left: expected in the hang test

        server = Server(("127.0.0.1", 0), Handler)
        rec.url = f"http://127.0.0.1:{server.server_address[1]}"
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        started.append((rec, server, thread))
        return rec

    yield start
    for rec, server, thread in started:
        rec.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


# -- a real SMTP server -------------------------------------------------------


class Inbox:
    """aiosmtpd handler: answers the scripted DATA replies first, then keeps the messages."""

    def __init__(self, data_replies: list[str]) -> None:
        self.data_replies = list(data_replies)
        self.messages: list[tuple[str, list[str], email.message.EmailMessage]] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        if self.data_replies:
            return self.data_replies.pop(0)
        msg = email.message_from_bytes(envelope.original_content or envelope.content, policy=email.policy.default)
        self.messages.append((envelope.mail_from, list(envelope.rcpt_tos), msg))
        return "250 Message accepted for delivery"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def smtp_server() -> Iterator[Any]:
    controllers: list[Controller] = []

    def start(data_replies: list[str] = ()) -> tuple[Inbox, int]:  # type: ignore[assignment]
        inbox = Inbox(list(data_replies))
        port = free_port()
        controller = Controller(inbox, hostname="127.0.0.1", port=port)
        controller.start()
        controllers.append(controller)
        return inbox, port

    yield start
    for controller in controllers:
        controller.stop()


def email_notifier(port: int, **kw: Any) -> EmailNotifier:
    return EmailNotifier(
        "127.0.0.1", port, "parallax@lab.example", ["oncall@lab.example", "ml@lab.example"],
        timeout=5, external_url=EXTERNAL, **kw,
    )


# -- e-mail -------------------------------------------------------------------


def test_email_is_delivered_with_subject_recipients_causes_and_link(smtp_server):
    inbox, port = smtp_server()
    records = Records()
    n = firing()
    with Dispatcher([email_notifier(port)], records, sleep=FakeSleep()) as dispatcher:
        dispatcher.submit(n)
        [done] = records.wait_finals(1)
    assert (done.ok, done.attempt, done.channel, done.notification_id, done.error) == (True, 1, "email", n.id, None)
    [(sender, rcpts, msg)] = inbox.messages
    assert sender == "parallax@lab.example"
    assert rcpts == ["oncall@lab.example", "ml@lab.example"]
    assert msg["Subject"] == "[Parallax] FIRING importance_weight_spike on proj/run-3"
    assert msg["X-Parallax-Notification-Id"] == n.id
    body = msg.get_content()
    assert "Why sent: rule importance_weight_spike went firing at step 120" in body
    assert "1. token_mismatch (score 0.82)" in body
    assert "token_mismatch_rate over 5 steps = 0.031" in body
    assert "median_over(logprob_diff_max, 5) = 2.5 (steps 116–120)" in body  # the dashboard's wording too
    assert "advice: Send rollouts to the trainer as token ids (TITO)" in body
    assert "2. stale_rollouts (score 0.11)" in body and "logprob_diff_max over 5 steps = NaN" in body
    assert "advice: Check weight-sync time." in body
    assert "importance_weight_max reached 48.2" in body
    assert f"{EXTERNAL}/dashboard/runs/3" in body


def test_email_transient_451_is_retried_then_delivered(smtp_server):
    inbox, port = smtp_server(["451 4.3.0 Try again later"])
    records, sleep = Records(), FakeSleep()
    n = resolved()
    with Dispatcher([email_notifier(port)], records, sleep=sleep) as dispatcher:
        dispatcher.submit(n)
        records.wait_finals(1)
    first, second = records.items
    assert (first.attempt, first.ok, first.retryable, first.final) == (1, False, True, False)
    assert "451" in first.error
    assert (second.attempt, second.ok, second.final) == (2, True, True)
    assert len(sleep.delays) == 1
    [(_, _, msg)] = inbox.messages
    assert msg["Subject"] == "[Parallax] RESOLVED importance_weight_spike on proj/run-3"
    assert "steps 120-180" in msg.get_content()


def test_email_permanent_550_is_not_retried(smtp_server):
    inbox, port = smtp_server(["550 5.7.1 Relaying denied"])
    records, sleep = Records(), FakeSleep()
    with Dispatcher([email_notifier(port)], records, sleep=sleep) as dispatcher:
        dispatcher.submit(firing())
        records.wait_finals(1)
    [only] = records.items
    assert (only.attempt, only.ok, only.retryable, only.final) == (1, False, False, True)
    assert "550" in only.error and "Relaying denied" in only.error
    assert sleep.delays == [] and inbox.messages == []


def test_email_to_a_closed_port_is_retryable():
    result = email_notifier(free_port()).send(firing())
    assert (result.ok, result.retryable) == (False, True)
    assert "refused" in result.error.lower()


# -- webhook, Slack, Alertmanager ---------------------------------------------


def test_webhook_is_retried_with_growing_backoff_until_delivered(receiver):
    rec = receiver([500, 503, 200])
    records, sleep = Records(), FakeSleep()
    n = firing()
    hook = WebhookNotifier(rec.url + "/hook", headers={"X-Token": "s3cret"}, external_url=EXTERNAL)
    with Dispatcher([hook], records, sleep=sleep, base_delay=1.0, max_delay=60.0) as dispatcher:
        dispatcher.submit(n)
        [done] = records.wait_finals(1)
    assert [(a.attempt, a.ok, a.retryable, a.final) for a in records.items] == [
        (1, False, True, False),
        (2, False, True, False),
        (3, True, False, True),
    ]
    assert records.items[0].error.startswith("HTTP 500")
    assert done.channel == f"webhook:127.0.0.1:{rec.url.rsplit(':', 1)[1]}"
    first, second = sleep.delays
    assert 0.8 <= first <= 1.2 and 1.6 <= second <= 2.4 and second > first
    assert len(rec.requests) == 3
    assert rec.requests[0]["path"] == "/hook"
    assert rec.requests[0]["headers"]["X-Token"] == "s3cret"
    assert rec.requests[0]["headers"]["content-type"] == "application/json"
    body = rec.json()
    assert body["version"] == "1"
    assert (body["id"], body["kind"], body["reason"]) == (n.id, "firing", n.reason)
    assert body["url"] == f"{EXTERNAL}/dashboard/runs/3"
    assert body["alert"]["id"] == 17 and body["alert"]["rule"] == "importance_weight_spike"
    assert body["alert"]["causes"][0]["id"] == "token_mismatch"
    assert body["alert"]["causes"][1]["evidence"][0]["value"] == "NaN"


def test_webhook_client_error_is_not_retried(receiver):
    rec = receiver([400])
    records, sleep = Records(), FakeSleep()
    with Dispatcher([WebhookNotifier(rec.url)], records, sleep=sleep) as dispatcher:
        dispatcher.submit(firing())
        records.wait_finals(1)
    [only] = records.items
    assert (only.attempt, only.ok, only.retryable, only.final) == (1, False, False, True)
    assert only.error.startswith("HTTP 400")
    assert sleep.delays == [] and len(rec.requests) == 1


def test_webhook_gives_up_after_max_attempts_and_honours_retry_after(receiver):
    rec = receiver([(429, {"Retry-After": "7"}), 502, 502])
    records, sleep = Records(), FakeSleep()
    with Dispatcher([WebhookNotifier(rec.url)], records, sleep=sleep, max_attempts=3, max_delay=30) as dispatcher:
        dispatcher.submit(firing())
        [last] = records.wait_finals(1)
    assert (last.attempt, last.ok, last.retryable, last.final) == (3, False, True, True)
    assert sleep.delays[0] >= 7  # the receiver's Retry-After wins over a 1 s backoff
    assert len(sleep.delays) == 2 and len(rec.requests) == 3


def test_webhook_to_a_closed_port_is_retryable():
    result = WebhookNotifier(f"http://127.0.0.1:{free_port()}/").send(firing())
    assert (result.ok, result.retryable) == (False, True)


def test_slack_message_is_readable(receiver):
    rec = receiver()
    n = firing(summary="weight max <48> & rising")
    slack = SlackNotifier(rec.url + "/services/T0/B0/xyz", external_url=EXTERNAL)
    assert slack.send(n) == DeliveryResult(ok=True)
    assert "xyz" not in repr(slack)
    body = rec.json()
    assert body["text"].startswith("FIRING importance_weight_spike on proj/run-3 (from step 120 (ongoing))")
    assert f"<{EXTERNAL}/dashboard/runs/3|open in Parallax>" in body["text"]
    types = [b["type"] for b in body["blocks"]]
    assert types[0] == "header" and "context" in types and types[-1] == "actions"
    assert "FIRING importance_weight_spike" in body["blocks"][0]["text"]["text"]
    fields = " ".join(f["text"] for f in body["blocks"][1]["fields"])
    assert "proj/run-3" in fields and "critical" in fields and "from step 120" in fields
    text = json.dumps(body["blocks"])
    assert "weight max &lt;48&gt; &amp; rising" in text  # mrkdwn control characters escaped
    assert "*token_mismatch* (score 0.82)" in text and "TITO" in text and "stale_rollouts" in text
    assert body["blocks"][-1]["elements"][0]["url"] == f"{EXTERNAL}/dashboard/runs/3"
    assert n.reason in text


def test_slack_top_level_text_is_escaped_like_the_blocks(receiver):
    """The top-level text is the push notification: a run name must not ping the channel or hide a link there."""
    rec = receiver()
    n = firing(run_name="<!channel> <https://evil.example|docs> & <@U123>", rule="a<b>&c")
    assert SlackNotifier(rec.url + "/services/T0/B0/xyz", external_url=EXTERNAL + "/a|b&c").send(n).ok
    body = rec.json()
    escaped = "&lt;!channel&gt; &lt;https://evil.example|docs&gt; &amp; &lt;@U123&gt;"
    assert body["text"].startswith(f"FIRING a&lt;b&gt;&amp;c on proj/{escaped} (from step 120 (ongoing))")
    assert body["text"].endswith(f" <{EXTERNAL}/a%7Cb&amp;c/dashboard/runs/3|open in Parallax>")
    # outside the one link Parallax writes, no Slack control character is left
    assert "<" not in body["text"].rsplit(" <", 1)[0] and ">" not in body["text"].rsplit(" <", 1)[0]
    fields = " ".join(f["text"] for f in body["blocks"][1]["fields"])
    assert escaped in fields


def test_alertmanager_gets_v2_alerts_with_labels_annotations_and_times(receiver):
    rec = receiver()
    am = AlertmanagerNotifier(rec.url + "/", external_url=EXTERNAL)
    assert am.send(firing()).ok and am.send(resolved()).ok
    assert [r["path"] for r in rec.requests] == ["/api/v2/alerts", "/api/v2/alerts"]
    [fired], [ended] = rec.json(0), rec.json(1)
    labels = {
        "alertname": "importance_weight_spike",
        "run": "run-3",
        "run_id": "3",
        "project": "proj",
        "severity": "critical",
        "team": "rl",
    }
    assert fired["labels"] == labels and ended["labels"] == labels  # same identity: the resolve matches
    assert "endsAt" not in fired
    for key in ("startsAt", "endsAt"):
        assert RFC3339.match(ended[key]), ended[key]
    assert datetime.fromisoformat(ended["startsAt"]) == datetime.fromtimestamp(STARTED_AT, timezone.utc)
    assert datetime.fromisoformat(ended["endsAt"]) == datetime.fromtimestamp(STARTED_AT + 600, timezone.utc)
    assert fired["startsAt"] == ended["startsAt"]
    notes = ended["annotations"]
    assert notes["summary"].startswith("importance_weight_max reached 48.2")
    assert "1. token_mismatch (score 0.82)" in notes["causes"] and "token_mismatch_rate" in notes["causes"]
    assert "token_mismatch: Send rollouts" in notes["advice"]
    assert ended["generatorURL"] == f"{EXTERNAL}/dashboard/runs/3"


def test_a_notifier_keeps_one_client_for_all_its_notifications(receiver, monkeypatch):
    """A client (TLS context, pool) per notification grew the server's RSS by ~0.8 MB per alert sent and re-sent."""
    import httpx

    made: list[Any] = []
    real_client = httpx.Client

    def counting_client(*args: Any, **kwargs: Any) -> Any:
        made.append(kwargs)
        return real_client(*args, **kwargs)

    monkeypatch.setattr(httpx, "Client", counting_client)
    rec = receiver()
    am = AlertmanagerNotifier(rec.url)
    records = Records()
    dispatchers = [Dispatcher([am], records), Dispatcher([am], records)]  # delivery and re-send share it
    for i in range(30):
        dispatchers[i % 2].submit(firing())
    # all delivered before either closes: closing one closes the shared notifier, and the other's next send
    # would open a second client
    records.wait_finals(30, timeout=60)
    for d in dispatchers:
        assert d.close(timeout=30)
    assert len(rec.requests) == 30 and all(a.ok for a in records.items)
    assert len(made) == 1
    assert am.send(firing()).ok and len(made) == 2  # closed with the dispatcher: a later send opens another


# -- the dispatcher -----------------------------------------------------------


def test_a_hanging_channel_does_not_delay_another(receiver):
    slow, fast = receiver(hang=30), receiver()
    records = Records()
    slow_hook = WebhookNotifier(slow.url + "/slow", timeout=10)
    fast_hook = WebhookNotifier(fast.url + "/fast")
    dispatcher = Dispatcher([slow_hook, fast_hook], records, sleep=FakeSleep())
    dispatcher.submit(firing())
    [done] = records.wait_finals(1, channel=fast_hook.name, timeout=30)
    # delivered while the slow channel's request (30 s) is still in flight: it did not wait behind it
    assert done.ok and slow.got.wait(30) and records.finals(slow_hook.name) == []
    assert dispatcher.close(timeout=0.3) is False  # the slow delivery is still in flight


class BlockingNotifier:
    """An in-process channel whose sends wait for the test: fills the queue behind it."""

    name = "blocking"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Event()
        self.sent: list[str] = []

    def send(self, n: Notification) -> DeliveryResult:
        self.started.set()
        self.release.wait(10)
        self.sent.append(n.id)
        return DeliveryResult(ok=True)


def test_queue_overflow_drops_the_oldest_pending_and_records_it():
    channel, records = BlockingNotifier(), Records()
    dispatcher = Dispatcher([channel], records, queue_size=2, sleep=FakeSleep())
    try:
        first, *rest = [firing() for _ in range(4)]
        dispatcher.submit(first)
        assert channel.started.wait(30)  # the worker holds `first`; the queue is empty
        for n in rest:  # never blocks, though the channel is stuck (the channel is released only below)
            dispatcher.submit(n)
        [dropped] = records.wait_finals(1)
        assert dropped.notification_id == rest[0].id
        assert (dropped.dropped, dropped.ok, dropped.retryable, dropped.attempt) == (True, False, False, 0)
        assert "queue full" in dropped.error
        assert dispatcher.pending() == 2
        channel.release.set()
        records.wait_finals(4)
        assert channel.sent == [first.id, rest[1].id, rest[2].id]
    finally:
        channel.release.set()
        assert dispatcher.close(timeout=3)


def test_close_returns_within_its_timeout_and_records_what_it_dropped():
    channel, records = BlockingNotifier(), Records()
    dispatcher = Dispatcher([channel], records, sleep=FakeSleep())
    try:
        notes = [firing() for _ in range(3)]
        for n in notes:
            dispatcher.submit(n)
        assert channel.started.wait(30)
        assert dispatcher.close(timeout=0.3) is False  # returns though the channel is stuck
        dropped = records.wait_finals(2)
        assert {a.notification_id for a in dropped} == {notes[1].id, notes[2].id}
        assert all(a.dropped and "closed" in a.error for a in dropped)
        late = firing()
        dispatcher.submit(late)  # after close: recorded as dropped, never raises
        assert records.wait_finals(3)[-1].notification_id == late.id
    finally:
        channel.release.set()


def test_close_delivers_everything_queued(receiver):
    rec = receiver()
    records = Records()
    dispatcher = Dispatcher([WebhookNotifier(rec.url)], records, sleep=FakeSleep())
    for _ in range(5):
        dispatcher.submit(firing())
    assert dispatcher.close(timeout=5) is True
    assert len(records.finals()) == 5 and all(a.ok for a in records.items)
    assert len(rec.requests) == 5


def test_default_backoff_wait_is_cut_short_by_close(receiver):
    rec = receiver([500] * 10)
    records = Records()
    dispatcher = Dispatcher([WebhookNotifier(rec.url)], records, base_delay=0.5)
    dispatcher.submit(firing())
    assert rec.got.wait(30)
    dispatcher.close(timeout=0.2)  # the backoff wait before the next attempt is cut short
    last = records.wait_finals(1)[-1]
    assert last.final and not last.ok and "dispatcher clos" in last.error
    assert len(rec.requests) == 1


def test_record_and_notifier_failures_are_contained(caplog):
    class Raising:
        name = "raising"

        def send(self, n: Notification) -> DeliveryResult:
            raise RuntimeError("boom")

    seen: list[DeliveryAttempt] = []

    def record(attempt: DeliveryAttempt) -> None:
        seen.append(attempt)
        if len(seen) == 1:
            raise OSError("database is gone")

    caplog.set_level(logging.ERROR, logger="parallax.alerts.notify")
    dispatcher = Dispatcher([Raising()], record, sleep=FakeSleep())
    dispatcher.submit(firing())
    dispatcher.submit(firing())
    assert dispatcher.close(timeout=3)
    assert len(seen) == 2
    assert all(not a.ok and not a.retryable and a.final and "RuntimeError: boom" in a.error for a in seen)
    assert "recording delivery" in caplog.text and "database is gone" in caplog.text


# -- notifications and configuration ------------------------------------------


def test_notification_reason_and_kind():
    n = resolved()
    assert n.kind == "resolved" and n.reason == "rule importance_weight_spike went resolved at step 180"
    assert n.id != resolved().id and n.created_at == STARTED_AT + 601
    with pytest.raises(ValueError, match="kind"):
        Notification(kind="pending", alert=make_alert(), reason="x")


def test_build_notifiers_from_a_full_config():
    config = NotifyConfig(
        webhook_urls=("https://hooks.example/a", "https://hooks.example/b?token=abc"),
        slack_webhook_url="https://hooks.slack.com/services/T/B/secret",
        smtp_host="smtp.example",
        smtp_port=587,
        smtp_sender="parallax@lab.example",
        smtp_recipients=("oncall@lab.example",),
        smtp_username="parallax",
        smtp_password="hunter2",
        smtp_starttls=True,
        alertmanager_url="http://am.example:9093",
        external_url=EXTERNAL,
    )
    notifiers = build_notifiers(config)
    assert [n.name for n in notifiers] == [
        "webhook:hooks.example",
        "webhook:hooks.example#2",
        "slack",
        "email",
        "alertmanager",
    ]
    assert all(n.external_url == EXTERNAL for n in notifiers)
    shown = repr(config) + repr(notifiers)
    assert "secret" not in shown and "hunter2" not in shown and "token=abc" not in shown
    assert build_notifiers(NotifyConfig()) == []


@pytest.mark.parametrize(
    "config, message",
    [
        (NotifyConfig(smtp_host="smtp.example", smtp_recipients=("a@x.example",)), "smtp_sender"),
        (NotifyConfig(smtp_host="smtp.example", smtp_sender="p@x.example"), "smtp_recipients"),
        (NotifyConfig(smtp_sender="p@x.example", smtp_recipients=("a@x.example",)), "smtp_host"),
        (
            NotifyConfig(smtp_host="h", smtp_sender="p@x.example", smtp_recipients=("a@x.example",),
                         smtp_starttls=True, smtp_ssl=True),
            "exclude each other",
        ),
        (
            NotifyConfig(smtp_host="h", smtp_sender="p@x.example", smtp_recipients=("a@x.example",),
                         smtp_username="u"),
            "smtp_username and smtp_password",
        ),
        (NotifyConfig(smtp_host="h", smtp_sender="parallax", smtp_recipients=("a@x.example",)), "e-mail address"),
        (NotifyConfig(webhook_urls=("ftp://hooks.example/a",)), "PARALLAX_NOTIFY_WEBHOOK_URLS"),
        (NotifyConfig(slack_webhook_url="hooks.slack.com/x"), "PARALLAX_NOTIFY_SLACK_WEBHOOK_URL"),
        (NotifyConfig(alertmanager_url="am:9093"), "PARALLAX_NOTIFY_ALERTMANAGER_URL"),
        (NotifyConfig(external_url="parallax.internal"), "PARALLAX_EXTERNAL_URL"),
    ],
)
def test_build_notifiers_refuses_incomplete_config(config, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build_notifiers(config)


def test_settings_give_the_notify_config(monkeypatch):
    monkeypatch.setenv("PARALLAX_NOTIFY_WEBHOOK_URLS", '["https://hooks.example/a", "https://hooks.example/b"]')
    monkeypatch.setenv("PARALLAX_NOTIFY_SMTP_RECIPIENTS", '["oncall@lab.example"]')
    monkeypatch.setenv("PARALLAX_NOTIFY_SMTP_PASSWORD", "hunter2")
    settings = Settings(
        notify_smtp_host="smtp.example",
        notify_smtp_sender="parallax@lab.example",
        notify_smtp_username="parallax",
        external_url=EXTERNAL,
    )
    config = settings.notify_config()
    assert config.webhook_urls == ("https://hooks.example/a", "https://hooks.example/b")
    assert config.smtp_recipients == ("oncall@lab.example",)
    assert config.smtp_password == "hunter2" and config.smtp_port == 25
    assert config.external_url == EXTERNAL
    assert [n.name for n in build_notifiers(config)] == ["webhook:hooks.example", "webhook:hooks.example#2", "email"]


def test_webhook_secrets_stay_out_of_settings_repr():
    from parallax.server.config import Settings

    s = Settings(notify_webhook_urls=["https://hooks.example/T000/SECRETPART"], notify_slack_webhook_url="https://hooks.slack.com/services/XSECRET")
    assert "SECRETPART" not in repr(s) and "XSECRET" not in repr(s)
    cfg = s.notify_config()
    assert cfg.webhook_urls == ("https://hooks.example/T000/SECRETPART",) and cfg.slack_webhook_url.endswith("XSECRET")
