"""A run's verdict: healthy, or the faults its pages found, kept after the run ends (DESIGN §4)."""

from __future__ import annotations

from parallax.alerts.verdict import verdict
from tests.conftest import make_client, new_run


def _alert(i, rule, severity, cause, fired, last, ended=None, state="resolved"):
    return {"id": i, "rule": rule, "severity": severity, "state": state, "fired_step": fired,
            "last_active_step": last, "ended_step": ended, "causes": [{"id": cause, "score": 1.0}] if cause else []}


def test_verdict_groups_pages_by_cause_root_causes_first():
    v = verdict([
        _alert(1, "importance_weight_spike", "critical", "stale_rollouts", 130, 150, ended=151),
        _alert(2, "staleness_high", "warning", "stale_rollouts", 120, 160, ended=161),
        _alert(3, "nonfinite_values", "critical", "numerical_blowup", 200, 260, state="firing"),
        _alert(4, "entropy_collapse", "info", "exploration_collapse", 90, 100, ended=101),
        {**_alert(5, "rollout_stall", "warning", "unbalanced_groups", None, 12), "state": "dropped"},  # never fired
    ])
    assert v["state"] == "faulty"
    assert [(f["cause"], f["severity"], f["first_step"], f["last_step"], f["ongoing"]) for f in v["faults"]] == [
        ("stale_rollouts", "critical", 120, 161, False),
        ("numerical_blowup", "critical", 200, 260, True),
    ]
    assert v["faults"][0]["rules"] == ["staleness_high", "importance_weight_spike"] and v["faults"][0]["alerts"] == [2, 1]
    assert [n["cause"] for n in v["notes"]] == ["exploration_collapse"]  # info: a note, never a fault
    assert v["summary"].startswith("2 faults: stale_rollouts (critical, steps 120-161)")
    assert verdict([_alert(4, "entropy_collapse", "info", "exploration_collapse", 90, 100)])["state"] == "healthy"
    assert verdict([])["state"] == "healthy"


def test_a_faulty_run_that_finished_stays_faulty(db_url):
    with make_client(database_url=db_url, alert_timer_seconds=0) as c:
        sick, well = new_run(c, name="sick"), new_run(c, name="well")
        for run in (sick, well):
            pts = [{"step": s, "metrics": {"loss": 0.5, "entropy": 1.0}} for s in range(20)]
            assert c.post(f"/api/v1/runs/{run}/metrics", json={"points": pts}).status_code == 200
        nan = [{"step": s, "metrics": {"loss": float("nan")}} for s in range(20, 23)]
        r = c.post(f"/api/v1/runs/{sick}/metrics", content=__import__("json").dumps({"points": nan}),
                   headers={"content-type": "application/json"})
        assert r.status_code == 200, r.text
        diag = c.get(f"/api/v1/runs/{sick}/diagnosis").json()
        assert diag["verdict"]["state"] == "faulty" and diag["verdict"]["faults"][0]["ongoing"]
        for run in (sick, well):
            assert c.patch(f"/api/v1/runs/{run}", json={"status": "finished"}).status_code == 200
        diag = c.get(f"/api/v1/runs/{sick}/diagnosis").json()
        assert diag["firing"] == [] and diag["status"] == "finished"  # its alerts resolved with the run...
        fault = diag["verdict"]["faults"][0]
        assert diag["verdict"]["state"] == "faulty"  # ...and the verdict did not
        assert (fault["cause"], fault["severity"], fault["first_step"], fault["ongoing"]) == ("numerical_blowup", "critical", 20, False)
        assert c.get(f"/api/v1/runs/{well}/diagnosis").json()["verdict"]["state"] == "healthy"
        listed = {r["name"]: r["verdict"]["state"] for r in c.get("/api/v1/runs").json()["runs"]}
        assert listed == {"sick": "faulty", "well": "healthy"}
        assert [r["name"] for r in c.get("/api/v1/runs", params={"verdict": "faulty"}).json()["runs"]] == ["sick"]
        assert c.get(f"/api/v1/runs/{sick}").json()["verdict"]["state"] == "faulty"
        # the end is marked on the run as an event at its last step
        events = c.get(f"/api/v1/runs/{sick}/events").json()["events"]
        assert [(e["kind"], e["step"]) for e in events] == [("end", 22)]


def test_a_run_that_reached_its_total_and_went_quiet_is_finished_not_paged(db_url):
    import time

    with make_client(database_url=db_url, alert_timer_seconds=0) as c:
        done = new_run(c, name="done", config={"trainer": {"total_training_steps": 30}})  # verl's spelling
        dead = new_run(c, name="dead", config={"total_steps": 100})
        for run, n in ((done, 30), (dead, 30)):
            pts = [{"step": s, "metrics": {"loss": 0.5, "step_s": 1.0}} for s in range(n)]
            assert c.post(f"/api/v1/runs/{run}/metrics", json={"points": pts}).status_code == 200
        alerting = c.app.state.alerting
        later = time.time() + 3600
        alerting.engine.tick(later)
        alerting._finish_completed(later)
        assert c.get(f"/api/v1/runs/{done}").json()["status"] == "finished"
        assert [(e["kind"], e["step"]) for e in c.get(f"/api/v1/runs/{done}/events").json()["events"]] == [("end", 29)]
        assert c.get(f"/api/v1/runs/{done}/diagnosis").json()["verdict"]["state"] == "healthy"
        # short of its total, the same silence is a dead trainer: paged, and left running
        assert c.get(f"/api/v1/runs/{dead}").json()["status"] == "running"
        diag = c.get(f"/api/v1/runs/{dead}/diagnosis").json()
        assert [a["rule"] for a in diag["firing"]] == ["trainer_silent"]
        assert diag["verdict"]["faults"][0]["cause"] == "trainer_silent"
