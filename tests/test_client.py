"""The trainer client (client/src/parallax/client/client.py) against the real `parallax serve` subprocess.

The server is killed and restarted mid-run on the same database and port: every
point arrives exactly once and no `log` call waits. A spool left on disk by one
trainer process is resumed by the next; bounded memory and disk drop the oldest
points and count them; bad input never raises.
"""

from __future__ import annotations

import math
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import httpx
import pytest

from parallax.client import ParallaxClient, default_spool_dir
from parallax.client import spool as spool_mod
from tests.servers import ServerProcess, free_port

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "client-test-token-91c4"
FAST = {"flush_interval": 0.05, "backoff": 0.05, "max_backoff": 0.3, "timeout": 5.0}


class Server(ServerProcess):
    """`python -m parallax.server.cli serve` on a loopback port and a SQLite file; start/kill/start again."""

    def __init__(self, tmp: Path, token: str | None = None):
        self.db = tmp / "x.db"
        self.tmp = tmp
        self.token = token
        super().__init__(tmp, f"sqlite:///{self.db}", env={"PARALLAX_TOKEN": token} if token else None)

    def series(self, run_id: int, metric: str) -> dict:
        r = httpx.get(f"{self.url}/api/v1/runs/{run_id}/series", params={"metric": metric, "max_points": 100_000}, timeout=10)
        assert r.status_code == 200, r.text
        return r.json()["series"][metric]


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Server:
    s = Server(tmp_path_factory.mktemp("client-server")).start()
    yield s
    s.stop()


def dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}"  # nothing listens there


def test_points_arrive_with_names_and_values_as_frameworks_write_them(server, tmp_path):
    metrics_per_step = {f"actor/m{i}": 0.0 for i in range(17)}
    with ParallaxClient(server.url, "proj", "basic", config={"lr": 1e-6, "nan": math.nan, "obj": object()}, tags=["t"], spool_dir=tmp_path, **FAST) as px:
        for s in range(200):
            d = {k: s + i / 100 for i, k in enumerate(metrics_per_step)}
            d["critic/score/mean"] = s
            d["pass_at_k{k=\"8\"}"] = 0.5
            d["entropy"] = math.nan if s == 7 else (math.inf if s == 8 else 1.0)
            d["bad name"] = 1.0  # not a valid name: dropped, counted
            d["text"] = "hello"  # not a number: dropped, counted
            px.log(d, step=s)
        assert px.flush(20)
        st = px.stats()
        run_id = px.run_id
    assert st["sent"] == 200 * 20 and st["dropped"] == st["dropped_invalid"] == 400
    assert st["queued"] == st["spooled"] == 0 and st["retries"] == 0
    assert st["logged"] == st["sent"] + st["dropped"]
    m5 = server.series(run_id, "actor/m5")
    assert m5["steps"] == list(range(200)) and m5["values"][10] == pytest.approx(10.05)
    ent = server.series(run_id, "entropy")
    assert ent["non_finite"] == {"steps": [7, 8], "values": ["NaN", "Infinity"]}
    assert server.series(run_id, 'pass_at_k{k="8"}')["steps"] == list(range(200))
    run = httpx.get(f"{server.url}/api/v1/runs/{run_id}").json()
    assert run["config"]["lr"] == 1e-6 and run["config"]["nan"] == "nan" and run["tags"] == ["t"]
    # the same project+name is the same run
    with ParallaxClient(server.url, "proj", "basic", spool_dir=tmp_path / "2", **FAST) as again:
        again.log({"late": 1.0}, step=500)
        assert again.flush(10)
        assert again.run_id == run_id


def test_log_never_raises_on_bad_input(server, tmp_path):
    class Scalar:  # a numpy/torch scalar look-alike
        def __float__(self):
            return 2.5

    with ParallaxClient(server.url, "proj", "bad-input", spool_dir=tmp_path, **FAST) as px:
        px.log(None, 1)
        px.log({"a": 1.0}, step="x")
        px.log({"a": 1.0}, step=-1)
        px.log({"a": 1.0}, step=2**70)
        px.log({"a": 1.0}, step=True)
        px.log(42, 3)
        px.log({1: 1.0, ("t",): 2.0, "ok": 3.0, "none": None, "nested": {"x": 1}, "flag": True, "obj": Scalar()}, step=4)
        px.log({"ok": 5}, step=5.0)  # a float step that is an integer
        px.log({"ok": 6})  # no step: the previous + 1
        assert px.flush(10)
        st = px.stats()
        run_id = px.run_id
    px.log({"ok": 1.0}, step=100)  # after close: counted, not raised
    assert server.series(run_id, "ok")["steps"] == [4, 5, 6]
    assert server.series(run_id, "obj")["values"] == [2.5]
    assert server.series(run_id, "flag")["values"] == [1.0]
    assert st["dropped_invalid"] == 4 + 4  # four bad steps, four bad names/values
    assert st["log_errors"] == 2  # the two calls without a dict
    assert px.stats()["dropped"] == st["dropped"] + 1


def test_server_killed_and_restarted_mid_run_every_point_arrives_once(tmp_path):
    srv = Server(tmp_path, token=TOKEN).start()
    spool = tmp_path / "spool"
    steps, names = 600, [f"m{i}" for i in range(20)]
    try:
        px = ParallaxClient(srv.url, "proj", "outage", token=TOKEN, spool_dir=spool, **FAST)
        mem = ParallaxClient(srv.url, "proj", "outage-memory-only", token=TOKEN, spool_dir=False, **FAST)
        spooled_seen = 0
        for s in range(steps):
            if s == 150:
                assert px.flush(10) and px.stats()["sent"] == 150 * 20
                srv.kill()
            if s == 450:
                srv.start()  # same database, same port
            px.log({n: s + 0.5 for n in names}, step=s)
            mem.log({"loss": float(s)}, step=s)
            spooled_seen = max(spooled_seen, px.stats()["spooled"])
            time.sleep(0.002)
        assert px.close(20) and mem.close(20)
        assert srv.series(mem.run_id, "loss")["steps"] == list(range(steps))  # no spool: it waited in memory
        assert mem.stats()["sent"] == steps and mem.stats()["spilled"] == 0
        st = px.stats()
        assert spooled_seen > 0, "the outage was never spooled"
        assert st["retries"] > 0 and st["dropped"] == 0
        assert st["sent"] == st["logged"] == steps * 20
        for n in (names[0], names[-1]):
            got = srv.series(px.run_id, n)
            assert got["steps"] == list(range(steps))  # every step, once, in order
            assert got["values"] == [s + 0.5 for s in range(steps)]
        assert list(spool.glob("*.spool")) == []  # all replayed

        # a wrong token: nothing is lost, it waits in the spool
        bad = ParallaxClient(srv.url, "proj", "outage", token="wrong", spool_dir=tmp_path / "s2", **FAST)
        bad.log({"x": 1.0}, 1)
        assert not bad.close(0.5)
        st = bad.stats()
        assert st["sent"] == 0 and st["spooled"] == 1 and "401" in (st["last_error"] or "")
    finally:
        srv.stop()


def test_a_restarted_trainer_resumes_the_spool(server, tmp_path):
    spool = tmp_path / "spool"
    first = ParallaxClient(dead_url(), "proj", "resume", spool_dir=spool, **FAST)
    for s in range(300):
        first.log({"loss": float(s), "entropy": 1.0}, step=s)
    assert not first.close(timeout=0.3)  # the server is unreachable: all of it stays on disk
    assert first.stats()["spooled"] == 600 and list(spool.glob("*.spool"))
    # the trainer comes back (now the server is reachable) and goes on from step 300
    with ParallaxClient(server.url, "proj", "resume", spool_dir=spool, **FAST) as second:
        assert second.stats()["resumed"] == 600
        for s in range(300, 400):
            second.log({"loss": float(s), "entropy": 1.0}, step=s)
        assert second.flush(10)
        st = second.stats()
        run_id = second.run_id
    assert st["sent"] == 800 and st["spooled"] == 0
    assert server.series(run_id, "loss")["steps"] == list(range(400))
    assert list(spool.glob("*.spool")) == []


def test_close_returns_once_a_large_backlog_is_on_disk(tmp_path):
    """close(timeout=0) with a million values queued: it waits for the spill (local work), not for the server."""
    spool = tmp_path / "spool"
    px = ParallaxClient(dead_url(), "proj", "backlog", spool_dir=spool, max_queue_values=2_000_000)
    row = {f"m{i}": 0.5 for i in range(20)}
    for s in range(50_000):
        px.log(row, step=s)
    assert not px.flush(0.05)  # wakes the sender: it takes the backlog and starts writing it to the spool
    px.close(timeout=0)
    st = px.stats()
    assert st["spooled"] == 1_000_000 and st["queued"] == 0 and st["dropped"] == 0
    assert not px._thread.is_alive()  # nothing left writing to the spool after close returned
    again = ParallaxClient(dead_url(), "proj", "backlog", spool_dir=spool)
    assert again.stats()["resumed"] == 1_000_000
    again.close(timeout=0)


def test_default_spool_folder_and_a_second_live_client_gets_its_own(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_spool_dir("a/b", "..") == tmp_path / "parallax" / "spool" / "a%2Fb" / "%2E%2E"
    url = dead_url()
    one, two = ParallaxClient(url, "p", "r", **FAST), ParallaxClient(url, "p", "r", **FAST)
    one.log({"x": 1.0}, 1)
    two.log({"x": 2.0}, 1)
    assert not one.close(0.2) and not two.close(0.2)
    assert one._spool.dir == tmp_path / "parallax" / "spool" / "p" / "r"
    assert two._spool.dir == tmp_path / "parallax" / "spool" / "p" / "r~2"
    assert one.stats()["spooled"] == two.stats()["spooled"] == 1
    with ParallaxClient(url, "p", "r", **FAST) as three:  # the first folder is free again: its spool resumes
        assert three.stats()["resumed"] == 1
        three.close(0.2)


def test_bounded_memory_and_disk_drop_the_oldest_and_count_them(server, tmp_path):
    spool = tmp_path / "spool"
    bounds = {"max_queue_values": 2_000, "max_spool_bytes": 60_000, "batch_values": 500}
    px = ParallaxClient(dead_url(), "proj", "bounded", spool_dir=spool, **bounds, **FAST)
    steps = 6_000
    for s in range(steps):
        px.log({"a": float(s), "b": 1.0, "c": 2.0, "d": 3.0, "e": 4.0}, step=s)
        if s % 50 == 0:
            time.sleep(0.004)  # a trainer does some work between steps: the sender spills to disk meanwhile
    px.close(timeout=0.3)
    st = px.stats()
    assert st["dropped"] == st["dropped_overflow"] > 0
    assert st["spilled"] > st["spooled"] > 0  # the disk bound was reached: old segments went
    assert st["logged"] == steps * 5 == st["dropped"] + st["spooled"] + st["queued"]
    assert sum(p.stat().st_size for p in spool.glob("*.spool")) <= bounds["max_spool_bytes"]
    with ParallaxClient(server.url, "proj", "bounded", spool_dir=spool, **bounds, **FAST) as again:
        assert again.flush(10)
        sent, run_id = again.stats()["sent"], again.run_id
    assert sent == st["spooled"], (st, again.stats())
    got = server.series(run_id, "a")["steps"]
    assert len(got) * 5 == sent and got[-1] == steps - 1 and got[0] > 0  # the newest kept, the oldest dropped
    assert got == sorted(got)


def test_a_replayed_batch_counts_as_spooled_until_it_counts_as_sent(server, tmp_path, monkeypatch):
    """The sender stalls (a busy machine) right after a replayed batch left the spool and before it is counted as
    sent: flush() must not report the spool empty then, and stats() must count the batch once (it once said 2,500
    sent of 2,745 spooled right after flush() returned True: the last batch was sent but not yet counted)."""
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "000000000001.spool").write_bytes(b'2 {"points":[{"step":0,"metrics":{"a":1.0,"b":2.0},"time":%f}]}\n' % time.time())
    advanced, go_on = threading.Event(), threading.Event()
    real_advance = spool_mod.Spool.advance

    def advance_then_stall(self, values, length):
        real_advance(self, values, length)
        advanced.set()
        go_on.wait(30)  # only a safety net: released below

    monkeypatch.setattr(spool_mod.Spool, "advance", advance_then_stall)
    px = ParallaxClient(server.url, "proj", "replay-count", spool_dir=spool, **FAST)
    try:
        assert advanced.wait(30)  # the sender replays the spool at once
        st = px.stats()
        assert not px.flush(0)  # the batch is not counted as sent yet: not drained
        assert st["resumed"] == 2 and st["sent"] + st["spooled"] + st["queued"] + st["dropped"] == 2 and st["spooled"] == 2
    finally:
        go_on.set()
    assert px.flush(10)
    st = px.stats()  # right after flush() returned True
    assert st["sent"] == 2 and st["spooled"] == st["queued"] == 0
    px.close(10)


def test_close_keeps_the_batches_of_a_sender_that_leaves_its_request_once_abandoned(tmp_path):
    """close() gives up on a sender inside a request, then the request fails and the sender, on its way out of its
    cycle, clears the batches it had in hand before close() took them: they must reach the spool all the same."""
    px = ParallaxClient(dead_url(), "proj", "abandoned", spool_dir=tmp_path, flush_interval=60, heartbeat=None)
    in_request, leave = threading.Event(), threading.Event()

    def hung_post(*args, **kwargs):
        in_request.set()
        leave.wait(30)  # only a safety net: released below
        raise httpx.ConnectError("connection refused")

    px._http.post = hung_post
    for s in range(10):
        px.log({"loss": float(s)}, step=s)
    px._wake.set()  # the sender takes the points and creates the run: that request hangs
    assert in_request.wait(30)
    abandon = px._abandon_if_in_request

    def abandon_then_let_the_request_fail():
        gave_up = abandon()
        if gave_up and not leave.is_set():
            leave.set()
            px._thread.join(30)  # the sender finishes its cycle (and ends) before close() goes on
        return gave_up

    px._abandon_if_in_request = abandon_then_let_the_request_fail
    assert not px.close(timeout=0)
    assert not px._thread.is_alive()
    st = px.stats()
    assert st["spooled"] == st["logged"] == 10 and st["queued"] == st["sent"] == st["dropped"] == 0


def test_a_cursor_past_the_end_of_its_segment_replays_the_segment(tmp_path):
    """A segment shorter than its cursor says (its tail lost after the cursor was written): its lines are counted as
    unsent and read from its start, not counted and then skipped."""
    (tmp_path / "000000000001.spool").write_bytes(b'2 {"points":[]}\n1 {"points":[]}\n')
    (tmp_path / "cursor").write_text("1 4096\n")
    sp = spool_mod.Spool(tmp_path, 1 << 20)
    assert sp.values == 3
    got = []
    while (item := sp.peek()) is not None:
        got.append(item[0])
        sp.advance(item[0], item[2])
    sp.close()
    assert got == [2, 1] and sp.values == 0


def test_log_does_not_wait_for_a_server_that_never_answers(tmp_path):
    """While the sender is stuck in a request a server never answers (30 s), every log() call returns at once: the
    loop below ends while that request is still pending. How long a log() call takes is measured by make bench."""
    # a listening socket that never accepts: connections hang instead of being refused
    with socket.socket() as sink:
        sink.bind(("127.0.0.1", 0))
        sink.listen(0)
        url = f"http://127.0.0.1:{sink.getsockname()[1]}"
        px = ParallaxClient(url, "proj", "hang", spool_dir=tmp_path, flush_interval=0.05, timeout=30.0)
        px.log({"m": 0.0}, step=0)
        deadline = time.monotonic() + 60
        while not px._in_request and time.monotonic() < deadline:  # the sender waits on the server now
            time.sleep(0.01)
        assert px._in_request
        d = {f"m{i}": float(i) for i in range(20)}
        for s in range(1, 5_001):
            px.log(d, step=s)
        assert px._in_request and px.stats()["sent"] == 0  # the same request still hangs: no log() waited for it
        assert px.stats()["logged"] == 1 + 100_000
        px.close(timeout=0.5)  # gives up on the hung request: what was queued goes to the spool
    st = px.stats()
    assert st["sent"] == 0 and st["spooled"] + st["queued"] == st["logged"] == 100_001


def test_atexit_flushes(server, tmp_path):
    script = textwrap.dedent(f"""
        from parallax.client import ParallaxClient
        px = ParallaxClient({server.url!r}, "proj", "atexit", spool_dir={str(tmp_path)!r}, flush_interval=60)
        for s in range(50):
            px.log({{"loss": float(s)}}, step=s)
        # no close(): the interpreter's exit flushes
    """)
    subprocess.run([sys.executable, "-c", script], cwd=ROOT, check=True, timeout=30)
    run_id = httpx.get(f"{server.url}/api/v1/runs", params={"project": "proj"}).json()
    run_id = next(r["id"] for r in run_id["runs"] if r["name"] == "atexit")
    assert server.series(run_id, "loss")["steps"] == list(range(50))


def trajectory(step: int) -> dict:
    """Two turns, the second prompt extending the first exactly (the audit passes)."""
    return {"step": step, "id": f"t{step}", "turns": [
        {"prompt_ids": [1, 2, 3], "completion_ids": [4, 5]},
        {"prompt_ids": [1, 2, 3, 4, 5, 6], "completion_ids": [7, 8]},
    ]}


def events_of(url: str, run_id: int) -> list[tuple[int, str, str]]:
    r = httpx.get(f"{url}/api/v1/runs/{run_id}/events", timeout=10)
    assert r.status_code == 200, r.text
    return [(e["step"], e["kind"], e["message"]) for e in r.json()["events"]]


def audited_steps(url: str, run_id: int) -> list[int]:
    r = httpx.get(f"{url}/api/v1/runs/{run_id}/audit", timeout=10)
    assert r.status_code == 200, r.text
    return [int(s["step"]) for s in r.json()["per_step"]]


def test_events_trajectories_and_the_final_status_arrive(server, tmp_path):
    with ParallaxClient(server.url, "proj", "events", spool_dir=tmp_path, **FAST) as px:
        px.event("resume", 0, "from step 0")
        for s in range(1, 4):
            px.log({"loss": float(s)}, step=s)
        px.event("checkpoint", 3, "ckpt-3\x00")  # a NUL the server refuses is taken out
        px.event("Bad Kind", 3)  # dropped, counted
        px.event("eval", -1)  # a bad step: dropped, counted
        px.event("x" * 33, 3)  # too long a kind
        px.log_trajectories([trajectory(2), trajectory(3)])
        px.log_trajectories([])
        assert px.flush(10)
        st = px.stats()
        run_id = px.run_id
        assert px.close(10, status="finished")
    assert st["events"] == 2 and st["trajectories"] == 2 and st["dropped_invalid"] == 3
    assert st["sent"] == 3 + 2 + 2 and st["queued"] == st["spooled"] == 0
    # close(status=...) ends the run through server.lifecycle: an end event at its last step
    assert events_of(server.url, run_id) == [(0, "resume", "from step 0"), (3, "checkpoint", "ckpt-3"), (3, "end", "finished: status set through the API")]
    assert audited_steps(server.url, run_id) == [2, 3]
    assert httpx.get(f"{server.url}/api/v1/runs/{run_id}").json()["status"] == "finished"
    px.event("note", 9)  # after close: counted, not raised
    px.log_trajectories(None)  # not a list: counted, not raised
    assert px.close(1, status="failed") and httpx.get(f"{server.url}/api/v1/runs/{run_id}").json()["status"] == "failed"


def test_events_and_trajectories_are_spooled_and_replayed_in_order_with_metrics(tmp_path):
    srv = Server(tmp_path).start()
    spool = tmp_path / "spool"
    try:
        px = ParallaxClient(srv.url, "proj", "outage-events", spool_dir=spool, **FAST)
        px.log({"loss": 0.0}, step=0)
        px.event("resume", 0)
        assert px.flush(10)
        srv.kill()
        for s in range(1, 6):
            px.log({"loss": float(s)}, step=s)
            px.event("weight_sync", s, f"v{s}")
            px.log_trajectories([trajectory(s)])
            time.sleep(0.02)
        assert not px.flush(0.5)
        st = px.stats()
        assert st["spooled"] == 5 * 3 and st["sent"] == 2
        lines = b"".join(p.read_bytes() for p in sorted(spool.glob("*.spool"))).splitlines()
        # the order on disk is the order of the calls: b"{" a metrics batch (no endpoint, as before), then the tagged ones
        assert [ln.split(b" ")[1][:1] for ln in lines] == [b"{", b"e", b"t"] * 5
        srv.start()  # same database, same port
        assert px.close(20, status="finished")
        run_id = px.run_id
        assert px.stats()["sent"] == 2 + 15 and px.stats()["dropped"] == 0
        assert srv.series(run_id, "loss")["steps"] == list(range(6))
        assert events_of(srv.url, run_id) == [(0, "resume", "")] + [(s, "weight_sync", f"v{s}") for s in range(1, 6)] + [
            (5, "end", "finished: status set through the API")
        ]
        assert audited_steps(srv.url, run_id) == [1, 2, 3, 4, 5]
        assert httpx.get(f"{srv.url}/api/v1/runs/{run_id}").json()["status"] == "finished"
        assert list(spool.glob("*.spool")) == []
    finally:
        srv.stop()


def test_a_spool_in_the_metrics_only_format_still_replays(server, tmp_path):
    """Spools written before events and trajectories existed: lines ``<values> {"points": [...]}``, no endpoint."""
    spool = tmp_path / "spool"
    spool.mkdir()
    now = time.time()
    lines = [
        b'2 {"points":[{"step":0,"metrics":{"loss":0.5,"entropy":1.0},"time":%f}]}\n' % now,
        b'1 {"points":[{"step":1,"metrics":{"loss":0.25},"time":%f}]}\n' % now,
    ]
    (spool / "000000000001.spool").write_bytes(lines[0])
    (spool / "000000000002.spool").write_bytes(lines[1] + b'1 {"points":[{"step":2,"metri')  # cut off mid-write
    with ParallaxClient(server.url, "proj", "old-spool", spool_dir=spool, **FAST) as px:
        assert px.stats()["resumed"] == 3
        px.event("resume", 2)
        px.log({"loss": 0.125}, step=2)
        assert px.flush(10)
        st, run_id = px.stats(), px.run_id
    assert st["sent"] == 3 + 2 and st["spooled"] == 0
    assert server.series(run_id, "loss")["values"] == [0.5, 0.25, 0.125]
    assert events_of(server.url, run_id) == [(2, "resume", "")]
    assert list(spool.glob("*.spool")) == []


def test_events_wait_in_memory_without_a_spool(tmp_path):
    srv = Server(tmp_path)  # not started yet: connections are refused
    try:
        px = ParallaxClient(srv.url, "proj", "mem-events", spool_dir=False, **FAST)
        px.log({"loss": 1.0}, step=1)
        px.event("note", 1, "hello")
        px.log_trajectories([trajectory(1)])
        assert not px.flush(0.3)
        assert px.stats()["queued"] == 3 and px.stats()["retries"] > 0
        srv.start()
        assert px.close(20, status="finished")
        run_id = px.run_id
        assert px.stats()["sent"] == 3 and px.stats()["spilled"] == 0
        assert srv.series(run_id, "loss")["steps"] == [1]
        assert events_of(srv.url, run_id) == [(1, "note", "hello"), (1, "end", "finished: status set through the API")] and audited_steps(srv.url, run_id) == [1]
        assert httpx.get(f"{srv.url}/api/v1/runs/{run_id}").json()["status"] == "finished"
    finally:
        srv.stop()


def test_close_with_a_status_does_not_wait_for_an_unreachable_server(tmp_path):
    px = ParallaxClient(dead_url(), "proj", "status-down", spool_dir=tmp_path, **FAST)
    px.event("checkpoint", 1, "ckpt-1")
    assert not px.close(0.3, status="failed")  # returns though the server never answers (or the test times out)
    assert px.stats()["spooled"] == 1  # the event waits on disk for the next client
    assert not px.close(0.3, status="bogus")  # an unknown status: ignored, never raised


def test_an_idle_client_sends_heartbeats_and_a_closed_one_stops(server, tmp_path):
    def beat_at(run_id: int) -> float | None:
        return httpx.get(f"{server.url}/api/v1/runs/{run_id}", timeout=10).json()["heartbeat_at"]

    px = ParallaxClient(server.url, "hb", "beating", spool_dir=tmp_path / "s", heartbeat=0.2, **FAST)
    px.log({"loss": 1.0}, step=0)
    assert px.flush(10)
    run_id = px.run_id
    assert run_id is not None
    seen: list[float] = []
    deadline = time.monotonic() + 60
    while len(set(seen)) < 3 and time.monotonic() < deadline:  # nothing logged: heartbeats keep coming
        at = beat_at(run_id)
        if at is not None:
            seen.append(at)
        time.sleep(0.1)
    assert len(set(seen)) >= 3 and sorted(set(seen)) == list(dict.fromkeys(sorted(seen)))
    px.close()
    last = beat_at(run_id)
    time.sleep(1.0)  # five periods: a closed client sends no more
    assert beat_at(run_id) == last
    # heartbeat=None: none at all
    quiet = ParallaxClient(server.url, "hb", "quiet", spool_dir=tmp_path / "q", heartbeat=None, **FAST)
    quiet.log({"loss": 1.0}, step=0)
    assert quiet.flush(10)
    time.sleep(0.6)
    assert beat_at(quiet.run_id) is None
    quiet.close()
