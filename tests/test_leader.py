"""Several Parallax processes on one PostgreSQL database (DESIGN §7): one leader evaluates and notifies.

The elector against the real server (one leader; a dead leader's place taken
within the poll bound), two apps in one process sharing a database, the
redelivery of what a dead leader left unsent, and two real `parallax serve`
processes behind a round-robin client with a real webhook receiver.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack

import httpx
import pytest
from sqlalchemy import create_engine, text

from parallax.alerts.lifecycle import advance
from parallax.server.leader import LeaderElector, libpq_conninfo
from tests.conftest import make_client, new_run, reset_postgres
from tests.servers import parallax_server
from tests.test_alerts_e2e import Receiver, wait_for

POLL = 0.5
#: A follower takes a dead leader's place at its next poll. The tests wait for the handover up to this long and
#: print how long it took, but assert no duration: a busy machine delays a poll, it does not make it wrong.
HANDOVER_WAIT = 60.0
#: The deadline for an alert's notifications to reach the receiver: a deadline, not a measure (the leader judges and
#: sends within a poll or two on an idle machine; a CI machine also running the suite's other worker and other jobs
#: once took over 30 s).
DELIVERY_WAIT = 120.0


def kinds(receiver: Receiver) -> list[str]:
    """The kinds of the notifications the receiver got, in order ("firing", "resolved")."""
    return [b["kind"] for b in receiver.bodies]


def delivered(receiver: Receiver, *expected: str) -> bool:
    """Wait up to DELIVERY_WAIT for the receiver to have got exactly these notifications, in order."""
    return wait_for(lambda: kinds(receiver) == list(expected), timeout=DELIVERY_WAIT)


RULES = """
rules:
  - name: iw_high
    expr: min_over(iw, 2) > 10
    for: 0
    keep_firing_for: 2
    severity: critical
    summary: importance weights high
"""


@pytest.fixture
def pg(pg_url):
    reset_postgres(pg_url)
    return pg_url


@pytest.fixture
def rule_file(tmp_path):
    p = tmp_path / "rules.yaml"
    p.write_text(RULES)
    return str(p)


def electors(url: str, n: int, **kw) -> list[LeaderElector]:
    return [LeaderElector(libpq_conninfo(url), poll_seconds=POLL, name=f"test{i}", **kw) for i in range(n)]


def wait_leader(elector: LeaderElector, timeout: float) -> float:
    """Seconds until ``elector`` leads (fails past ``timeout``)."""
    began = time.monotonic()
    assert wait_for(lambda: elector.is_leader, timeout=timeout), f"no handover in {timeout} s"
    return time.monotonic() - began


# -- the elector ------------------------------------------------------------------


def test_one_of_two_electors_leads_and_a_stopped_leader_hands_over(pg):
    a, b = electors(pg, 2)
    try:
        a.start()
        b.start()
        assert a.is_leader and not b.is_leader  # the first to ask wins at once
        time.sleep(2 * POLL)
        assert a.is_leader and not b.is_leader  # and keeps it: the follower's retries fail
        a.stop()
        print(f"handover after stop: {wait_leader(b, HANDOVER_WAIT):.2f} s")
        assert not a.is_leader
    finally:
        a.stop()
        b.stop()


def test_a_leader_whose_session_dies_steps_down_and_the_follower_takes_over(pg):
    """The server ends the leader's session (as when its process is killed): the lock goes with it."""
    a, b = electors(pg, 2)
    admin = create_engine(pg, isolation_level="AUTOCOMMIT")
    try:
        a.start()
        b.start()
        assert a.is_leader
        assert a._conn is not None
        with admin.connect() as conn:
            conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": a._conn.info.backend_pid})
        print(f"handover after the session ended: {wait_leader(b, HANDOVER_WAIT):.2f} s")
        assert wait_for(lambda: not a.is_leader, timeout=HANDOVER_WAIT)  # its next check fails
        time.sleep(2 * POLL)  # the old leader reconnects as a follower: still one leader
        assert b.is_leader and not a.is_leader and b.terms == 1
    finally:
        a.stop()
        b.stop()
        admin.dispose()


def test_every_elector_hears_the_channel(pg):
    heard: list[tuple[str, str]] = []
    a, b = (
        LeaderElector(libpq_conninfo(pg), poll_seconds=POLL, channel="parallax_test",
                      on_message=lambda p, who=who: heard.append((who, p)))
        for who in "ab"
    )
    admin = create_engine(pg, isolation_level="AUTOCOMMIT")
    try:
        a.start()
        b.start()
        with admin.connect() as conn:
            conn.execute(text("SELECT pg_notify('parallax_test', 'hello')"))
        assert wait_for(lambda: sorted(heard) == [("a", "hello"), ("b", "hello")], timeout=5)
    finally:
        a.stop()
        b.stop()
        admin.dispose()


# -- two apps in one process on one database ------------------------------------------


def push(client, run: int, step: int, iw: float) -> None:
    r = client.post(f"/api/v1/runs/{run}/metrics", json={"points": [{"step": step, "metrics": {"iw": iw}}]})
    assert r.status_code == 200, r.text


def test_two_apps_share_a_database_one_evaluates_with_every_point(pg, rule_file):
    receiver = Receiver()
    settings = dict(database_url=pg, rules=[rule_file], alert_timer_seconds=0, leader_poll_seconds=POLL,
                    notify_webhook_urls=[receiver.url])
    try:
        with make_client(**settings) as a, make_client(**settings) as b:
            assert a.get("/healthz").json()["leader"] is True
            assert b.get("/healthz").json()["leader"] is False
            assert "parallax_leader 1.0" in a.get("/metrics").text
            assert "parallax_leader 0.0" in b.get("/metrics").text
            run = new_run(a)
            clients = itertools.cycle([b, a])
            # Alternating low (through the follower) and high (through the leader): the condition needs two high
            # points in a row, so it would hold for a leader that saw its own points and nobody else's.
            for step in range(10):
                push(next(clients), run, step, 50.0 if step % 2 else 1.0)
            for step in range(10, 16):
                push(next(clients), run, step, 50.0)
            assert delivered(receiver, "firing"), receiver.bodies
            firing = a.get("/api/v1/alerts", params={"state": "firing"}).json()["alerts"]
            # Steps 9 and 10 are the first two high in a row; step 10 came through the follower, so the
            # leader may first evaluate it together with its own step 11.
            assert [x["rule"] for x in firing] == ["iw_high"] and firing[0]["started_step"] in (10, 11)
            assert a.get("/api/v1/alerts", params={"run_id": run}).json()["count"] == 1
            for step in range(16, 24):
                push(next(clients), run, step, 1.0)
            assert delivered(receiver, "firing", "resolved"), receiver.bodies
            # Writes that touch alerts work on the follower: an ack, a silence, a finished run.
            alert_id = firing[0]["id"]
            assert b.post(f"/api/v1/alerts/{alert_id}/ack", json={"by": "bob"}).json()["acked_by"] == "bob"
            other = new_run(b, name="run-2")
            assert b.post("/api/v1/silences", json={"rule": "iw_high", "run_id": other, "until": time.time() + 600}).status_code == 201
            for step in range(3):
                push(b, other, step, 50.0)
            assert wait_for(lambda: a.get("/api/v1/alerts", params={"state": "firing", "run_id": other}).json()["count"] == 1)
            assert b.patch(f"/api/v1/runs/{other}", json={"status": "finished"}).status_code == 200
            assert wait_for(lambda: a.get("/api/v1/alerts", params={"state": "resolved", "run_id": other}).json()["count"] == 1)
            time.sleep(0.5)
            assert kinds(receiver) == ["firing", "resolved"]  # the other run is muted
            # A rule reload on the follower reaches the leader.
            assert b.post("/api/v1/rules/reload").status_code == 200
    finally:
        receiver.close()


# -- what a dead leader left unsent ------------------------------------------------------


def test_a_new_leader_sends_what_the_dead_one_saved_but_never_delivered(db_url, rule_file):
    """A transition saved with no delivery record (the leader died in between) is sent by the next leader, once."""
    receiver = Receiver()
    settings = dict(database_url=db_url, rules=[rule_file], alert_timer_seconds=0, leader_poll_seconds=POLL,
                    notify_webhook_urls=[receiver.url])
    try:
        with make_client(database_url=db_url, rules=[rule_file], alert_timer_seconds=0) as c:
            run = new_run(c)
            store = c.app.state.store
            _, moves = advance(None, True, rule="iw_high", run_id=run, step=5, time=time.time() - 5, for_steps=0,
                               keep_firing_for=0, severity="critical")
            saved = store.save_transitions(moves)  # as the dead leader did, and nothing more
        with make_client(**settings):
            assert wait_for(lambda: len(receiver.bodies) == 1)
            body = receiver.bodies[0]
            assert (body["kind"], body["alert"]["id"], body["alert"]["state"]) == ("firing", saved[-1].alert.id, "firing")
            assert "took over" in body["reason"]
            time.sleep(0.5)
        with make_client(**settings):  # delivered and recorded: not again
            time.sleep(1.0)
        assert len(receiver.bodies) == 1
    finally:
        receiver.close()


# -- two real processes ------------------------------------------------------------------


def _start_together(stack: ExitStack, managers: list) -> list:
    """Enter these server context managers in parallel (each start imports the whole app: seconds)."""
    with ThreadPoolExecutor(len(managers)) as pool:
        started = [pool.submit(m.__enter__) for m in managers]
        servers, failure = [], None
        for manager, future in zip(managers, started):
            try:
                servers.append(future.result())
            except BaseException as exc:  # the others still get stopped
                failure = failure or exc
                continue
            stack.push(manager.__exit__)
    if failure is not None:
        raise failure
    return servers


def _leader_of(servers) -> list[bool]:
    return [httpx.get(f"{s.url}/healthz", timeout=2).json()["leader"] for s in servers]


def _points(step: int, fault: bool) -> dict:
    return {
        "step": step,
        "metrics": {
            "importance_weight_max": 40.0 + step if fault else 1.05 + 0.02 * (step % 3),
            "staleness_mean": 5.0 if fault else 0.5,
        },
    }


def test_two_serve_processes_notify_each_transition_once_and_survive_the_leader(pg, tmp_path):
    """Round-robin writes across two `parallax serve` processes with the default rule pack; the leader is
    SIGKILLed mid-way; every firing and resolved transition reaches the webhook exactly once."""
    receiver = Receiver()
    env = {
        "PARALLAX_DATABASE_URL": pg,
        "PARALLAX_NOTIFY_WEBHOOK_URLS": f'["{receiver.url}"]',
        "PARALLAX_LEADER_POLL_SECONDS": str(POLL),
        "PARALLAX_ALERT_TIMER_SECONDS": "0",
    }
    try:
        with ExitStack() as stack:
            # Generous start timeout: two cold starts at once on a shared machine.
            servers = _start_together(stack, [parallax_server(tmp_path, env=env, start_timeout=90) for _ in range(2)])
            leads = _leader_of(servers)
            assert sorted(leads) == [False, True]
            first, second = servers if leads[0] else servers[::-1]  # the leader, the follower
            http = stack.enter_context(httpx.Client(timeout=10))
            run = http.post(f"{second.url}/api/v1/runs", json={"project": "p", "name": "r", "config": {"staleness_bound": 2}}).json()["id"]
            rr = itertools.cycle(servers)

            def send(steps, fault, targets=None):
                for step in steps:
                    target = next(rr) if targets is None else targets[0]
                    r = http.post(f"{target.url}/api/v1/runs/{run}/metrics", json={"points": [_points(step, fault)]})
                    assert r.status_code == 200, r.text

            def notified() -> Counter:
                return Counter((b["alert"]["id"], b["kind"]) for b in receiver.bodies)

            def transitions(via) -> Counter:
                """Every firing and resolved transition the database holds, as (alert id, kind)."""
                found: Counter = Counter()
                for a in http.get(f"{via.url}/api/v1/alerts", params={"run_id": run}).json()["alerts"]:
                    detail = http.get(f"{via.url}/api/v1/alerts/{a['id']}").json()
                    found.update((a["id"], t["to"]) for t in detail["transitions"] if t["to"] in ("firing", "resolved"))
                return found

            send(range(0, 40), fault=False)
            send(range(40, 55), fault=True)
            send(range(55, 80), fault=False)
            expected_rules = {"importance_weight_spike", "staleness_high"}
            assert wait_for(
                lambda: {r for r in (b["alert"]["rule"] for b in receiver.bodies if b["kind"] == "resolved")} >= expected_rules,
                timeout=15,
            ), receiver.bodies
            assert wait_for(lambda: notified() == transitions(first), timeout=10), (notified(), transitions(first))
            time.sleep(0.5)  # and nothing more comes
            before = transitions(first)
            assert notified() == before and set(before.values()) == {1}
            kinds: dict[int, set[str]] = {}
            for alert_id, kind in before:
                kinds.setdefault(alert_id, set()).add(kind)
            assert all(k == {"firing", "resolved"} for k in kinds.values()), kinds

            # The leader dies without a word; the follower takes over within the bound.
            killed_at = time.monotonic()
            first.proc.kill()
            first.proc.wait(timeout=10)
            assert wait_for(lambda: _leader_of([second]) == [True], timeout=HANDOVER_WAIT)
            print(f"handover after SIGKILL: {time.monotonic() - killed_at:.2f} s")

            send(range(80, 120), fault=False, targets=[second])
            send(range(120, 130), fault=True, targets=[second])
            assert wait_for(lambda: len(notified()) > len(before) and notified() == transitions(second), timeout=10), (
                notified(), transitions(second))
            time.sleep(0.5)  # and nothing more comes
            after = transitions(second)
            assert notified() == after and set(after.values()) == {1}
            print(f"notified once each: {len(before)} transitions before the kill, {len(after) - len(before)} after")
    finally:
        receiver.close()


def test_announcements_waiting_together_are_merged_per_run():
    from parallax.server.alerting import _coalesced

    def pts(run, lo, hi, keys):
        return {"t": "points", "r": run, "lo": lo, "hi": hi, "k": keys}

    items = [pts(1, 5, 9, [1]), pts(2, 0, 0, [1]), pts(1, 10, 12, [2]), {"t": "run", "r": 1, "s": "finished"},
             pts(1, 13, 13, None), pts(1, 14, 14, [3])]
    assert _coalesced(items) == [
        pts(1, 5, 12, [1, 2]), pts(2, 0, 0, [1]), {"t": "run", "r": 1, "s": "finished"}, pts(1, 13, 14, None),
    ]


def test_points_after_gives_the_newest_points_above_a_step(store):
    from tests.conftest import write

    run, _ = store.create_run("p", "r", {}, [])
    write(store, run.id, [("a", s, float(s), 0, 0.0) for s in range(10)] + [("b", s, -float(s), 0, 0.0) for s in range(5)]
          + [("c", 3, None, 1, 0.0)])
    found = store.points_after(run.id, {"a": (5, 3), "b": (1, 10), "c": (0, 5), "unknown": (0, 3)})
    assert found == {"a": [(7, 7.0), (8, 8.0), (9, 9.0)], "b": [(2, -2.0), (3, -3.0), (4, -4.0)], "c": [(3, None)],
                     "unknown": []}


def test_a_lone_sqlite_process_always_leads(sqlite_client):
    assert sqlite_client.get("/healthz").json()["leader"] is True
    assert "parallax_leader 1.0" in sqlite_client.get("/metrics").text


def test_a_new_leader_evaluates_what_was_stored_while_nobody_led(pg, rule_file):
    """Points a follower stored while the leader was gone are evaluated by the follower once it takes over."""
    receiver = Receiver()
    absent_leader = electors(pg, 1)[0]  # holds the lock: as a leader that is about to die
    try:
        absent_leader.start()
        assert absent_leader.is_leader
        with make_client(database_url=pg, rules=[rule_file], alert_timer_seconds=0, leader_poll_seconds=POLL,
                         notify_webhook_urls=[receiver.url]) as c:
            assert c.get("/healthz").json()["leader"] is False
            run = new_run(c)
            for step in range(5):
                push(c, run, step, 50.0)
            time.sleep(2 * POLL)
            assert c.get("/api/v1/alerts").json()["count"] == 0 and receiver.bodies == []  # nobody evaluates
            absent_leader.stop()
            assert wait_for(lambda: c.get("/healthz").json()["leader"], timeout=HANDOVER_WAIT)
            assert delivered(receiver, "firing"), receiver.bodies
            firing = c.get("/api/v1/alerts", params={"state": "firing"}).json()["alerts"]
            # judged step by step as a leader would have judged them live: it fires at the first step
            assert [(a["rule"], a["run_id"], a["fired_step"]) for a in firing] == [("iw_high", run, 0)]
            time.sleep(0.5)
            assert len(receiver.bodies) == 1
    finally:
        absent_leader.stop()
        receiver.close()


SPIKE_RULES = """
rules:
  - name: iw_spike
    expr: last(iw) > 10
    for: 0
    keep_firing_for: 0
    severity: critical
    summary: one importance weight far too high
"""


@pytest.fixture
def spike_rule_file(tmp_path):
    p = tmp_path / "spike.yaml"
    p.write_text(SPIKE_RULES)
    return str(p)


def test_a_new_leader_judges_every_step_announced_while_it_followed(pg, spike_rule_file):
    """A fault at one step, gone by the newest: the leader that would have judged it is gone (it holds the lock and
    evaluates nothing, as one SIGKILLed before its inbox got there). Only judging the newest step missed it."""
    receiver = Receiver()
    dead_leader = electors(pg, 1)[0]
    try:
        dead_leader.start()
        assert dead_leader.is_leader
        settings = dict(database_url=pg, rules=[spike_rule_file], alert_timer_seconds=0, leader_poll_seconds=POLL,
                        notify_webhook_urls=[receiver.url])
        with make_client(**settings) as writer, make_client(**settings) as heir:
            assert writer.get("/healthz").json()["leader"] is False and heir.get("/healthz").json()["leader"] is False
            run = new_run(writer)
            for step in range(40):
                push(writer, run, step, 50.0 if step == 31 else 1.0)  # announced; the heir hears it
            dead_leader.stop()
            leaders = lambda: [c.get("/healthz").json()["leader"] for c in (writer, heir)]  # noqa: E731
            assert wait_for(lambda: sorted(leaders()) == [False, True], timeout=HANDOVER_WAIT)
            assert delivered(receiver, "firing", "resolved"), receiver.bodies
            [alert] = writer.get("/api/v1/alerts", params={"run_id": run}).json()["alerts"]
            assert (alert["rule"], alert["fired_step"], alert["ended_step"]) == ("iw_spike", 31, 32)
    finally:
        dead_leader.stop()
        receiver.close()


def test_a_new_leader_does_not_judge_again_what_the_old_one_alerted_on(pg, spike_rule_file, caplog):
    """The old leader fired and resolved on steps the follower heard of: taking over, it judges none of them again."""
    import logging

    receiver = Receiver()
    settings = dict(database_url=pg, rules=[spike_rule_file], alert_timer_seconds=0, leader_poll_seconds=POLL,
                    notify_webhook_urls=[receiver.url])
    try:
        with ExitStack() as stack, caplog.at_level(logging.INFO, logger="parallax.server.alerting"):
            leader = make_client(**settings)
            stack.callback(leader.__exit__, None, None, None)
            leader.__enter__()
            follower = stack.enter_context(make_client(**settings))
            assert follower.get("/healthz").json()["leader"] is False
            run = new_run(follower)
            for step in range(20):
                push(follower, run, step, 50.0 if step == 10 else 1.0)
            assert delivered(receiver, "firing", "resolved"), receiver.bodies
            leader.__exit__(None, None, None)  # steps down: the follower takes over, with steps 0-19 in mind
            assert wait_for(lambda: caplog.text.count("leader took over") == 2, timeout=HANDOVER_WAIT + 30)
            assert follower.get("/healthz").json()["leader"] is True
            time.sleep(0.5)  # and nothing more comes
            assert kinds(receiver) == ["firing", "resolved"]
            assert follower.get("/api/v1/alerts", params={"run_id": run}).json()["count"] == 1
    finally:
        receiver.close()


def test_a_fault_sent_to_the_follower_as_the_leader_is_sigkilled_is_alerted(pg, tmp_path, spike_rule_file):
    """Two `parallax serve`: the leader is SIGKILLed, a one-step fault goes to the follower at once, then healthy
    steps. Whether the follower led yet or not when the fault came, the fault is alerted (3 of 3 were not)."""
    receiver = Receiver()
    env = {
        "PARALLAX_DATABASE_URL": pg,
        "PARALLAX_RULES": f'["{spike_rule_file}"]',
        "PARALLAX_NOTIFY_WEBHOOK_URLS": f'["{receiver.url}"]',
        "PARALLAX_LEADER_POLL_SECONDS": str(POLL),
        "PARALLAX_ALERT_TIMER_SECONDS": "0",
    }
    try:
        with ExitStack() as stack:
            servers = _start_together(stack, [parallax_server(tmp_path, env=env, start_timeout=90) for _ in range(2)])
            leads = _leader_of(servers)
            assert sorted(leads) == [False, True]
            leader, follower = servers if leads[0] else servers[::-1]
            http = stack.enter_context(httpx.Client(timeout=30))
            run = http.post(f"{follower.url}/api/v1/runs", json={"project": "p", "name": "r"}).json()["id"]

            def send(target, steps, fault_at=None):
                for step in steps:
                    body = {"points": [{"step": step, "metrics": {"iw": 50.0 if step == fault_at else 1.0}}]}
                    assert http.post(f"{target.url}/api/v1/runs/{run}/metrics", json=body).status_code == 200

            send(leader, range(0, 31))
            leader.proc.kill()
            leader.proc.wait(timeout=30)
            send(follower, range(31, 40), fault_at=31)
            assert delivered(receiver, "firing", "resolved"), receiver.bodies
            [alert] = http.get(f"{follower.url}/api/v1/alerts", params={"run_id": run}).json()["alerts"]
            assert (alert["fired_step"], alert["ended_step"]) == (31, 32)
    finally:
        receiver.close()
