"""The alert state machine, table-driven, with a fake clock (steps and times are given)."""

import pytest

from parallax.alerts.lifecycle import advance


def run(seq, for_steps, keep):
    """Feed (step, active) pairs; return the transitions as (step, from, to) and the final state."""
    state, out = None, []
    for step, active in seq:
        state, moves = advance(
            state, active, rule="r", run_id=1, step=step, time=1000.0 + step, for_steps=for_steps,
            keep_firing_for=keep, causes=({"id": "stale_rollouts", "score": 1.0, "evidence": [], "advice": ""},) if active else (),
        )
        out += [(m.step, m.from_state, m.to_state) for m in moves]
    return out, state


CASES = [
    # name, for, keep_firing_for, (step, active)..., expected transitions
    ("fires at once without for", 0, 0, [(1, False), (2, True), (3, True), (4, False)],
     [(2, "inactive", "pending"), (2, "pending", "firing"), (4, "firing", "resolved")]),
    ("pending until for steps have passed", 3, 0, [(10, True), (11, True), (12, True), (13, True), (14, False)],
     [(10, "inactive", "pending"), (13, "pending", "firing"), (14, "firing", "resolved")]),
    ("a pending alert that clears is dropped", 3, 0, [(10, True), (11, True), (12, False), (13, False)],
     [(10, "inactive", "pending"), (12, "pending", "dropped")]),
    ("for counts steps, not evaluations (sparse batches)", 5, 0, [(10, True), (20, True)],
     [(10, "inactive", "pending"), (20, "pending", "firing")]),
    ("keep_firing_for holds a flapping alert", 0, 3, [(1, True), (2, False), (3, False), (4, True), (5, False), (8, False)],
     [(1, "inactive", "pending"), (1, "pending", "firing"), (8, "firing", "resolved")]),
    ("after resolved a new activation is a new alert", 0, 0, [(1, True), (2, False), (3, True)],
     [(1, "inactive", "pending"), (1, "pending", "firing"), (2, "firing", "resolved"), (3, "inactive", "pending"), (3, "pending", "firing")]),
    ("inactive stays quiet", 2, 2, [(1, False), (2, False)], []),
]


@pytest.mark.parametrize("name, for_steps, keep, seq, expected", CASES, ids=[c[0] for c in CASES])
def test_transitions(name, for_steps, keep, seq, expected):
    got, _ = run(seq, for_steps, keep)
    assert got == expected


def test_firing_alert_carries_its_start_and_evidence():
    state, moves = None, []
    for step in (5, 6, 7):
        state, m = advance(state, True, rule="r", run_id=3, step=step, time=float(step), for_steps=2, keep_firing_for=0,
                           value=float(step), summary=f"at {step}", causes=({"id": "token_mismatch"},))
        moves += m
    assert state.state == "firing" and state.active_since_step == 5 and state.fired_step == 7
    assert state.value == 7.0 and state.summary == "at 7"
    assert moves[-1].top_cause == "token_mismatch" and moves[-1].notifies
    assert not moves[0].notifies  # pending is not notified
    state, m = advance(state, False, rule="r", run_id=3, step=8, time=8.0, for_steps=2, keep_firing_for=0)
    assert state is None and m[0].alert.ended_step == 8 and m[0].alert.fired_step == 7 and m[0].notifies
