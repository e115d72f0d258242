"""Installed, Parallax is one import namespace, and the trainer's client is a light distribution of its own.

The two distributions are built from a clean copy of the repository (wheels into a temporary folder) and each
installed into a fresh virtual environment, as a user would: the client alone (it then logs to a real
`parallax serve`), and the server, which finds the client's wheel as its dependency. Whatever else is in those
environments, our distributions put nothing at the top of site-packages but `parallax` (a namespace package)
and their metadata, and the client's environment has none of the server's stack.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import httpx
import pytest

from tests.servers import ServerProcess

ROOT = Path(__file__).resolve().parent.parent
CLIENT = ROOT / "client"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
CLIENT_PYPROJECT = tomllib.loads((CLIENT / "pyproject.toml").read_text())
FOLDERS = ("server", "dashboard", "alerts", "ingest", "migrations")
#: What the trainer's environment must not get.
SERVER_STACK = ("fastapi", "starlette", "uvicorn", "sqlalchemy", "alembic", "dash", "flask", "plotly", "numpy",
                "psycopg", "pydantic", "yaml", "prometheus_client")
INSTALL_TIMEOUT = 600


# -- the configuration, against the tree ------------------------------------------------------------------------------


def test_every_package_of_the_tree_is_installed_under_parallax():
    setuptools = PYPROJECT["tool"]["setuptools"]
    assert setuptools["package-dir"] == {f"parallax.{f}": f for f in FOLDERS}
    in_tree = sorted(
        ".".join(("parallax", *init.parent.relative_to(ROOT).parts))
        for folder in FOLDERS
        for init in (ROOT / folder).rglob("__init__.py")
        if "__pycache__" not in init.parts
    )
    assert sorted(setuptools["packages"]) == in_tree, "pyproject.toml's [tool.setuptools] packages: add the new package"
    assert PYPROJECT["project"]["scripts"] == {"parallax": "parallax.server.cli:main"}
    assert all(key.startswith("parallax.") for key in PYPROJECT["tool"]["setuptools"]["package-data"])


def test_the_server_depends_on_the_client_at_its_version():
    import parallax.client
    import parallax.server

    client_version = parallax.client.__version__
    assert CLIENT_PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "parallax.client.__version__"}
    assert f"parallax-client=={client_version}" in PYPROJECT["project"]["dependencies"]
    assert PYPROJECT["project"]["version"] == parallax.server.__version__
    assert CLIENT_PYPROJECT["project"]["dependencies"] == ["httpx>=0.27"]
    assert not (CLIENT / "src" / "parallax" / "__init__.py").exists(), "parallax must stay a namespace package"


def test_the_client_imports_only_the_standard_library_and_httpx():
    allowed = set(sys.stdlib_module_names) | {"httpx", "parallax"}
    for path in sorted((CLIENT / "src").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] in allowed, f"{path.relative_to(ROOT)} imports {name}"
                if name.startswith("parallax"):
                    assert name == "parallax.client" or name.startswith("parallax.client."), f"{path} imports {name}"
    # and, loaded, it pulls in nothing of the server's stack (the server's packages are installed here)
    script = "import json, sys, parallax.client; print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} | set(sys.modules))))"
    loaded = json.loads(subprocess.check_output([sys.executable, "-c", script], text=True, cwd=ROOT))
    assert [m for m in loaded if m in SERVER_STACK or (m.startswith("parallax.") and not m.startswith("parallax.client"))] == []


# -- built and installed ----------------------------------------------------------------------------------------------


def run(*argv: str | Path, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=INSTALL_TIMEOUT, **kwargs)
    assert proc.returncode == 0, f"{' '.join(map(str, argv))} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def clean_checkout(dest: Path) -> Path:
    """The repository's files (tracked, and new ones not ignored) copied to ``dest``: no build/, no egg-info, no .venv."""
    try:
        listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                                capture_output=True, check=True).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (an unpacked archive): all but the litter
        litter = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache")
        shutil.copytree(ROOT, dest, ignore=litter, dirs_exist_ok=True)
        return dest
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> Path:
    checkout = clean_checkout(tmp_path_factory.mktemp("checkout"))
    out = tmp_path_factory.mktemp("wheels")
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", out, checkout / "client")
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", out, checkout)
    assert sorted(p.name for p in out.iterdir()) == ["parallax_client-0.1.0-py3-none-any.whl", "rl_parallax-0.1.0-py3-none-any.whl"]
    return out


def fresh_venv(path: Path) -> tuple[Path, Path]:
    """A new virtual environment (its python, its site-packages), nothing of ours in it."""
    run(sys.executable, "-m", "venv", path)
    python = path / "bin" / "python"
    site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip())
    return python, site


def installed_top_level(site: Path, dist: str) -> set[str]:
    """The first path parts of every file the distribution installed in site-packages (from its RECORD; the console
    script, ``../../../bin/parallax``, is outside)."""
    (info,) = site.glob(f"{dist}-*.dist-info")
    paths = [line.rsplit(",", 2)[0] for line in (info / "RECORD").read_text().splitlines() if line]
    return {p.split("/")[0] for p in paths if not p.startswith("../")}


def assert_one_namespace(site: Path, dist: str) -> None:
    tops = installed_top_level(site, dist)
    assert {t for t in tops if not t.endswith(".dist-info")} == {"parallax"}, tops
    assert not (site / "parallax" / "__init__.py").exists()  # a namespace: the other distribution adds to it
    assert [f for f in FOLDERS if (site / f).exists()] == []


def test_the_client_alone_in_a_fresh_venv_logs_to_a_real_server(wheels, tmp_path):
    python, site = fresh_venv(tmp_path / "venv")
    run(python, "-m", "pip", "install", "--quiet", next(wheels.glob("parallax_client-*.whl")))
    assert_one_namespace(site, "parallax_client")
    assert [m for m in SERVER_STACK if (site / m).exists()] == []
    assert not any(site.glob("rl_parallax*"))

    server = ServerProcess(tmp_path, f"sqlite:///{tmp_path}/server.db").start()
    try:
        script = textwrap.dedent(f"""
            import importlib.util, sys
            from parallax.client import ParallaxCallback, ParallaxClient, ParallaxLogger
            assert not [m for m in {SERVER_STACK!r} if importlib.util.find_spec(m) is not None]
            assert importlib.util.find_spec("parallax.server") is None
            with ParallaxClient({server.url!r}, project="packaging", run="client-venv", config={{"k": 8}},
                                spool_dir=False, flush_interval=0.05) as px:
                for step in range(20):
                    px.log({{"entropy": 2.0 - step / 100, "actor/entropy": 2.0 - step / 100}}, step=step)
                assert px.flush(30), px.stats()
            with ParallaxLogger({server.url!r}, project="packaging", framework="verl", spool_dir=False) as logger:
                logger.log(data={{"loss": 0.5}}, step=1)
            print(px.stats()["sent"], px.run_id)
        """)
        out = run(python, "-c", script, cwd=tmp_path, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        sent, run_id = out.stdout.split()
        assert sent == "40"
        series = httpx.get(f"{server.url}/api/v1/runs/{run_id}/series", params={"metric": "entropy"}, timeout=10).json()
        assert series["series"]["entropy"]["steps"] == list(range(20))
        runs = httpx.get(f"{server.url}/api/v1/runs", params={"project": "packaging"}, timeout=10).json()["runs"]
        logged = [r for r in runs if r["name"].startswith("verl-")]
        assert len(logged) == 1 and logged[0]["status"] == "finished"
    finally:
        server.stop()


def test_the_server_in_a_fresh_venv_takes_the_client_as_its_dependency(wheels, tmp_path):
    python, site = fresh_venv(tmp_path / "venv")
    run(python, "-m", "pip", "install", "--quiet", "--find-links", wheels, next(wheels.glob("rl_parallax-*.whl")))
    assert_one_namespace(site, "rl_parallax")
    assert_one_namespace(site, "parallax_client")
    for data in ("alerts/rules/default.yaml", "migrations/script.py.mako", "dashboard/assets/parallax.css",
                 "dashboard/assets/vendor/plotly-basic.min.js"):
        assert (site / "parallax" / data).is_file(), data
    parallax = tmp_path / "venv" / "bin" / "parallax"
    assert run(parallax, "--version").stdout.strip() == "parallax 0.1.0"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PARALLAX_") and k != "PYTHONPATH"},
           "PARALLAX_DATABASE_URL": f"sqlite:///{tmp_path}/db.sqlite"}
    run(parallax, "db", "upgrade", cwd=tmp_path, env=env)  # the migrations, found where they were installed
    run(parallax, "rules", "check", site / "parallax" / "alerts" / "rules" / "default.yaml", cwd=tmp_path, env=env)
    check = "import parallax.server.app as a, parallax.client as c; a.create_app; print(c.ParallaxClient.__module__)"
    assert run(python, "-c", check, cwd=tmp_path, env=env).stdout.strip() == "parallax.client.client"
