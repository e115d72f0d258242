"""End to end: a faulty run pushed through the HTTP API raises an alert whose causes come back ranked;
state survives a restart; silences, acknowledgements and notifications to a real HTTP receiver."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.conftest import make_client, new_run

RULES = """
rules:
  - name: test_iw_spike
    expr: last(iw) > 10
    for: 2
    severity: critical
    summary: importance weights spiked
    causes:
      - id: stale_rollouts
        score: last(st)
        evidence: [last(st)]
        advice: check the weight sync
      - id: token_mismatch
        score: 1
        evidence: []
        advice: compare the token streams
"""


@pytest.fixture
def rule_file(tmp_path):
    p = tmp_path / "rules.yaml"
    p.write_text(RULES)
    return str(p)


def push(client, run, steps, iw, st):
    pts = [{"step": s, "metrics": {"iw": iw, "st": st}} for s in steps]
    r = client.post(f"/api/v1/runs/{run}/metrics", json={"points": pts})
    assert r.status_code == 200, r.text


def alerts_of(client, **params):
    return client.get("/api/v1/alerts", params=params).json()["alerts"]


def test_custom_rule_lifecycle_through_the_api(db_url, rule_file):
    with make_client(database_url=db_url, rules=[rule_file], alert_timer_seconds=0) as c:
        assert "test_iw_spike" in [r["name"] for r in c.get("/api/v1/rules").json()["rules"]]
        run = new_run(c)
        for s in range(10):
            push(c, run, [s], 1.0, 0.5)
        assert alerts_of(c, run_id=run) == []
        push(c, run, [10], 50.0, 3.0)
        assert [a["state"] for a in alerts_of(c, run_id=run, rule="test_iw_spike")] == ["pending"]
        push(c, run, [11], 60.0, 3.0)
        push(c, run, [12], 70.0, 3.0)
        firing = alerts_of(c, state="firing", run_id=run)
        assert len(firing) == 1
        a = firing[0]
        assert (a["rule"], a["started_step"], a["fired_step"], a["severity"]) == ("test_iw_spike", 10, 12, "critical")
        assert [x["id"] for x in a["causes"]] == ["stale_rollouts", "token_mismatch"]
        assert a["causes"][0]["score"] == 3.0 and a["run_name"] == "run-1"
        exported = c.get("/metrics").text
        assert f'parallax_alert{{project="proj",rule="test_iw_spike",run="run-1",run_id="{run}",severity="critical",state="firing"}} 1.0' in exported
        diag = c.get(f"/api/v1/runs/{run}/diagnosis").json()
        assert [x["id"] for x in diag["firing"]] == [a["id"]]
        detail = c.get(f"/api/v1/alerts/{a['id']}").json()
        assert [(t["from"], t["to"], t["step"]) for t in detail["transitions"]] == [("inactive", "pending", 10), ("pending", "firing", 12)]
        assert c.post(f"/api/v1/alerts/{a['id']}/ack", json={"by": "alice"}).json()["acked_by"] == "alice"
    # A restart: the firing alert is loaded back and resolves when the condition clears.
    with make_client(database_url=db_url, rules=[rule_file], alert_timer_seconds=0) as c:
        push(c, run, [13], 1.0, 0.5)
        resolved = alerts_of(c, state="resolved", run_id=run)
        assert [(x["id"], x["ended_step"]) for x in resolved] == [(a["id"], 13)]
        assert alerts_of(c, state="firing", run_id=run) == []


def test_one_request_of_many_steps_is_judged_at_each_step(db_url, rule_file):
    """An imported history in one request: two spikes become two alerts, each with its own id and its
    transitions at the steps where they happened (not one judgement at the request's last step)."""
    with make_client(database_url=db_url, rules=[rule_file], alert_timer_seconds=0) as c:
        run = new_run(c)
        spikes = set(range(100, 110)) | set(range(200, 205))
        pts = [{"step": s, "metrics": {"iw": 50.0 if s in spikes else 1.0, "st": 2.0}} for s in range(300)]
        assert c.post(f"/api/v1/runs/{run}/metrics", json={"points": pts}).status_code == 200
        got = sorted(alerts_of(c, run_id=run), key=lambda a: a["started_step"])
        assert [(a["state"], a["started_step"], a["fired_step"], a["ended_step"]) for a in got] == [
            ("resolved", 100, 102, 110), ("resolved", 200, 202, 205)]
        assert got[0]["id"] != got[1]["id"]
        for a, (lo, hi) in zip(got, [(100, 110), (200, 205)]):
            detail = c.get(f"/api/v1/alerts/{a['id']}").json()
            assert [(t["from"], t["to"], t["step"]) for t in detail["transitions"]] == [
                ("inactive", "pending", lo), ("pending", "firing", lo + 2), ("firing", "resolved", hi)]
        # the next request goes on from there: a spike in it opens a third alert, nothing is judged twice
        push(c, run, [300, 301, 302], 50.0, 2.0)
        assert [(a["state"], a["started_step"]) for a in alerts_of(c, run_id=run, state="firing")] == [("firing", 300)]
        assert len(alerts_of(c, run_id=run)) == 3


def test_default_pack_names_stale_rollouts(sqlite_url):
    with make_client(database_url=sqlite_url, alert_timer_seconds=0) as c:
        run = new_run(c, config={"staleness_bound": 2})
        for s in range(60):
            fault = s >= 40
            push_metrics = {
                "importance_weight_max": (40.0 + s if fault else 1.05 + 0.02 * (s % 3)),
                "staleness_mean": (5.0 + 0.2 * (s - 40) if fault else 0.5),
                "entropy": 1.5 - 0.001 * s,
            }
            assert c.post(f"/api/v1/runs/{run}/metrics", json={"points": [{"step": s, "metrics": push_metrics}]}).status_code == 200
        firing = alerts_of(c, state="firing", run_id=run)
        assert firing, "a sustained importance-weight spike with rising staleness must fire"
        assert any(a["causes"] and a["causes"][0]["id"] == "stale_rollouts" for a in firing)
        assert all(a["started_step"] >= 40 for a in firing)


class Receiver:
    """A webhook receiver on loopback. ``status`` other than 200 with ``echo``: it answers with the request's
    path and body in its reason phrase and body, as a receiver echoing what it was sent does."""

    def __init__(self, status: int = 200, echo: bool = False):
        self.bodies = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                n = int(self.headers.get("content-length", 0))
                raw = self.rfile.read(n)
                outer.bodies.append(json.loads(raw))
                if not echo:
                    self.send_response(status)
                    self.end_headers()
                    return
                answer = b"you sent " + self.path.encode() + b" " + raw
                self.send_response(status, f"echo {self.path}")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def wait_for(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return False


def test_notifications_and_silences(sqlite_url, rule_file):
    receiver = Receiver()
    try:
        with make_client(database_url=sqlite_url, rules=[rule_file], alert_timer_seconds=0,
                         notify_webhook_urls=[receiver.url]) as c:
            run = new_run(c)
            other = new_run(c, name="run-2")
            muted = c.post("/api/v1/silences", json={"rule": "test_iw_spike", "run_id": other, "until": time.time() + 3600})
            assert muted.status_code == 201
            assert [s["run_id"] for s in c.get("/api/v1/silences").json()["silences"]] == [other]
            for r in (run, other):
                for s in range(3):
                    push(c, r, [s], 50.0, 2.0)
            assert wait_for(lambda: len(receiver.bodies) >= 1)
            time.sleep(0.3)
            assert [(b["kind"], b["alert"]["run_id"]) for b in receiver.bodies] == [("firing", run)]
            fired = {a["run_id"]: a for a in alerts_of(c, state="firing")}
            assert set(fired) == {run, other}  # a silence mutes notifications, not the alert
            muted_detail = c.get(f"/api/v1/alerts/{fired[other]['id']}").json()
            assert "silence" in muted_detail["deliveries"][0]["reason"]
            assert wait_for(lambda: any(d["ok"] for d in c.get(f"/api/v1/alerts/{fired[run]['id']}").json()["deliveries"]))
            push(c, run, [3], 1.0, 0.0)
            assert wait_for(lambda: [b["kind"] for b in receiver.bodies] == ["firing", "resolved"])
    finally:
        receiver.close()


def test_a_failing_receivers_answer_is_neither_stored_nor_shown(sqlite_url, rule_file):
    """An echoing receiver answers with the request (its URL's token, the payload): only the status is kept."""
    receiver = Receiver(status=400, echo=True)
    secret_url = receiver.url + "/T0KEN-s3cret"
    try:
        with make_client(database_url=sqlite_url, rules=[rule_file], alert_timer_seconds=0,
                         notify_webhook_urls=[secret_url]) as c:
            run = new_run(c)
            for s in range(3):
                push(c, run, [s], 50.0, 2.0)
            [fired] = alerts_of(c, state="firing")

            def deliveries():
                return c.get(f"/api/v1/alerts/{fired['id']}").json()["deliveries"]

            assert wait_for(lambda: any(d["final"] for d in deliveries()))
            assert [d["error"] for d in deliveries()] == ["HTTP 400 Bad Request"]
            shown = c.get(f"/api/v1/alerts/{fired['id']}").text + c.get("/api/v1/alerts").text
            assert "s3cret" not in shown and "you sent" not in shown and "echo" not in shown
            store = c.app.state.store
            with store.engine.connect() as conn:
                from sqlalchemy import text

                stored = [r[0] for r in conn.execute(text("SELECT error FROM alert_deliveries"))]
            assert stored == ["HTTP 400 Bad Request"]
            # a delivery recorded by an earlier version, with the receiver's answer, is shown without it
            store.record_delivery(alert_id=fired["id"], notification_id="old", kind="firing", channel="webhook:x",
                                  attempt=1, ok=False, final=True, error="HTTP 502: you sent /T0KEN-s3cret {...}",
                                  reason="fired", at=time.time())
            assert deliveries()[-1]["error"] == "HTTP 502 (answer not kept)"
            assert "s3cret" not in c.get(f"/api/v1/alerts/{fired['id']}").text
    finally:
        receiver.close()


def test_bad_alert_requests(sqlite_client):
    c = sqlite_client
    assert c.get("/api/v1/alerts/999").status_code == 404
    assert c.post("/api/v1/alerts/999/ack").status_code == 404
    assert c.get("/api/v1/alerts", params={"state": "exploded"}).status_code == 422
    assert c.post("/api/v1/silences", json={"rule": "x", "until": time.time() - 10}).status_code == 422
    assert c.post("/api/v1/silences", json={"rule": "x", "run_id": 999, "until": time.time() + 10}).status_code == 404
    assert c.get("/api/v1/runs/999/diagnosis").status_code == 404


@pytest.mark.parametrize("until", [b"1e300", b"Infinity", b"-Infinity", b"NaN", b"1e20", b'"+10000-01-01T00:00:00Z"'])
def test_a_silence_past_year_9999_or_not_finite_is_refused_naming_until(sqlite_client, until):
    r = sqlite_client.post("/api/v1/silences", content=b'{"rule": "x", "until": %s}' % until,
                           headers={"content-type": "application/json"})
    assert r.status_code == 422
    assert all(e["loc"][:2] == ["body", "until"] for e in r.json()["detail"])
    assert sqlite_client.get("/api/v1/silences").json()["silences"] == []


def test_a_silence_until_the_end_of_year_9999_is_accepted_and_shown(sqlite_client):
    r = sqlite_client.post("/api/v1/silences", json={"rule": "x", "until": "9999-12-31T23:59:59Z"})
    assert r.status_code == 201 and r.json()["until"] == 253402300799.0
    from parallax.dashboard.app import route

    page = json.dumps(route(sqlite_client.app.state.store, "/dashboard/alerts", "").to_plotly_json(), default=str)
    assert "9999-12-31 23:59 UTC" in page


@pytest.mark.parametrize("until", [1e300, float("inf"), 1e20])
def test_a_silence_stored_before_the_bound_does_not_break_the_alerts_page(sqlite_client, until):
    from parallax.dashboard.app import route

    store = sqlite_client.app.state.store
    store.add_silence("x", None, until, "stored by an older version")
    page = route(store, "/dashboard/alerts", "")
    assert "far future" in json.dumps(page.to_plotly_json(), default=str)
    assert sqlite_client.get("/dashboard/alerts").status_code == 200
    assert sqlite_client.get("/api/v1/silences").status_code == 200


def test_firing_alerts_are_sent_to_alertmanager_again(sqlite_url, rule_file):
    receiver = Receiver()
    try:
        am_url = receiver.url.rsplit("/", 1)[0]
        with make_client(database_url=sqlite_url, rules=[rule_file], alert_timer_seconds=0,
                         notify_alertmanager_url=am_url) as c:
            run = new_run(c)
            for s in range(3):
                push(c, run, [s], 50.0, 2.0)
            assert wait_for(lambda: len(receiver.bodies) == 1)
            assert receiver.bodies[0][0]["labels"]["alertname"] == "test_iw_spike"
            assert c.app.state.alerting.resend_firing() == 1
            assert wait_for(lambda: len(receiver.bodies) == 2)
            assert receiver.bodies[1][0]["labels"] == receiver.bodies[0][0]["labels"]
            assert "endsAt" not in receiver.bodies[1][0]
    finally:
        receiver.close()


def test_a_pushgateway_delete_finishes_the_run_and_resolves_its_alerts(tmp_path, rule_file):
    """prometheus_client's delete_from_gateway is how a pushing trainer says it is done: like PATCH status."""
    with make_client(database_url=f"sqlite:///{tmp_path / 'p.db'}", rules=[rule_file], alert_timer_seconds=0) as c:
        for s in range(13):
            body = f"# TYPE iw gauge\niw {1.0 if s < 10 else 50.0}\n# TYPE st gauge\nst 0.5\n# TYPE step gauge\nstep {s}\n"
            assert c.put("/metrics/job/trainer/run/pushed", content=body).status_code == 200
        (firing,) = alerts_of(c, state="firing", rule="test_iw_spike")
        assert c.delete("/metrics/job/trainer/run/pushed").status_code == 202
        assert c.get(f"/api/v1/runs/{firing['run_id']}").json()["status"] == "finished"
        (resolved,) = alerts_of(c, state="resolved", rule="test_iw_spike")
        assert resolved["id"] == firing["id"]
        assert alerts_of(c, state="firing") == []
