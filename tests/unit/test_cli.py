"""The `gateway` command's own decisions (serving itself is covered end to end)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.cli import build_parser, main


def test_several_workers_without_redis_are_refused(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.delenv("GATEWAY_REDIS_URL", raising=False)
    monkeypatch.setenv("GATEWAY_WORKERS", "3")
    assert main(["serve", "--no-migrate"]) == 2
    assert "GATEWAY_REDIS_URL" in capsys.readouterr().err


def test_the_metering_writer_without_redis_is_refused(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.delenv("GATEWAY_REDIS_URL", raising=False)
    monkeypatch.delenv("GATEWAY_METERING_WRITER", raising=False)
    assert main(["metering-writer"]) == 2
    assert "GATEWAY_REDIS_URL" in capsys.readouterr().err


def test_every_documented_command_is_there() -> None:
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert {
        "serve",
        "migrate",
        "check-config",
        "teams",
        "keys",
        "usage",
        "mock-upstream",
        "metering-writer",
    } <= set(commands)


# `gateway serve` in a fresh interpreter, with the server itself replaced by a report of what the
# serving process has loaded by then.
_SERVE_AND_REPORT = """
import sys
import gateway.cli
gateway.cli._run_uvicorn = lambda *_: print("alembic loaded:", "alembic" in sys.modules)
sys.exit(gateway.cli.main(["serve"]))
"""


def test_serve_migrates_in_a_child_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    database = tmp_path / "gateway.db"
    monkeypatch.setenv("GATEWAY_DATABASE_URL", f"sqlite:///{database}")
    monkeypatch.delenv("GATEWAY_REDIS_URL", raising=False)
    monkeypatch.delenv("GATEWAY_WORKERS", raising=False)
    served = subprocess.run(
        [sys.executable, "-c", _SERVE_AND_REPORT], capture_output=True, text=True, timeout=60, check=False
    )
    assert served.returncode == 0, served.stderr
    assert "alembic loaded: False" in served.stdout
    with sqlite3.connect(database) as db:  # the child brought the schema up to date
        assert db.execute("SELECT version_num FROM alembic_version").fetchone() is not None


def test_serve_stops_when_the_migration_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATEWAY_DATABASE_URL", "postgresql://postgres@127.0.0.1:1/gateway")  # refused
    monkeypatch.delenv("GATEWAY_REDIS_URL", raising=False)
    served = subprocess.run(
        [sys.executable, "-c", _SERVE_AND_REPORT], capture_output=True, text=True, timeout=60, check=False
    )
    assert served.returncode != 0
    assert "alembic loaded" not in served.stdout  # never got as far as serving
