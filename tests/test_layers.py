"""Imports point one way (DESIGN §3): the store keeps alert states without the lifecycle that computes them, and
ingest/ and alerts/ know nothing of the web stack or the server. Each check imports in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def loaded_after(code: str) -> list[str]:
    """The modules a fresh interpreter holds after running ``code``."""
    script = textwrap.dedent(code) + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"
    return json.loads(subprocess.check_output([sys.executable, "-c", script], cwd=ROOT, text=True, timeout=120))


def test_the_store_does_not_import_the_alert_lifecycle():
    loaded = loaded_after("import parallax.server.store.sql, parallax.server.store.alerts")
    assert "parallax.alerts.states" in loaded
    assert [m for m in loaded if m.startswith("parallax.alerts.") and m != "parallax.alerts.states"] == []


def test_ingest_and_alerts_import_nothing_of_the_web_stack_or_the_server():
    loaded = loaded_after("""
        import importlib, pkgutil
        import parallax.alerts, parallax.ingest
        for package in (parallax.alerts, parallax.ingest):
            for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
                importlib.import_module(module.name)
    """)
    web = ("fastapi", "starlette", "dash", "flask", "plotly", "sqlalchemy", "uvicorn")
    assert [m for m in loaded if m.split(".")[0] in web] == []
    assert [m for m in loaded if m.startswith(("parallax.server", "parallax.dashboard"))] == []
