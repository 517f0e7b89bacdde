"""The `gateway` command's own decisions (serving itself is covered end to end)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.cli import build_parser, main


def test_several_workers_without_redis_are_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("GATEWAY_REDIS_URL", raising=False)
    monkeypatch.setenv("GATEWAY_WORKERS", "3")
    assert main(["serve", "--no-migrate"]) == 2
    assert "GATEWAY_REDIS_URL" in capsys.readouterr().err


def test_the_metering_writer_without_redis_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
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
        "job-runner",
    } <= set(commands or ())


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


def test_the_version_is_the_installed_package_s(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"gateway {version('gateway')}"


BAD_STORE_URLS = [
    ("GATEWAY_DATABASE_URL", "mysql://gw:hunter2@db/gateway", "unsupported scheme 'mysql'"),
    ("GATEWAY_DATABASE_URL", "postgres:/x", "not a database URL"),
    ("GATEWAY_DATABASE_URL", "postgresql://gw:hunter2@db:port/gateway", "the port must be a number"),
    ("GATEWAY_DATABASE_URL", "postgresql://gw:hunter2@no-such-host.invalid/gateway", "does not resolve"),
    ("GATEWAY_REDIS_URL", "http://x", "unsupported scheme 'http'"),
    ("GATEWAY_REDIS_URL", "redis://:hunter2@no-such-host.invalid:6379/1", "does not resolve"),
]


@pytest.mark.parametrize("command", ["serve", "migrate", "check-config"])
@pytest.mark.parametrize(("variable", "url", "problem"), BAD_STORE_URLS)
def test_a_bad_store_url_is_one_line_and_status_2(
    command: str,
    variable: str,
    url: str,
    problem: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("GATEWAY_REDIS_URL", raising=False)
    monkeypatch.setenv(variable, url)
    with pytest.raises(SystemExit) as exited:
        main([command])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"gateway: configuration error: {variable}: ")
    assert problem in err
    assert "hunter2" not in err  # a URL's password never reaches the terminal


def test_check_config_refuses_several_workers_without_redis(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("GATEWAY_REDIS_URL", raising=False)
    monkeypatch.setenv("GATEWAY_WORKERS", "2")
    assert main(["check-config"]) == 2
    assert "GATEWAY_REDIS_URL" in capsys.readouterr().err


def test_check_config_accepts_several_workers_with_redis(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GATEWAY_REDIS_URL", "redis://127.0.0.1:6379/15")  # never connected to
    monkeypatch.setenv("GATEWAY_WORKERS", "2")
    assert main(["check-config"]) == 0
    assert ": ok (" in capsys.readouterr().out


def test_a_database_that_refuses_connections_fails_migrate_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GATEWAY_DATABASE_URL", "postgresql://postgres@127.0.0.1:1/gateway")
    assert main(["migrate"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gateway: cannot migrate the database: ")


@pytest.mark.parametrize(("tty", "expected"), [(True, "console"), (False, "json")])
def test_the_log_format_follows_the_terminal_unless_set(
    tty: bool, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway.settings import environment as settings

    class Stream:
        def isatty(self) -> bool:
            return tty

    monkeypatch.setattr(sys, "stdout", Stream())
    assert settings.load_settings({}).log_format == expected
    assert settings.load_settings({"GATEWAY_LOG_FORMAT": "json"}).log_format == "json"


def test_the_default_config_is_the_packaged_copy_outside_a_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway.settings import environment as settings

    packaged = tmp_path / "_data" / "gateway.yaml"
    packaged.parent.mkdir()
    packaged.write_text(Path("config/gateway.yaml").read_text())
    monkeypatch.setattr(settings, "PACKAGED_CONFIG", packaged)
    assert settings.default_config_path() == "config/gateway.yaml"  # the working directory's comes first
    monkeypatch.chdir(tmp_path)
    assert settings.default_config_path() == str(packaged)
    assert settings.load_settings({}).config_path == str(packaged)


def test_serve_names_the_address_it_listens_on(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import uvicorn

    monkeypatch.setattr(uvicorn, "run", lambda *_, **__: None)  # where serving starts the server
    monkeypatch.delenv("GATEWAY_REDIS_URL", raising=False)
    monkeypatch.delenv("GATEWAY_WORKERS", raising=False)
    assert main(["serve", "--no-migrate", "--host", "::1", "--port", "8181"]) == 0
    assert "serving on http://[::1]:8181 (1 worker)" in capsys.readouterr().err


UNPRICED = """
providers:
  - {name: vllm, kind: openai, region: eu-west, base_url: "http://127.0.0.1:9/v1"}
  - {name: mock, kind: mock, region: eu-west}
models:
  - name: llama
    deployments:
      - {provider: vllm, model: llama-70b}
      - {provider: vllm, model: llama-8b, price: {input: 0.1, output: 0.2}}
      - {provider: mock, model: mock-chat}
"""


def test_serving_warns_of_each_unpriced_deployment_at_start(tmp_path: Path) -> None:
    """Through a real `gateway serve`: its own log lines, whatever this test process configured."""
    from tests.support.gateway import GatewayProcess

    config = tmp_path / "gateway.yaml"
    config.write_text(UNPRICED)
    env = {
        "GATEWAY_DATABASE_URL": f"sqlite:///{tmp_path / 'gateway.db'}",
        "GATEWAY_REDIS_URL": "",
        "GATEWAY_LOG_FORMAT": "json",
    }
    gateway = GatewayProcess(config, env).start()
    try:
        logs = gateway.logs()
    finally:
        gateway.stop()
    lines = [json.loads(line) for line in logs.splitlines() if line.startswith("{")]
    warnings = [line for line in lines if line["event"] == "deployment_unpriced"]
    assert [(w["level"], w["deployment"]) for w in warnings] == [("warning", "vllm/llama-70b")]
