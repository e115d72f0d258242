"""The Dash app. For now a runs overview; the dashboard issue builds the eight panels."""

from __future__ import annotations

import time
from typing import Any

from dash import Dash, dcc, html

from ingest.names import INDICATORS


def _age(ts: float | None) -> str:
    if ts is None:
        return "never"
    secs = max(0, int(time.time() - ts))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{secs // size}{unit} ago"
    return f"{secs}s ago"


def runs_table(runs: list[Any]) -> html.Div:
    if not runs:
        return html.Div(
            id="empty-runs",
            children=[
                html.P("No runs yet. Send the first metrics:"),
                html.Pre(
                    "curl -s -X POST http://127.0.0.1:8050/api/v1/runs -H 'content-type: application/json' \\\n"
                    "  -d '{\"project\": \"demo\", \"name\": \"run-1\"}'\n"
                    "curl -s -X POST http://127.0.0.1:8050/api/v1/runs/1/metrics -H 'content-type: application/json' \\\n"
                    "  -d '{\"points\": [{\"step\": 1, \"metrics\": {\"entropy\": 1.9, \"importance_weight_max\": 1.3}}]}'"
                ),
            ],
        )
    header = html.Tr([html.Th(h) for h in ("id", "project", "name", "status", "last step", "last seen")])
    rows = [
        html.Tr([html.Td(r.id), html.Td(r.project), html.Td(r.name), html.Td(r.status),
                 html.Td("" if r.last_step is None else r.last_step), html.Td(_age(r.last_seen_at))])
        for r in runs
    ]
    return html.Table(id="runs-table", children=[html.Thead(header), html.Tbody(rows)])


def build_dash(store: Any, **dash_kwargs: Any) -> Dash:
    app = Dash(
        __name__,
        title="Parallax",
        requests_pathname_prefix="/dashboard/",
        routes_pathname_prefix="/",
        **dash_kwargs,
    )

    def layout() -> html.Div:
        return html.Div(
            [
                html.H1("Parallax"),
                html.P("Live indicators of agentic-RL training: " + ", ".join(INDICATORS) + ", reward_heldout."),
                runs_table(store.list_runs()),
                dcc.Location(id="url"),
            ]
        )

    app.layout = layout
    return app
