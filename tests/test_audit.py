"""Harness audit (issue 7): each break class built from real tokenizations, the API, and `parallax audit`.

A small byte-level BPE tokenizer is trained inside the test (the `tokenizers`
package; nothing is downloaded), with a Qwen-like chat template.
"""

from __future__ import annotations

import json
import math
import random

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from parallax.ingest.audit import AuditInputError, audit, combine, parse_trajectories
from parallax.server.cli import main
from tests.conftest import make_client, new_run

SPECIAL = ["<|im_start|>", "<|im_end|>", "<think>", "</think>"]
WORDS = (
    "the answer is a number we need to add two and three then check result tool call returns observation "
    "user assistant system you are helpful solve problem step first second"
).split()


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    rng = random.Random(0)
    corpus = [" ".join(rng.choice(WORDS) for _ in range(30)) + "\n\n" for _ in range(300)]
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    t.train_from_iterator(corpus, trainer)
    return t


def enc(tok: Tokenizer, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False).ids


def dec(tok: Tokenizer, ids: list[int]) -> str:
    return tok.decode(ids, skip_special_tokens=False)


REASONING = "we need to add two and three then check the result step by step first add then check the answer"


def render(messages: list[tuple[str, str]], keep_reasoning: bool = True) -> str:
    """A Qwen3-like chat template; ``keep_reasoning=False`` drops earlier turns' <think> blocks, as Qwen3's default does."""
    out = []
    for role, content in messages:
        if role == "assistant" and not keep_reasoning and "</think>" in content:
            content = content.split("</think>", 1)[1].lstrip("\n")
        out.append(f"<|im_start|>{role}\n{content}<|im_end|>\n")
    return "".join(out)


def completion_text(i: int) -> str:
    return f"<think>\n{REASONING}\n</think>\n\nthe answer is {i} tool call"


def rollout(tok: Tokenizer, turns: int = 3, harness: str = "tito", step: int = 1, with_text: bool = True) -> dict:
    """A multi-turn rollout; ``harness`` says how the next prompt is assembled:

    tito        exact prefix: previous prompt ids + completion ids + observation ids;
    template    the history re-rendered through a template that drops earlier <think> blocks;
    retokenize  the history detokenized to text and encoded again;
    summarise   earlier turns replaced by a short summary.
    """
    messages = [("system", "you are helpful"), ("user", "solve the problem add two and three")]
    prompt_text = render(messages) + "<|im_start|>assistant\n"
    prompt = enc(tok, prompt_text)
    out = []
    for i in range(turns):
        text = completion_text(i) + "<|im_end|>"
        # The model emits a space and then the word: the same text, tokens the tokenizer would never produce.
        head, tail = text.split(" tool call")
        completion = enc(tok, head) + enc(tok, " ") + enc(tok, "tool call") + enc(tok, tail)
        assert dec(tok, completion) == text
        out.append({"prompt_ids": prompt, "completion_ids": completion, "prompt_text": prompt_text, "completion_text": text})
        messages.append(("assistant", completion_text(i)))
        obs = f"observation {i} returns the result"
        messages.append(("user", obs))
        obs_text = f"\n<|im_start|>user\n{obs}<|im_end|>\n<|im_start|>assistant\n"
        if harness == "tito":
            prompt, prompt_text = prompt + completion + enc(tok, obs_text), prompt_text + text + obs_text
        elif harness == "template":
            prompt_text = render(messages, keep_reasoning=False) + "<|im_start|>assistant\n"
            prompt = enc(tok, prompt_text)
        elif harness == "retokenize":
            prompt_text = prompt_text + text + obs_text
            prompt = enc(tok, prompt_text)
        elif harness == "summarise":
            prompt_text = render([("system", "you are helpful"), ("user", f"summary: {i + 1} steps done")]) + "<|im_start|>assistant\n"
            prompt = enc(tok, prompt_text)
    if not with_text:
        for t in out:
            del t["prompt_text"], t["completion_text"]
    return {"step": step, "policy_version": step, "turns": out}


def run_audit(*docs):
    steps = audit(parse_trajectories(list(docs)))
    return combine([a.report() for a in steps.values()]), steps


# -- analysis ---------------------------------------------------------------------------


def test_exact_prefix_harness_passes(tok):
    summary, steps = run_audit(rollout(tok, 4, "tito"), rollout(tok, 2, "tito"))
    assert summary["passed"] and summary["pairs"] == 4 and summary["breaks"] == 0
    m = steps[1].metrics()
    assert m["prefix_break_rate"] == 0.0 and m["audit_turns"] == 6.0 and "token_mismatch_rate" not in m


@pytest.mark.parametrize("with_text", [True, False])
def test_template_dropping_reasoning(tok, with_text):
    summary, steps = run_audit(rollout(tok, 3, "template", with_text=with_text))
    assert summary["kinds"] == {"reasoning_removed": 2}
    assert not summary["checks"]["template"]["passed"] and summary["checks"]["prefix"]["passed"]
    assert steps[1].metrics()["prefix_break_rate"] == 1.0
    ex = summary["examples"][0]
    think = enc(tok, "<think>")[0]
    # The first difference is where the <think> block was: the rollout had it, the next prompt does not.
    assert ex["expected"][ex["position"] - ex["window_start"]] == think
    assert think not in ex["actual"]


@pytest.mark.parametrize("with_text", [True, False])
def test_whitespace_that_retokenizes_differently(tok, with_text):
    doc = rollout(tok, 2, "retokenize", with_text=with_text)
    first, second = doc["turns"]
    history = first["prompt_ids"] + first["completion_ids"]
    # The harness kept the text of the history exactly; only its ids changed.
    assert dec(tok, second["prompt_ids"]).startswith(dec(tok, history)) and second["prompt_ids"][: len(history)] != history
    summary, _ = run_audit(doc)
    assert summary["kinds"] == {"retokenization_drift": 1}
    assert not summary["checks"]["tokens"]["passed"] and summary["checks"]["prefix"]["passed"]
    ex = summary["examples"][0]
    # The model's " " + "tool" against the tokenizer's " tool": equal text, different ids.
    at = ex["position"] - ex["window_start"]
    assert ex["expected"][at] == enc(tok, " ")[0] and ex["actual"][at] == enc(tok, " tool")[0], (ex, enc(tok, " tool"))


def test_history_summarised(tok):
    summary, _ = run_audit(rollout(tok, 3, "summarise"), rollout(tok, 3, "summarise", with_text=False))
    assert summary["kinds"] == {"history_summarised": 4}
    assert not summary["checks"]["prefix"]["passed"] and summary["checks"]["template"]["passed"]


def test_trainer_retokenizing_the_stream_is_a_token_mismatch(tok):
    doc = rollout(tok, 2, "tito")
    first, second = doc["turns"]
    first["trainer_ids"] = first["prompt_ids"] + first["completion_ids"]  # trainer got the tokens
    second["trainer_ids"] = enc(tok, second["prompt_text"] + second["completion_text"])  # trainer re-encoded the text
    summary, steps = run_audit(doc)
    assert steps[1].metrics()["token_mismatch_rate"] == 0.5
    assert summary["kinds"] == {"token_stream_mismatch": 1}
    ex = summary["examples"][0]
    assert ex["turn"] == 1 and ex["expected"] != ex["actual"]


def test_importance_weights_over_action_tokens_only(tok):
    doc = rollout(tok, 2, "tito")
    for t in doc["turns"]:
        n = len(t["completion_ids"])
        t["rollout_logprobs"] = [-1.0] * n
        t["trainer_logprobs"] = [-1.0] * n
    doc["turns"][1]["trainer_logprobs"][3] = -0.5  # trainer more confident: weight e^0.5
    doc["turns"][0]["rollout_logprobs"][0] = -0.25  # rollout more confident: |diff| 0.75, weight e^-0.75
    # Full-sequence log-probabilities: the prompt's positions (loss mask 0) do not count, however far apart.
    t0 = doc["turns"][0]
    n_p = len(t0["prompt_ids"])
    t0["trainer_logprobs"] = [-50.0] * n_p + t0["trainer_logprobs"]
    t0["rollout_logprobs"] = [-0.1] * n_p + t0["rollout_logprobs"]
    _, steps = run_audit(doc)
    m = steps[1].metrics()
    assert m["logprob_diff_max"] == pytest.approx(0.75)
    assert m["importance_weight_max"] == pytest.approx(math.exp(0.5))


def test_text_only_turns_are_flagged_not_refused():
    doc = {"step": 3, "turns": [{"prompt_text": "hi", "completion_text": "<think>x</think>ok"}, {"prompt_text": "hiok", "completion_text": "fine"}]}
    summary, steps = run_audit(doc)
    # The prefix is still checked on the texts: this template dropped the <think> block.
    assert summary["kinds"] == {"text_only": 2, "reasoning_removed": 1} and not summary["checks"]["tokens"]["passed"]
    assert steps[3].metrics()["audit_text_only_rate"] == 1.0 and steps[3].metrics()["prefix_break_rate"] == 1.0
    tokens = [e for e in summary["examples"] if e["check"] == "tokens"]
    assert tokens[0]["title"] == "rollouts not stored as tokens"
    template = [e for e in summary["examples"] if e["check"] == "template"]
    assert template[0]["text"] == {"expected": "hi<think>x</think>ok", "actual": "hiok"}


@pytest.mark.parametrize(
    "turn, loc, words",
    [
        ({"prompt_ids": [1, 2], "completion_ids": [3], "rollout_logprobs": [-1.0, -2.0]}, ["rollout_logprobs"], "2 log-probabilities for 1"),
        ({"prompt_ids": [1, -2], "completion_ids": [3]}, ["prompt_ids", 1], "not -2"),
        ({"prompt_ids": [1, 2.5], "completion_ids": [3]}, ["prompt_ids", 1], "not float"),
        ({"prompt_ids": [1, "2"], "completion_ids": [3]}, ["prompt_ids", 1], "not str"),
        ({"prompt_ids": [[1], [2]], "completion_ids": [3]}, ["prompt_ids", 0], "nested"),
        ({"prompt_ids": [1, 2], "completion_ids": [3], "trainer_logprobs": [-1.0, None]}, ["trainer_logprobs", 1], "numbers"),
        ({"prompt_ids": [1, 2]}, ["completion_ids"], "field required"),
        ({}, ["prompt_ids"], "needs prompt_ids"),
        ({"prompt_ids": [1], "completion_ids": [2], "reward": 1}, ["reward"], "unknown field"),
    ],
)
def test_bad_turns_name_trajectory_turn_and_field(turn, loc, words):
    good = {"prompt_ids": [1], "completion_ids": [2]}
    with pytest.raises(AuditInputError) as err:
        parse_trajectories([{"step": 1, "turns": [good]}, {"step": 1, "turns": [good, turn]}])
    e = err.value.errors[0]
    assert e["loc"] == ["body", "trajectories", 1, "turns", 1, *loc] and words in e["msg"]
    assert e["trajectory"] == 1 and e["turn"] == 1


# -- API --------------------------------------------------------------------------------


def _series(client, run, metric):
    return client.get(f"/api/v1/runs/{run}/series", params={"metric": metric}).json()["series"][metric]


def test_api_stores_results_as_canonical_metrics(client, tok):
    run = new_run(client)
    r = client.post(f"/api/v1/runs/{run}/trajectories", json={"trajectories": [rollout(tok, 3, "tito", step=s) for s in (1, 2)]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["trajectories"] == 2 and body["turns"] == 6 and body["passed"]
    lines = "\n".join(json.dumps(rollout(tok, 3, "template", step=3)) for _ in range(2)) + "\n"
    r = client.post(f"/api/v1/runs/{run}/trajectories", content=lines, headers={"content-type": "application/x-ndjson"})
    assert r.status_code == 200 and not r.json()["passed"]
    assert r.json()["steps"]["3"]["checks"] == {"prefix": 0, "template": 4, "tokens": 0}
    s = _series(client, run, "prefix_break_rate")
    assert s["steps"] == [1, 2, 3] and s["values"] == [0.0, 0.0, 1.0]
    audit_doc = client.get(f"/api/v1/runs/{run}/audit").json()
    assert audit_doc["steps"] == [1, 2, 3] and audit_doc["turns"] == 12
    assert audit_doc["checks"]["template"] == {"title": "template keeps earlier reasoning", "checked": 8, "failed": 4, "passed": False}
    assert audit_doc["checks"]["prefix"]["passed"] and len(audit_doc["examples"]) == 4
    assert [p["step"] for p in audit_doc["per_step"]] == [1, 2, 3]


def test_api_step_audited_again_is_replaced(sqlite_client, tok):
    client = sqlite_client
    run = new_run(client)
    doc = {"trajectories": [rollout(tok, 2, "summarise", step=5)]}
    for _ in range(2):
        assert client.post(f"/api/v1/runs/{run}/trajectories", json=doc).status_code == 200
    a = client.get(f"/api/v1/runs/{run}/audit").json()
    assert a["trajectories"] == 1 and a["checks"]["prefix"]["failed"] == 1
    doc = {"trajectories": [rollout(tok, 2, "tito", step=5)]}
    assert client.post(f"/api/v1/runs/{run}/trajectories", json=doc).json()["passed"]
    assert client.get(f"/api/v1/runs/{run}/audit").json()["passed"]
    assert _series(client, run, "prefix_break_rate")["values"] == [0.0]


def test_api_bad_input_is_422_naming_trajectory_turn_and_field(sqlite_client):
    client = sqlite_client
    run = new_run(client)
    bad = {"trajectories": [{"step": 1, "turns": [{"prompt_ids": [1], "completion_ids": [2, 3], "rollout_logprobs": [-1.0]}]}]}
    r = client.post(f"/api/v1/runs/{run}/trajectories", json=bad)
    assert r.status_code == 422
    e = r.json()["detail"][0]
    assert e["loc"] == ["body", "trajectories", 0, "turns", 0, "rollout_logprobs"] and e["trajectory"] == 0 and e["turn"] == 0
    line = json.dumps({"step": 1, "turns": [{"prompt_ids": [1, -5], "completion_ids": [2]}]})
    r = client.post(f"/api/v1/runs/{run}/trajectories", content=line, headers={"content-type": "application/x-ndjson"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", 0, "turns", 0, "prompt_ids", 1]
    assert client.post(f"/api/v1/runs/{run}/trajectories", json={"points": []}).status_code == 422
    assert client.post(f"/api/v1/runs/{run}/trajectories", content="{", headers={"content-type": "application/json"}).status_code == 400
    assert client.post("/api/v1/runs/999/trajectories", json={"trajectories": []}).status_code == 404
    assert client.get(f"/api/v1/runs/{run}/audit").json()["steps"] == []  # nothing stored by the refused batches
    text_only = {"trajectories": [{"step": 2, "turns": [{"prompt_text": "a", "completion_text": "b"}]}]}
    r = client.post(f"/api/v1/runs/{run}/trajectories", json=text_only)
    assert r.status_code == 200 and r.json()["steps"]["2"]["checks"]["tokens"] == 1
    ex = client.get(f"/api/v1/runs/{run}/audit").json()["examples"]
    assert ex[0]["title"] == "rollouts not stored as tokens"


def test_api_trajectories_need_the_write_token(tmp_path):
    with make_client(database_url=f"sqlite:///{tmp_path}/p.db", token="s3cret") as client:
        auth = {"Authorization": "Bearer s3cret"}
        run = client.post("/api/v1/runs", json={"project": "p", "name": "r"}, headers=auth).json()["id"]
        doc = {"trajectories": [{"step": 1, "turns": [{"prompt_ids": [1], "completion_ids": [2]}]}]}
        assert client.post(f"/api/v1/runs/{run}/trajectories", json=doc).status_code == 401
        assert client.post(f"/api/v1/runs/{run}/trajectories", json=doc, headers=auth).status_code == 200


# -- parallax audit ---------------------------------------------------------------------


def test_cli_audit_exit_codes(tok, tmp_path, capsys):
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(json.dumps(rollout(tok, 3, "tito", step=s)) for s in range(3)) + "\n")
    assert main(["audit", str(good)]) == 0
    out = capsys.readouterr().out
    assert "PASS" in out and "FAIL" not in out and "3 trajectories" in out
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(rollout(tok, 3, "template")) + "\n\n" + json.dumps(rollout(tok, 2, "retokenize")) + "\n")
    assert main(["audit", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "earlier reasoning removed" in out and "re-tokenization drift" in out
    assert main(["audit", str(bad), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["kinds"] == {"reasoning_removed": 2, "retokenization_drift": 1}
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps(rollout(tok, 1)) + "\n\n" + json.dumps({"step": 1, "turns": [{"prompt_ids": [1], "completion_ids": [-1]}]}) + "\n")
    assert main(["audit", str(broken)]) == 2
    assert "line 3.turns.0.completion_ids.0" in capsys.readouterr().err
    assert main(["audit", str(tmp_path / "missing.jsonl")]) == 2


def test_audit_metrics_feed_the_default_rules(sqlite_url, tok):
    """Steps whose template drops reasoning: the default pack's token-mismatch rule fires from the audit's metrics alone."""
    with make_client(database_url=sqlite_url, alert_timer_seconds=0) as client:
        run = new_run(client)
        for step in range(12):
            doc = {"trajectories": [rollout(tok, 2, "template" if step >= 6 else "tito", step=step)]}
            assert client.post(f"/api/v1/runs/{run}/trajectories", json=doc).status_code == 200
        firing = client.get("/api/v1/alerts", params={"run_id": run, "state": "firing"}).json()["alerts"]
        assert "token_mismatch_metrics" in [a["rule"] for a in firing]
        a = next(a for a in firing if a["rule"] == "token_mismatch_metrics")
        assert a["causes"][0]["id"] == "token_mismatch"


def test_api_non_finite_logprobs_are_stored_as_markers(client):
    run = new_run(client)
    raw = json.dumps({"trajectories": [{"step": 4, "turns": [
        {"prompt_ids": [1], "completion_ids": [2, 3], "rollout_logprobs": [-1.0, float("-inf")], "trainer_logprobs": [-1.0, -2.0]},
        {"prompt_ids": [1, 2, 3], "completion_ids": [4], "rollout_logprobs": [float("nan")], "trainer_logprobs": [-1.0]},
    ]}]})
    r = client.post(f"/api/v1/runs/{run}/trajectories", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text
    s = client.get(f"/api/v1/runs/{run}/series", params={"metric": ["importance_weight_max", "logprob_diff_max"]}).json()["series"]
    assert s["importance_weight_max"]["non_finite"] == {"steps": [4], "values": ["NaN"]}
    assert s["logprob_diff_max"]["non_finite"]["steps"] == [4]
    doc = client.get(f"/api/v1/runs/{run}/audit").json()
    assert doc["per_step"][0]["metrics"]["importance_weight_max"] == "NaN" and doc["importance_weight_max"] is None


def test_cli_reads_a_json_document_and_stdin(tok, tmp_path, capsys, monkeypatch):
    import io

    doc = tmp_path / "dump.json"
    doc.write_text(json.dumps({"trajectories": [rollout(tok, 2, "summarise")]}, indent=1))
    assert main(["audit", str(doc), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["kinds"] == {"history_summarised": 1}
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(rollout(tok, 2, "tito")) + "\n"))
    assert main(["audit", "-"]) == 0
