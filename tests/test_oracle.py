"""The oracle's ceiling for reward hacking within 2 evaluations (``python -m parallax.alerts.oracle``)."""

from __future__ import annotations

import json
import math
import random
import re

import pytest

from parallax.alerts.eval import canonical_series
from parallax.alerts.oracle import Ceiling, ceiling, gaps, main, robust_noise
from parallax.alerts.rules import DEFAULT_PACK
from parallax.alerts.suites import independent, synthetic


def _same(p: dict | None, q: dict | None) -> bool:
    return p is not None and q is not None and p.keys() == q.keys() and all(
        p[k] == q[k] or (math.isnan(p[k]) and math.isnan(q[k])) for k in p)


@pytest.mark.parametrize("family", [synthetic, independent], ids=["synthetic", "independent"])
def test_a_run_drawn_without_its_exploit_differs_only_in_its_rewards_from_its_onset(family):
    runs = family.generate(11, healthy=4, per_cause=2)
    without = family.generate(11, healthy=4, per_cause=2, reward_effect=False)
    assert [s.name for s in runs] == [s.name for s in without]
    hacks = 0
    for a, b in zip(runs, without):
        assert (a.times, a.config, a.events, a.onset) == (b.times, b.config, b.events, b.onset), a.name
        ca, cb = canonical_series(a), canonical_series(b)
        differ = {k for k in set(ca) | set(cb) if not _same(ca.get(k), cb.get(k))}
        if a.cause != "reward_hacking":
            assert not differ, (a.name, differ)
            continue
        hacks += 1
        assert "reward_train" in differ, a.name  # the exploit lifts the training reward
        for k in differ:
            changed = [s for s in ca[k] if not _same({0: ca[k][s]}, {0: cb[k].get(s, -1.0)})]
            assert min(changed) >= a.onset, (a.name, k)
    assert hacks == 2


def test_the_oracle_reads_a_synthetic_exploits_own_ramp():
    """The synthetic exploit adds `up` a step to the training reward and takes `down` a step off the held-out score
    from its onset: the gap the oracle finds at an evaluation is the interval mean of the first less minus the
    second, noise cancelled."""
    runs = synthetic.generate(12, healthy=0, per_cause=2)
    without = {s.name: s for s in synthetic.generate(12, healthy=0, per_cause=2, reward_effect=False)}
    checked = 0
    for sc in (s for s in runs if s.cause == "reward_hacking"):
        up, down = (float(x) for x in re.match(r"train \+([\d.]+)/step, held-out -([\d.]+)/step", sc.variant).groups())
        gf, gc = gaps(sc.series), gaps(without[sc.name].series)
        evals = sorted(gf)
        for prev, e in zip(evals, evals[1:]):
            if prev < sc.onset:
                continue
            steps = [s for s in range(prev + 1, e + 1) if s in sc.series["reward_train"]][-10:]
            expected = up * sum(s - sc.onset + 1 for s in steps) / len(steps) + down * (e - sc.onset + 1)
            assert gf[e] - gc[e] == pytest.approx(expected, rel=0.01, abs=1e-3)
            checked += 1
        c = ceiling(sc, without[sc.name], seed=12, pack_evals=None)
        assert c is not None and c.z and c.z[-1] > 0 and c.evidence == sorted(c.evidence)
    assert checked >= 10


def test_the_gaps_are_the_training_rewards_interval_means_less_the_held_out_score():
    """At every evaluation: the training reward's mean since the evaluation before, at most its last 10 points (runs
    evaluated every 5 to 50 steps), less the held-out score - as `reward_train - reward_heldout` pairs them."""
    spacings = set()
    for sc in (s for seed in (13, 14, 15) for s in independent.generate(seed, healthy=0, per_cause=1)
               if s.cause == "reward_hacking"):
        series = canonical_series(sc)
        train, held = series["reward_train"], series["reward_heldout"]
        g = gaps(series)
        evals = sorted(held)
        assert sorted(g) == evals and len(evals) >= 5
        spacings.add(max(b - a for a, b in zip(evals, evals[1:])))
        for prev, e in zip([None, *evals], evals):
            points = [train[s] for s in sorted(train) if (prev is None or s > prev) and s <= e][-10:]
            assert g[e] == pytest.approx(sum(points) / len(points) - held[e], abs=1e-9), (sc.name, e)
    assert min(spacings) <= 10 < max(spacings)


def test_robust_noise_reads_a_gaussian_sigma_through_a_trend_and_outliers():
    rng = random.Random(3)
    xs = [0.01 * i + rng.gauss(0, 0.2) for i in range(400)]
    xs[50] += 5.0
    assert robust_noise(xs) == pytest.approx(0.2, rel=0.12)
    assert robust_noise([1.0, 2.0, 3.0]) is None  # fewer than 3 differences


def test_a_run_against_itself_gives_the_oracle_no_evidence():
    sc = next(s for s in synthetic.generate(14, healthy=0, per_cause=1) if s.cause == "reward_hacking")
    c = ceiling(sc, sc, seed=14, pack_evals=2)
    assert isinstance(c, Ceiling) and c.evidence and max(c.evidence) == 0.0
    assert c.oracle_evals is None and c.oracle_chance < 0.01
    # its threshold is the pack's budget at its cadence: a chance of 1e-4 a healthy step, spacing steps an evaluation
    assert c.z_alpha == pytest.approx(-__import__("statistics").NormalDist().inv_cdf(1e-4 * c.spacing), abs=1e-3)


def test_the_command_line_reports_pack_and_oracle_per_family(tmp_path, capsys):
    out = tmp_path / "oracle.json"
    assert main(["--family", "synthetic", "--seeds", "15", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "synthetic" in printed and "pack of oracle's" in printed
    doc = json.loads(out.read_text())
    runs, s = doc["runs"], doc["summary"]["synthetic"]
    assert s["runs"] == len(runs) == 8
    within = [r for r in runs if r["oracle_evals"] is not None and r["oracle_evals"] <= 2]
    assert s["oracle_within"] == len(within) and s["pack_within_of_oracle"] <= min(s["pack_within"], len(within))
    assert s["oracle_not_pack"] == [r["scenario"] for r in within if not (r["pack_evals"] and r["pack_evals"] <= 2)]
    # --rules FILE replaces the default pack: the default pack's own file gives the same figures
    again = tmp_path / "again.json"
    assert main(["--family", "synthetic", "--seeds", "15", "--rules", str(DEFAULT_PACK), "--json", str(again)]) == 0
    assert json.loads(again.read_text()) == doc


def test_the_command_line_refuses_a_family_it_cannot_draw_again(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--family", "toyrl", "--seeds", "1"])
    assert exc.value.code == 2
    assert "unknown family 'toyrl'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--seeds", "1,x"])
