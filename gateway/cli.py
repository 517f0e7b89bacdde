"""The `gateway` command: serve, migrate, check-config, teams, keys, usage, mock-upstream, and the
background work run on its own (metering-writer, job-runner)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib import metadata
from typing import TYPE_CHECKING

from gateway.auth.attempts import WEAK_ADMIN_KEY, strong_admin_key
from gateway.commands.preflight import serving_problem, unresolved_store
from gateway.settings import ConfigError, Settings, load_settings, unpriced_deployments

if TYPE_CHECKING:
    from gateway.server.writer_process import WriterProcess


def _settings() -> Settings:
    try:
        return load_settings()
    except ConfigError as exc:
        print(f"gateway: configuration error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _checked_settings() -> Settings:
    """The settings, once the database and Redis hosts they name are known to resolve."""
    settings = _settings()
    if problem := unresolved_store(settings):
        print(f"gateway: configuration error: {problem}", file=sys.stderr)
        raise SystemExit(2)
    return settings


def cmd_serve(args: argparse.Namespace) -> int:
    from gateway.server.serving import listening_problem

    settings = _checked_settings()
    workers = args.workers or settings.workers
    if problem := serving_problem(settings, workers):
        print(f"gateway: {problem}", file=sys.stderr)
        return 2
    # before anything starts or is printed: a port out of range or taken is a plain message
    if problem := listening_problem(args.host or settings.host, args.port or settings.port):
        print(f"gateway: {problem}", file=sys.stderr)
        return 2
    if not args.no_migrate and (migrated := _migrate_in_child()) != 0:
        return migrated
    writer = _start_writer_process(settings)
    try:
        _run_uvicorn(settings, args, workers)
    finally:
        if writer is not None:
            writer.stop()  # after the workers: it writes what they appended last
    return 0


def _migrate_in_child() -> int:
    """`gateway migrate` in a process of its own: Alembic and its templates (~7 MB) never load into
    the process that goes on to serve (the only one with one worker)."""
    import subprocess

    command = [sys.executable, "-m", "gateway.cli", "migrate"]
    return subprocess.run(command, stdout=subprocess.DEVNULL, check=False).returncode  # noqa: S603


def _start_writer_process(settings: Settings) -> WriterProcess | None:
    """With Redis, one writer process beside the workers unless told otherwise (auto, process)."""
    from gateway.server.writer_process import WriterProcess

    mode = settings.metering_writer
    if mode == "auto":
        mode = "process" if settings.redis_url else "worker"
        os.environ["GATEWAY_METERING_WRITER"] = mode  # what the workers' settings will say
    if mode != "process":
        return None
    writer = WriterProcess()
    writer.start()
    return writer


def _run_uvicorn(settings: Settings, args: argparse.Namespace, workers: int) -> None:
    from gateway.server import serving

    serving.run(settings, args.host or settings.host, args.port or settings.port, workers)


def cmd_metering_writer(args: argparse.Namespace) -> int:
    import uvloop

    from gateway.logs import configure_logging
    from gateway.server.writer_process import run_writer

    settings = _settings()
    if not settings.redis_url:
        print(
            "gateway: the metering writer reads the Redis stream: set GATEWAY_REDIS_URL "
            "(without Redis each serving process writes its own usage records)",
            file=sys.stderr,
        )
        return 2
    configure_logging(settings.log_format)
    uvloop.run(run_writer(settings, parent_pid=args.parent_pid, tune_gc=True))
    return 0


def cmd_job_runner(_: argparse.Namespace) -> int:
    import uvloop

    from gateway.commands.job_runner import run_job_runner
    from gateway.logs import configure_logging

    settings = _checked_settings()
    configure_logging(settings.log_format)
    uvloop.run(run_job_runner(settings))
    return 0


def cmd_migrate(_: argparse.Namespace) -> int:
    from sqlalchemy.exc import SQLAlchemyError

    from gateway.db.migrate import upgrade_head

    settings = _checked_settings()
    try:
        upgrade = upgrade_head(settings.database_url)
    except (SQLAlchemyError, OSError) as exc:
        print(f"gateway: cannot migrate the database: {_database_failure(exc, settings)}", file=sys.stderr)
        return 1
    print(upgrade.describe())
    return 0


def _database_failure(exc: Exception, settings: Settings) -> str:
    """What went wrong, without the text of a statement (gateway.db.session.database_error)."""
    from gateway.db.session import database_error, missing_database

    if isinstance(exc, OSError):
        return f"{type(exc).__name__}: {exc.strerror or exc}"
    return missing_database(exc, settings.database_url) or database_error(exc) or type(exc).__name__


def cmd_check_config(args: argparse.Namespace) -> int:
    settings = _checked_settings()
    if problem := serving_problem(settings, settings.workers):
        print(f"gateway: {problem}", file=sys.stderr)
        return 2
    if args.connect and (problems := _store_problems(settings)):
        for problem in problems:
            print(f"gateway: {problem}", file=sys.stderr)
        return 1
    catalog = settings.catalog
    deployments = sum(len(m.deployments) for m in catalog.models)
    print(
        f"{settings.config_path}: ok ({len(catalog.providers)} providers, {len(catalog.models)} models, "
        f"{deployments} deployments)"
    )
    for deployment in unpriced_deployments(catalog):  # a warning: serving such a catalog is allowed
        print(f"gateway: warning: deployment {deployment} has no price: metered at 0 USD", file=sys.stderr)
    if settings.admin_key is not None and not strong_admin_key(settings.admin_key):
        print(f"gateway: warning: {WEAK_ADMIN_KEY}", file=sys.stderr)
    return 0


def _store_problems(settings: Settings) -> list[str]:
    """What `check-config --connect` finds wrong with the stores: each as a message."""
    from sqlalchemy.exc import SQLAlchemyError

    from gateway.commands.preflight import database_behind, redis_unanswered

    problems = []
    try:
        if behind := database_behind(settings.database_url):
            problems.append(f"GATEWAY_DATABASE_URL: {behind}")
    except (SQLAlchemyError, OSError) as exc:
        problems.append(f"GATEWAY_DATABASE_URL: {_database_failure(exc, settings)}")
    if settings.redis_url and (unanswered := redis_unanswered(settings.redis_url)):
        problems.append(f"GATEWAY_REDIS_URL: {unanswered}")
    return problems


def build_parser() -> argparse.ArgumentParser:
    from gateway.commands.batches import add_batches_parser
    from gateway.commands.keys import add_key_parsers
    from gateway.commands.teams import add_team_parsers
    from gateway.commands.usage import add_usage_parser
    from mock_upstream.cli import add_mock_upstream_parser

    parser = argparse.ArgumentParser(
        prog="gateway", description="An OpenAI-compatible LLM gateway for batches."
    )
    parser.add_argument("--version", action="version", version=f"gateway {package_version()}")
    commands = parser.add_subparsers(dest="command")

    serve = commands.add_parser("serve", help="run the gateway (GATEWAY_* settings, GATEWAY_CONFIG catalog)")
    serve.add_argument("--host", default=None)
    serve.add_argument("--port", type=int, default=None)
    serve.add_argument("--workers", type=int, default=None, help="worker processes (GATEWAY_WORKERS)")
    serve.add_argument("--no-migrate", action="store_true", help="do not apply migrations at start")
    serve.set_defaults(func=cmd_serve)

    writer = commands.add_parser(
        "metering-writer",
        help="move usage events from the Redis stream into the database (GATEWAY_METERING_WRITER)",
    )
    writer.add_argument("--parent-pid", type=int, default=None, help="stop when this process ends")
    writer.set_defaults(func=cmd_metering_writer)

    jobs = commands.add_parser(
        "job-runner", help="run Batch API jobs without serving (GATEWAY_RUN_JOBS=false leaves them here)"
    )
    jobs.set_defaults(func=cmd_job_runner)

    migrate = commands.add_parser("migrate", help="apply database migrations (Alembic upgrade head)")
    migrate.set_defaults(func=cmd_migrate)

    check = commands.add_parser("check-config", help="validate the configuration and exit")
    check.add_argument(
        "--connect",
        action="store_true",
        help="also connect: the database exists and is migrated, Redis answers",
    )
    check.set_defaults(func=cmd_check_config)

    add_team_parsers(commands)
    add_key_parsers(commands)
    add_usage_parser(commands)
    add_batches_parser(commands)
    add_mock_upstream_parser(commands)
    return parser


def package_version() -> str:
    """The installed distribution's version (pyproject.toml's), or `unknown` when run from a checkout
    that was never installed."""
    try:
        return metadata.version("gateway")
    except metadata.PackageNotFoundError:
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # a bare `gateway`: what it can do, rather than an argparse error
        parser.print_help()
        return 0
    result: int = args.func(args)
    return result


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
