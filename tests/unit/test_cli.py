"""The `gateway` command's own decisions (serving itself is covered end to end)."""

from __future__ import annotations

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
