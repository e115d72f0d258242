"""The parse memory budget: bodies being parsed at once hold at most PARALLAX_PARSE_MEMORY_BUDGET_BYTES (20 times
their size each); a body that finds no room waits its turn, and past PARALLAX_PARSE_WAIT_SECONDS gets a 503."""

from __future__ import annotations

import asyncio
import threading

import orjson
import pytest

from parallax.server.budget import PARSE_EXPANSION, MemoryBudget
from tests.conftest import make_client, new_run

MiB = 1024 * 1024


def run(coro):
    return asyncio.run(coro)


def test_a_share_waits_for_room_and_shares_are_served_in_arrival_order():
    async def scenario() -> list[str]:
        budget = MemoryBudget(100)
        order: list[str] = []
        assert await budget.acquire(60, timeout=1)

        async def take(name: str, weight: int) -> None:
            assert await budget.acquire(weight, timeout=60)
            order.append(name)

        big = asyncio.create_task(take("big", 90))
        await asyncio.sleep(0)
        small = asyncio.create_task(take("small", 30))  # would fit now, but the big one came first
        await asyncio.sleep(0.05)
        assert order == [] and budget.used == 60
        budget.release(60)
        await big
        assert order == ["big"] and budget.used == 90
        budget.release(90)
        await small
        budget.release(30)
        assert budget.used == 0 and budget.peak == 90 and budget.waited == 2
        return order

    assert run(scenario()) == ["big", "small"]


def test_a_wait_that_runs_out_gives_up_its_place():
    async def scenario() -> None:
        budget = MemoryBudget(100)
        assert budget.try_acquire(100)
        assert not await budget.acquire(50, timeout=0.01)
        assert budget.used == 100 and not budget._queue
        waiting = asyncio.create_task(budget.acquire(50, timeout=60))
        await asyncio.sleep(0)
        waiting.cancel()  # the client left
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert not budget._queue
        budget.release(100)
        assert budget.used == 0

    run(scenario())


def test_a_body_larger_than_the_budget_still_goes_alone():
    async def scenario() -> None:
        budget = MemoryBudget(100)
        assert await budget.acquire(10_000, timeout=1)
        assert budget.used == 100 and not budget.try_acquire(1)
        budget.release(10_000)
        assert budget.used == 0

    run(scenario())


def points_body(n_bytes: int) -> bytes:
    points, size = [], 0
    step = 0
    while size < n_bytes:
        p = {"step": step, "metrics": {f"m{i}": step * 0.5 + i for i in range(20)}}
        points.append(p)
        size += len(orjson.dumps(p)) + 1
        step += 1
    return orjson.dumps({"points": points})


def test_four_large_bodies_at_once_are_parsed_within_the_budget(sqlite_url):
    """Four ~1 MiB bodies and a budget with room for one and a half: never more than the budget held at once."""
    body = points_body(MiB)
    budget_bytes = int(PARSE_EXPANSION * len(body) * 1.5)
    with make_client(database_url=sqlite_url, parse_memory_budget_bytes=budget_bytes, parse_wait_seconds=600,
                     alert_timer_seconds=0) as c:
        runs = [new_run(c, f"r{i}") for i in range(4)]
        codes: list[int] = []
        start = threading.Barrier(4)

        def post(run_id: int) -> None:
            start.wait()
            r = c.post(f"/api/v1/runs/{run_id}/metrics", content=body, headers={"content-type": "application/json"})
            codes.append(r.status_code)

        threads = [threading.Thread(target=post, args=(r,)) for r in runs]
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
        budget = c.app.state.parse_budget
        assert codes == [200] * 4
        assert 0 < budget.peak <= budget_bytes and budget.used == 0
        assert budget.peak == PARSE_EXPANSION * len(body)  # one at a time: two never fit together


def test_a_body_that_waits_too_long_gets_a_503_with_retry_after(sqlite_url):
    with make_client(database_url=sqlite_url, parse_memory_budget_bytes=4 * MiB, parse_wait_seconds=0.2) as c:
        run_id = new_run(c)
        budget = c.app.state.parse_budget
        assert budget.try_acquire(4 * MiB)  # every byte of it held, as by a large parse
        try:
            r = c.post(f"/api/v1/runs/{run_id}/metrics", json={"points": [{"step": 1, "metrics": {"x": 1.0}}]})
            assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1
            assert "PARALLAX_PARSE_MEMORY_BUDGET_BYTES" in r.json()["detail"]
            assert c.get(f"/api/v1/runs/{run_id}").status_code == 200  # reads hold no share
        finally:
            budget.release(4 * MiB)
        r = c.post(f"/api/v1/runs/{run_id}/metrics", json={"points": [{"step": 1, "metrics": {"x": 1.0}}]})
        assert r.status_code == 200 and budget.used == 0


def test_a_compressed_body_counts_as_if_it_inflated_to_the_body_limit(sqlite_url):
    import gzip

    with make_client(database_url=sqlite_url, max_body_bytes=64 * 1024, parse_memory_budget_bytes=2 * MiB) as c:
        r = c.put("/metrics/job/j/run/r", content=gzip.compress(b"# TYPE step gauge\nstep 1\nx 2\n"),
                  headers={"content-encoding": "gzip"})
        assert r.status_code == 200
        assert c.app.state.parse_budget.peak == PARSE_EXPANSION * 64 * 1024


# -- bodies that do not arrive -------------------------------------------------------------------------------------


def test_slow_bodies_to_the_dashboard_hold_no_thread(tmp_path):
    """Ten connections that sent half a body to the callback endpoint once froze every dashboard request."""
    import socket

    import httpx

    from parallax.dashboard import ids
    from tests.servers import parallax_server

    with parallax_server(tmp_path, args=["--database-url", f"sqlite:///{tmp_path}/x.db"]) as server:
        port = int(server.url.rsplit(":", 1)[1])
        stalled = []
        try:
            for _ in range(16):  # more than the WSGI bridge's threads
                s = socket.create_connection(("127.0.0.1", port), timeout=60)
                s.sendall(b"POST /dashboard/_dash-update-component HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"output\": ")
                stalled.append(s)
            with httpx.Client(base_url=server.url, timeout=60) as h:
                body = {"output": f"{ids.PAGE}.children", "outputs": {"id": ids.PAGE, "property": "children"},
                        "inputs": [{"id": ids.URL, "property": "pathname", "value": "/dashboard/"},
                                   {"id": ids.URL, "property": "search", "value": ""}],
                        "changedPropIds": [f"{ids.URL}.pathname"]}
                for _ in range(3):
                    assert h.get("/dashboard/_dash-layout").status_code == 200
                    assert h.post("/dashboard/_dash-update-component", json=body).status_code == 200
        finally:
            for s in stalled:
                s.close()


def test_a_body_that_does_not_arrive_in_time_is_a_408():
    from parallax.server.budget import ParseBudgetMiddleware

    sent: list[dict] = []
    reached_app = []

    async def app(scope, receive, send):
        reached_app.append(scope)

    async def receive():
        await asyncio.sleep(3600)  # the client sent its headers and stopped

    async def send(message):
        sent.append(message)

    middleware = ParseBudgetMiddleware(app, MemoryBudget(MiB), max_body_bytes=MiB, wait_s=1, read_timeout_s=0.05)
    scope = {"type": "http", "method": "POST", "path": "/dashboard/_dash-update-component", "headers": []}
    run(middleware(scope, receive, send))
    assert reached_app == []
    assert sent[0]["status"] == 408 and (b"connection", b"close") in sent[0]["headers"]
    assert b"PARALLAX_BODY_READ_TIMEOUT_SECONDS" in sent[1]["body"]
