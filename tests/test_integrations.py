"""ParallaxCallback and ParallaxLogger against a real `parallax serve`: they behave like W&B's integrations.

A run gets a unique name unless asked to resume; it is marked finished at the end
of training and failed when the process dies of an exception first; metrics of an
evaluate() after train() still arrive; the config records the framework, the
trainer class, library versions and the total steps. The Trainer here is played
by the calls it makes (tests/test_trl_run.py drives a real TRL GRPOTrainer).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from types import SimpleNamespace

import httpx
import pytest

from parallax.client import ParallaxCallback, ParallaxLogger, unique_run_name
from tests.test_client import FAST, ROOT, Server


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Server:
    s = Server(tmp_path_factory.mktemp("integrations-server")).start()
    yield s
    s.stop()


def run_doc(server: Server, run_id: int) -> dict:
    r = httpx.get(f"{server.url}/api/v1/runs/{run_id}", timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def runs_named(server: Server, project: str) -> list[dict]:
    return httpx.get(f"{server.url}/api/v1/runs", params={"project": project}, timeout=10).json()["runs"]


class GRPOConfig(SimpleNamespace):
    """Training arguments as the callback reads them (to_dict, run_name, output_dir, max_steps)."""

    def to_dict(self) -> dict:
        return {k: v for k, v in vars(self).items()}


class GRPOTrainer:
    """Plays the Trainer: it owns a callback_handler and calls the callback's events in a Trainer's order."""

    __module__ = "trl.trainer.grpo_trainer"

    def __init__(self, callback: ParallaxCallback, args: GRPOConfig, max_steps: int = 6):
        self.callback_handler = self
        self.cb, self.args = callback, args
        self.state = SimpleNamespace(global_step=0, max_steps=max_steps, is_world_process_zero=True)
        self.control = object()
        assert self.cb.on_init_end(self.args, self.state, self.control) is self.control

    def train(self, fail_at: int | None = None, start: int = 0) -> None:
        self.state.global_step = start
        self.cb.on_train_begin(self.args, self.state, self.control)
        for s in range(start + 1, self.state.max_steps + 1):
            self.cb.on_step_begin(self.args, self.state, self.control)
            if s == fail_at:
                raise RuntimeError("CUDA error: an illegal memory access was encountered")
            self.state.global_step = s
            self.cb.on_step_end(self.args, self.state, self.control)
            self.cb.on_log(self.args, self.state, self.control, logs={"loss": 0.5, "reward": s / 10, "entropy": 1.0 - s / 20,
                                                                      "step_time": 0.01, "epoch": s / 6})
            if s % 3 == 0:
                self.cb.on_save(self.args, self.state, self.control)
        self.cb.on_train_end(self.args, self.state, self.control)

    def evaluate(self) -> None:
        self.cb.on_log(self.args, self.state, self.control, logs={"eval_reward": 0.42, "eval_runtime": 1.0, "epoch": 1.0})
        self.cb.on_evaluate(self.args, self.state, self.control, metrics={"eval_reward": 0.42})


def test_callback_run_is_unique_finished_and_evaluate_after_train_arrives(server, tmp_path):
    names = set()
    for i in range(2):  # the same script twice: two runs, not one overwritten
        cb = ParallaxCallback(server.url, project="cb", spool_dir=tmp_path / f"cb{i}", **FAST)
        trainer = GRPOTrainer(cb, GRPOConfig(output_dir="trainer_output", run_name=None, learning_rate=1e-6 * (i + 1), max_steps=-1))
        trainer.train()
        run_id = cb.client.run_id
        assert run_doc(server, run_id)["status"] == "finished"
        trainer.evaluate()  # after train(): still delivered
        assert cb.client.flush(10)
        doc = run_doc(server, run_id)
        names.add(doc["name"])
        assert doc["name"].startswith("trainer_output-") and doc["status"] == "finished"
        config = doc["config"]
        assert config["framework"] == "trl" and config["trainer_class"] == "GRPOTrainer" and config["total_steps"] == 6
        assert config["learning_rate"] == 1e-6 * (i + 1) and "library_versions" in config
        latest = {m["name"]: m for m in httpx.get(f"{server.url}/api/v1/runs/{run_id}/metrics").json()["metrics"]}
        assert latest["eval_reward"]["value"] == 0.42 and latest["reward_heldout"]["step"] == 6
        assert latest["reward_train"]["value"] == 0.6 and "step_s" in latest and "step_time" in latest
        events = httpx.get(f"{server.url}/api/v1/runs/{run_id}/events").json()["events"]
        kinds = [(e["step"], e["kind"]) for e in events]
        assert (3, "checkpoint") in kinds and (6, "checkpoint") in kinds and (6, "end") in kinds
        cb._at_exit()  # the interpreter's exit: the run stays finished
        assert run_doc(server, run_id)["status"] == "finished"
    assert len(names) == 2


def test_callback_resumes_only_when_asked(server, tmp_path):
    args = GRPOConfig(output_dir="out/exp", run_name="grpo-lr", max_steps=4)
    first = ParallaxCallback(server.url, project="resume", resume=True, spool_dir=tmp_path / "a", **FAST)
    GRPOTrainer(first, args, max_steps=4).train()
    first._at_exit()
    again = ParallaxCallback(server.url, project="resume", resume=True, spool_dir=tmp_path / "b", **FAST)
    trainer = GRPOTrainer(again, args, max_steps=8)
    trainer.train(start=4)  # from the checkpoint at step 4
    assert again.client.run_id == first.client.run_id and again.client.run == "grpo-lr"
    events = httpx.get(f"{server.url}/api/v1/runs/{again.client.run_id}/events").json()["events"]
    assert (4, "resume") in [(e["step"], e["kind"]) for e in events]
    assert run_doc(server, again.client.run_id)["status"] == "finished"
    again._at_exit()
    named = ParallaxCallback(server.url, project="resume", run="grpo-lr", spool_dir=tmp_path / "c", **FAST)
    GRPOTrainer(named, args, max_steps=9).train(start=8)
    assert named.client.run_id == first.client.run_id
    named._at_exit()
    assert [r["name"] for r in runs_named(server, "resume")] == ["grpo-lr"]


def test_callback_marks_the_run_failed_when_training_dies(server, tmp_path):
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from tests.test_integrations import GRPOConfig, GRPOTrainer
        from parallax.client import ParallaxCallback
        cb = ParallaxCallback({server.url!r}, project="dies", run="crash", spool_dir={str(tmp_path)!r},
                              flush_interval=0.05)
        GRPOTrainer(cb, GRPOConfig(output_dir="o", run_name=None, max_steps=6)).train(fail_at=4)
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "illegal memory access" in proc.stderr
    run = next(r for r in runs_named(server, "dies") if r["name"] == "crash")
    assert run["status"] == "failed" and run["last_step"] == 3


def test_callback_with_a_client_of_ones_own(server, tmp_path):
    from parallax.client import ParallaxClient

    px = ParallaxClient(server.url, "own", "mine", spool_dir=tmp_path, **FAST)
    cb = ParallaxCallback(client=px)
    GRPOTrainer(cb, GRPOConfig(output_dir="o", max_steps=3), max_steps=3).train()
    assert run_doc(server, px.run_id)["status"] == "finished"
    cb._at_exit()
    px.log({"after": 1.0}, step=3)  # not closed by the callback
    assert px.close(10)


def test_logger_names_finishes_and_fails(server, tmp_path):
    with ParallaxLogger(server.url, project="lg", framework="verl", trainer_class="RayPPOTrainer",
                        config={"trainer": {"total_training_steps": 5}}, spool_dir=tmp_path / "a", **FAST) as lg:
        for s in range(5):
            lg.log(data={"actor/entropy": 1.5, "critic/score/mean": 0.1 * s, "response_length/mean": 300}, step=s)
        lg.add_scalar("train/kl", 0.01, 5)
        lg.add_scalars("eval", {"pass@1": 0.3}, 5)
    doc = run_doc(server, lg.client.run_id)
    assert doc["status"] == "finished" and doc["name"].startswith("verl-") and doc["config"]["framework"] == "verl"
    assert doc["config"]["trainer_class"] == "RayPPOTrainer" and "torch" in doc["config"]["library_versions"]
    latest = {m["name"] for m in httpx.get(f"{server.url}/api/v1/runs/{lg.client.run_id}/metrics").json()["metrics"]}
    assert {"entropy", "reward_train", "eval/pass@1", "train/kl"} <= latest

    with pytest.raises(ValueError):
        with ParallaxLogger(server.url, project="lg", run="broken", spool_dir=tmp_path / "b", **FAST) as lg2:
            lg2.log_train(1, {"policy_loss": 0.1, "entropy_loss": 0.9})
            lg2.log_eval(1, {"eval_math_pass1": 0.2})
            raise ValueError("reward model down")
    doc = run_doc(server, lg2.client.run_id)
    assert doc["status"] == "failed" and doc["name"] == "broken"
    latest = {m["name"] for m in httpx.get(f"{server.url}/api/v1/runs/{lg2.client.run_id}/metrics").json()["metrics"]}
    assert {"train/entropy_loss", "eval/eval_math_pass1"} <= latest


def test_unique_names_differ():
    assert len({unique_run_name("x") for _ in range(50)}) > 45
