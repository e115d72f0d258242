"""`parallax` command line: serve, demo, db upgrade|current, rules check|test, audit, import, export."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Sequence

from pydantic import ValidationError

from parallax.server import __version__


def _settings(args: argparse.Namespace) -> Any:
    from parallax.server.config import Settings

    overrides = {k: v for k, v in vars(args).items() if k in Settings.model_fields and v is not None and v is not False}
    extra_rules = overrides.pop("rules", [])
    settings = Settings(**overrides)
    if extra_rules:  # --rules adds packs to those of the environment or parallax.toml
        settings = settings.model_copy(update={"rules": [*settings.rules, *extra_rules]})
    return settings


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from parallax.server.app import create_app
    from parallax.server.migrate import SchemaOutOfDate
    from parallax.server.security import is_loopback

    settings = _settings(args)
    if not is_loopback(settings.host) and settings.token is None and not settings.insecure:
        print(
            f"parallax: refusing to listen on {settings.host} without a write token: "
            "set PARALLAX_TOKEN, or pass --insecure to accept unauthenticated writes",
            file=sys.stderr,
        )
        return 2
    from parallax.alerts.rules import RuleError

    try:
        app = create_app(settings, tune_gc=True)
    except (SchemaOutOfDate, RuleError) as exc:
        print(f"parallax: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:  # notification channels set up incompletely
        print(f"parallax: invalid settings: {exc}", file=sys.stderr)
        return 2
    shown_host = f"[{settings.host}]" if ":" in settings.host else settings.host
    print(f"Parallax {__version__} on http://{shown_host}:{settings.port}/ (dashboard /dashboard/, API /api/v1, docs /api/docs)", flush=True)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        access_log=False,
        log_level=settings.log_level,
        lifespan="on",
        server_header=False,
        timeout_keep_alive=settings.keep_alive_seconds,
    )
    try:
        uvicorn.Server(config).run()
    except KeyboardInterrupt:
        # uvicorn has already shut down cleanly; it re-raises the Ctrl-C it handled, which would
        # otherwise end `parallax serve` with a traceback.
        pass
    return 0


def cmd_db(args: argparse.Namespace) -> int:
    from parallax.server.migrate import current_revision, head_revision, upgrade
    from parallax.server.store.sql import make_engine

    settings = _settings(args)
    engine = make_engine(settings.database_url)
    shown = engine.url.render_as_string(hide_password=True)
    try:
        if args.db_command == "upgrade":
            before = current_revision(engine)
            upgrade(engine)
            print(f"{shown}: schema {before or 'empty'} -> {current_revision(engine)}")
        else:
            current = current_revision(engine)
            head = head_revision()
            print(f"{shown}: schema {current or 'empty'} (newest: {head})")
            return 0 if current == head else 3
    finally:
        engine.dispose()
    return 0


def cmd_rules(args: argparse.Namespace) -> int:
    from parallax.alerts.rules import RuleError, load_rules
    from parallax.alerts.ruletest import RuleTestError, run_file

    if args.rules_command == "check":
        try:
            rules = load_rules(args.files, include_default=False)
        except RuleError as exc:
            print(f"parallax: {exc}", file=sys.stderr)
            return 1
        for path in args.files:
            names = [r.name for r in rules if r.source == str(path)]
            print(f"{path}: {len(names)} rules OK ({', '.join(names)})")
        return 0
    failed = 0
    for path in args.files:
        try:
            outcomes = run_file(path)
        except (RuleError, RuleTestError) as exc:
            print(f"parallax: {exc}", file=sys.stderr)
            return 1
        for outcome in outcomes:
            print(f"{'PASS' if outcome.ok else 'FAIL'} {path}: {outcome.name}")
            for failure in outcome.failures:
                print(f"    {failure}")
            failed += not outcome.ok
    print(f"{failed} failed" if failed else "all rule tests passed")
    return 1 if failed else 0


def cmd_audit(args: argparse.Namespace) -> int:
    from parallax.ingest.audit import run_audit_file

    return run_audit_file(args.file, as_json=args.json, examples=args.examples)


def cmd_import(args: argparse.Namespace) -> int:
    from parallax.ingest.transfer import run_import

    config = {"framework": args.framework} if args.framework else {}
    return run_import(
        args.kind, args.path, url=args.url, token=args.token, project=args.project, run=args.run,
        config=config, batch_values=args.batch_values,
    )


def cmd_export(args: argparse.Namespace) -> int:
    from parallax.ingest.transfer import run_export

    fmt = args.format or ("jsonl" if args.output and args.output.endswith((".jsonl", ".ndjson")) else "csv")
    return run_export(args.run, fmt=fmt, output=args.output, url=args.url, token=args.token, metrics=args.metric)


def cmd_demo(args: argparse.Namespace) -> int:
    from parallax.server.demo import main as demo_main

    return demo_main(args)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _add_server_options(parser: argparse.ArgumentParser) -> None:
    import os

    parser.add_argument(
        "--url", default=os.environ.get("PARALLAX_URL") or "http://127.0.0.1:8050",
        help="the Parallax server (default $PARALLAX_URL or http://127.0.0.1:8050)",
    )
    parser.add_argument("--token", default=os.environ.get("PARALLAX_TOKEN"), help="its token (default $PARALLAX_TOKEN)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="parallax", description="Live dashboard and diagnostics for agentic-RL training runs.")
    parser.add_argument("--version", action="version", version=f"parallax {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="start the server (API, Prometheus endpoints and dashboard on one port)")
    serve.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 8050)")
    serve.add_argument("--database-url", dest="database_url", help="SQLAlchemy URL (default sqlite:///parallax.db)")
    serve.add_argument("--rules", action="append", metavar="FILE", help="extra rule pack (repeatable)")
    serve.add_argument("--insecure", action="store_true", help="allow a non-loopback address without a write token")
    serve.set_defaults(func=cmd_serve)

    import os

    demo = sub.add_parser(
        "demo", help="start the server and train live demo runs of a toy async RL loop: one healthy, one per fault"
    )
    demo.add_argument("--runs", help="how many of the default runs (a number), or run names separated by commas "
                      "(healthy, stale-rollouts, token-mismatch, unbalanced-groups, padding, exploration-collapse, "
                      "reward-hacking, numerical-blowup, retokenize); default: all eight")
    demo.add_argument("--steps", type=int, default=300, help="training steps per run (default 300)")
    demo.add_argument("--speed", type=float, default=3.0, help="steps per second per run (default 3; 0: as fast as possible)")
    demo.add_argument("--url", default=None, help="send to this running server instead of starting one")
    demo.add_argument("--token", default=os.environ.get("PARALLAX_TOKEN"), help="write token (default $PARALLAX_TOKEN)")
    demo.add_argument("--port", type=int, help="port of the server it starts (default 8050)")
    demo.add_argument("--database-url", dest="database_url", help="SQLAlchemy URL (default sqlite:///parallax.db)")
    demo.add_argument("--exit", action="store_true",
                      help="exit when the runs are done (code 1 if a run was not diagnosed as injected) "
                      "instead of serving the dashboard until Ctrl-C")
    demo.set_defaults(func=cmd_demo)

    db = sub.add_parser("db", help="database schema")
    db.add_argument("db_command", choices=["upgrade", "current"], help="upgrade: migrate to the newest schema")
    db.add_argument("--database-url", dest="database_url", help="SQLAlchemy URL (default from settings)")
    db.set_defaults(func=cmd_db)

    rules = sub.add_parser("rules", help="check rule packs, or run their YAML unit tests")
    rules.add_argument("rules_command", choices=["check", "test"], help="check: validate rule files; test: run rule test files")
    rules.add_argument("files", nargs="+", help="YAML files")
    rules.set_defaults(func=cmd_rules)

    audit = sub.add_parser("audit", help="harness audit of a trajectory dump (JSONL); exit code 1 when a check fails")
    audit.add_argument("file", help="trajectories, one JSON object per line (or a JSON object with 'trajectories'); - for stdin")
    audit.add_argument("--json", action="store_true", help="print the report as JSON instead of tables")
    audit.add_argument("--examples", type=int, default=5, help="worst examples shown per failing check (default 5)")
    audit.set_defaults(func=cmd_audit)

    imp = sub.add_parser("import", help="send a TensorBoard log dir, a JSONL or a CSV file (e.g. a W&B export) to a running server")
    imp.add_argument("kind", choices=["tensorboard", "jsonl", "csv"], help="what PATH holds")
    imp.add_argument("path", help="tensorboard: a log dir (event files found recursively) or one event file; jsonl, csv: a file")
    imp.add_argument("--project", default="imported", help="project of the run (default imported)")
    imp.add_argument("--run", help="run name (default: the file's name without extension, or the log dir's name)")
    imp.add_argument("--framework", help="framework whose keys the aliases map (verl, trl, ...), for a new run; detected from the keys otherwise")
    imp.add_argument("--batch-values", dest="batch_values", type=_positive_int, default=5000, help="values per request (default 5000)")
    _add_server_options(imp)
    imp.set_defaults(func=cmd_import)

    exp = sub.add_parser("export", help="write every point of a run as CSV (wide) or JSONL")
    exp.add_argument("run", help="run id, or project/name")
    exp.add_argument("--format", choices=["csv", "jsonl"], help="csv: step + one column per metric; jsonl: a line per step (default csv, or jsonl for -o *.jsonl)")
    exp.add_argument("-o", "--output", help="file to write (default stdout)")
    exp.add_argument("--metric", action="append", help="only this metric (repeatable)")
    _add_server_options(exp)
    exp.set_defaults(func=cmd_export)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ValidationError as exc:
        print(f"parallax: invalid settings: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
