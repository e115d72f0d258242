"""A real TRL GRPOTrainer run (CPU, a tiny random Llama built locally) reported by ParallaxCallback to a real
`parallax serve`, as a user would: the run, its status, its panels, and no alert on it.

trl, transformers and CPU torch come with the test extra (``pip install -e '.[test]'``, as ``make install`` does).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from parallax.client import ParallaxClient
from tests.servers import parallax_server, server_env

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "scripts" / "trl_grpo.py"


def get(url: str, path: str, **params: object) -> dict:
    r = httpx.get(url + path, params=params, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def wait_for(check, timeout: float = 90.0, interval: float = 0.5):
    """Poll ``check`` until it returns something true (a deadline, not a duration under test)."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found or time.monotonic() > deadline:
            return found
        time.sleep(interval)


def test_grpo_trainer_run_reported_by_the_callback(tmp_path):
    try:
        import trl  # noqa: F401
    except ImportError:
        pytest.fail("trl is not installed: install the test extra, pip install -e '.[test]' (make install does)")
    env = {"PARALLAX_DATABASE_URL": f"sqlite:///{tmp_path}/parallax.db", "PARALLAX_ALERT_TIMER_SECONDS": "0.5"}
    with parallax_server(tmp_path, env=env) as server:
        script_env = server_env({
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",  # nothing may download
            "HF_HOME": str(tmp_path / "hf"), "XDG_CACHE_HOME": str(tmp_path / "cache"), "TOKENIZERS_PARALLELISM": "false",
            "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        })
        proc = subprocess.run([sys.executable, str(SCRIPT), server.url, str(tmp_path / "work")], cwd=tmp_path,
                              env=script_env, capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, proc.stderr[-4000:]

        runs = get(server.url, "/api/v1/runs", project="trl-e2e")["runs"]
        assert len(runs) == 1
        run = runs[0]
        assert run["name"].startswith("grpo-cat-") and run["status"] == "finished" and run["last_step"] == 6
        config = run["config"]
        assert config["framework"] == "trl" and config["trainer_class"] == "GRPOTrainer" and config["total_steps"] == 6
        assert config["library_versions"]["trl"] and config["library_versions"]["torch"].startswith("2.13.0")
        assert config["num_generations"] == 4  # the training arguments themselves

        # The panels: the canonical metrics TRL's logs feed, at the trainer's global steps.
        rid = run["id"]
        panels = ["entropy", "reward_train", "reward_heldout", "step_s", "kl", "loss", "grad_norm", "clip_frac",
                  "response_length_mean", "truncated_frac", "zero_std_frac", 'reward_train{reward="says_cat"}']
        series = get(server.url, f"/api/v1/runs/{rid}/series", metric=panels)["series"]
        for name in panels:
            steps = series[name]["steps"]
            assert steps == ([3, 6] if name == "reward_heldout" else [1, 2, 3, 4, 5, 6]), name
            assert all(v is not None for v in series[name]["values"]), name
        assert all(0 < v < 60 for v in series["step_s"]["values"])
        # evaluate() after train() arrived: its eval_reward is the last one at step 6
        raw = get(server.url, f"/api/v1/runs/{rid}/series", metric="eval_reward")["series"]["eval_reward"]
        assert raw["steps"] == [3, 6] and series["reward_heldout"]["values"] == raw["values"]
        latest = {m["name"] for m in get(server.url, f"/api/v1/runs/{rid}/metrics")["metrics"]}
        # synchronous GRPO: no stall, no staleness, no raw importance weight; step_time is not the step's time
        assert not {"stall_s", "staleness_mean", "importance_weight_max", "rollout_s"} & latest
        events = [(e["step"], e["kind"]) for e in get(server.url, f"/api/v1/runs/{rid}/events")["events"]]
        assert (6, "end") in events

        # A run left running with the same config pages within seconds; the finished TRL run never does.
        with ParallaxClient(server.url, "trl-e2e-control", "left-running", config={"silent_min_s": 2, "silent_steps": 1},
                            spool_dir=False, flush_interval=0.05) as px:
            for s in range(3):
                px.log({"loss": 1.0, "step_s": 0.2}, step=s)
        control = wait_for(lambda: get(server.url, "/api/v1/alerts", state="firing")["alerts"])
        assert [a["rule"] for a in control] == ["trainer_silent"] and control[0]["run_id"] != rid
        assert get(server.url, "/api/v1/alerts", run_id=rid)["alerts"] == []
        assert get(server.url, f"/api/v1/runs/{rid}/diagnosis")["firing"] == []
