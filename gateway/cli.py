"""The `gateway` command: serve, migrate, check-config, teams, keys, usage, mock-upstream."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gateway.settings import ConfigError, Settings, load_settings

if TYPE_CHECKING:
    from gateway.server.writer_process import WriterProcess


def _settings() -> Settings:
    try:
        return load_settings()
    except ConfigError as exc:
        print(f"gateway: configuration error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def cmd_serve(args: argparse.Namespace) -> int:
    settings = _settings()
    workers = args.workers or settings.workers
    if workers > 1 and not settings.redis_url:
        print(
            "gateway: several workers need shared state: set GATEWAY_REDIS_URL "
            "(the in-process default serves one process only)",
            file=sys.stderr,
        )
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


def cmd_migrate(_: argparse.Namespace) -> int:
    from gateway.db.migrate import upgrade_head

    settings = _settings()
    upgrade_head(settings.database_url)
    print("database is at the latest migration")
    return 0


def cmd_check_config(_: argparse.Namespace) -> int:
    settings = _settings()
    catalog = settings.catalog
    deployments = sum(len(m.deployments) for m in catalog.models)
    print(
        f"{settings.config_path}: ok ({len(catalog.providers)} providers, {len(catalog.models)} models, "
        f"{deployments} deployments)"
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    from gateway.commands.keys import add_key_parsers
    from gateway.commands.teams import add_team_parsers
    from gateway.commands.usage import add_usage_parser
    from gateway.mockupstream.cli import add_mock_upstream_parser

    parser = argparse.ArgumentParser(
        prog="gateway", description="An OpenAI-compatible LLM gateway for batches."
    )
    commands = parser.add_subparsers(dest="command", required=True)

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

    migrate = commands.add_parser("migrate", help="apply database migrations (Alembic upgrade head)")
    migrate.set_defaults(func=cmd_migrate)

    check = commands.add_parser("check-config", help="validate the configuration and exit")
    check.set_defaults(func=cmd_check_config)

    add_team_parsers(commands)
    add_key_parsers(commands)
    add_usage_parser(commands)
    add_mock_upstream_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
