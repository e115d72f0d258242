"""A run's verdict: healthy, or the faults its pages found, with causes and step ranges.

Built from every alert of the run that ever fired, whatever happened to it
since (resolved when the fault went away, or when the run finished, acked,
silenced): a faulty run that ended reads as faulty, not as a run whose alerts
are all quiet. Only pages count (``critical`` and ``warning``); ``info`` alerts
are kept apart as notes. Faults are grouped by the cause their alert ranked
first, ordered by severity (critical first), then by the step they began at,
so a root cause (a NaN, a dead trainer) comes before what followed from it.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from parallax.alerts.states import PAGES

_RANK = {"critical": 0, "warning": 1, "info": 2}
HEALTHY, FAULTY = "healthy", "faulty"


def _group(alerts: list[Mapping[str, Any]]) -> list[dict]:
    by_cause: dict[str, dict] = {}
    for a in sorted(alerts, key=lambda a: (a["fired_step"], a["id"])):
        causes = a.get("causes") or []
        cause = causes[0]["id"] if causes and isinstance(causes[0], Mapping) else None
        key = cause or f"rule:{a['rule']}"
        last = a.get("ended_step")
        if last is None:
            last = a.get("last_active_step", a["fired_step"])
        g = by_cause.get(key)
        if g is None:
            g = by_cause[key] = {"cause": cause, "severity": a["severity"], "first_step": a["fired_step"],
                                 "last_step": last, "ongoing": False, "rules": [], "alerts": []}
        if _RANK.get(a["severity"], 3) < _RANK.get(g["severity"], 3):
            g["severity"] = a["severity"]
        g["first_step"] = min(g["first_step"], a["fired_step"])
        g["last_step"] = max(g["last_step"], last)
        g["ongoing"] = g["ongoing"] or a.get("state") == "firing"
        if a["rule"] not in g["rules"]:
            g["rules"].append(a["rule"])
        g["alerts"].append(a["id"])
    return sorted(by_cause.values(), key=lambda g: (_RANK.get(g["severity"], 3), g["first_step"]))


def verdict(alerts: Iterable[Mapping[str, Any]]) -> dict:
    """The verdict from a run's alerts (dicts with id, rule, severity, state, fired_step, last_active_step,
    ended_step, causes); alerts that never fired are left out."""
    fired = [a for a in alerts if a.get("fired_step") is not None]
    faults = _group([a for a in fired if a["severity"] in PAGES])
    notes = _group([a for a in fired if a["severity"] not in PAGES])
    if not faults:
        return {"state": HEALTHY, "summary": "healthy: no rule paged", "faults": [], "notes": notes}
    parts = [f"{g['cause'] or g['rules'][0]} ({g['severity']}, steps {g['first_step']}-{g['last_step']}"
             + (", ongoing)" if g["ongoing"] else ")") for g in faults]
    summary = f"{len(faults)} fault{'s' if len(faults) > 1 else ''}: " + "; ".join(parts)
    return {"state": FAULTY, "summary": summary, "faults": faults, "notes": notes}
