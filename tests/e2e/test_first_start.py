"""A first start without surprises: each message of the real `gateway` command, run as a newcomer
runs it (a subprocess, in a folder of its own, with no GATEWAY_* setting but those a case names).

The port is checked before anything is printed; `migrate` says from which revision to which; a
missing PostgreSQL database is named with the command that creates it; a two-slash SQLite URL is
explained; `check-config --connect` connects and names every missing variable at once; the default
configuration is found from any folder; a bare `gateway` prints its help; `/` leads to the console.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx

from gateway.db.migrate import head_revision
from tests.e2e.conftest import Stack
from tests.support.gateway import recreate_database
from tests.support.servers import free_port
from tests.support.stores import postgres_url, redis_url


def gateway(cwd: Path, *args: str, timeout: float = 60, **settings: str) -> subprocess.CompletedProcess[str]:
    """`gateway ARGS` in `cwd`, with only the GATEWAY_* settings given (and a JSON log)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("GATEWAY_")}
    env |= {"GATEWAY_LOG_FORMAT": "json", **settings}
    command = [sys.executable, "-m", "gateway.cli", *args]
    finished = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    print(f"$ gateway {' '.join(args)}  -> {finished.returncode}\n{finished.stdout}{finished.stderr}")
    return finished


def test_a_port_out_of_range_is_refused_before_anything_is_printed(tmp_path: Path) -> None:
    finished = gateway(tmp_path, "serve", GATEWAY_PORT="70000")
    assert finished.returncode == 2
    assert "GATEWAY_PORT" in finished.stderr and "1 to 65535" in finished.stderr
    assert "serving on" not in finished.stderr + finished.stdout
    assert not (tmp_path / "data").exists()  # nothing started: no database made


def test_a_port_in_use_is_named_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        finished = gateway(tmp_path, "serve", GATEWAY_PORT=str(port))
    assert finished.returncode == 2
    assert f"127.0.0.1:{port}" in finished.stderr and "in use" in finished.stderr
    assert "serving on" not in finished.stderr + finished.stdout
    assert "Errno" not in finished.stderr


def test_migrate_says_from_which_revision_to_which(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    head = head_revision(url)
    first = gateway(tmp_path, "migrate", GATEWAY_DATABASE_URL=url)
    assert first.returncode == 0
    assert first.stdout.strip() == f"migrated an empty database to {head} (the latest migration)"
    again = gateway(tmp_path, "migrate", GATEWAY_DATABASE_URL=url)
    assert again.stdout.strip() == f"the database is already at the latest migration ({head})"


def test_a_missing_postgres_database_is_named_with_the_command_that_creates_it(tmp_path: Path) -> None:
    name = f"gateway_test_missing_{os.getpid()}"
    finished = gateway(tmp_path, "migrate", GATEWAY_DATABASE_URL=postgres_url(name))
    assert finished.returncode == 1
    assert f"the database '{name}' does not exist" in finished.stderr
    assert "createdb " in finished.stderr and finished.stderr.rstrip().count(name) >= 2


def test_a_two_slash_sqlite_url_is_explained(tmp_path: Path) -> None:
    finished = gateway(tmp_path, "check-config", GATEWAY_DATABASE_URL="sqlite://data/x.db")
    assert finished.returncode == 2
    assert "sqlite:///data/x.db" in finished.stderr and "three slashes" in finished.stderr
    assert "does not resolve" not in finished.stderr


def test_check_config_connect_finds_a_missing_database_and_a_silent_redis(tmp_path: Path) -> None:
    missing = postgres_url(f"gateway_test_unmade_{os.getpid()}")
    nobody = f"redis://127.0.0.1:{free_port()}/0"
    offline = gateway(tmp_path, "check-config")  # the form alone: as it always said
    assert offline.returncode == 0
    finished = gateway(
        tmp_path, "check-config", "--connect", GATEWAY_DATABASE_URL=missing, GATEWAY_REDIS_URL=nobody
    )
    assert finished.returncode == 1
    assert "GATEWAY_DATABASE_URL: the database" in finished.stderr and "does not exist" in finished.stderr
    assert "GATEWAY_REDIS_URL: Redis does not answer" in finished.stderr


def test_check_config_connect_wants_the_database_migrated(tmp_path: Path) -> None:
    url = recreate_database(f"gateway_test_first_start_{os.getpid()}")
    stores = {"GATEWAY_DATABASE_URL": url, "GATEWAY_REDIS_URL": redis_url("e2e")}
    unmigrated = gateway(tmp_path, "check-config", "--connect", **stores)
    assert unmigrated.returncode == 1
    assert "has no tables yet" in unmigrated.stderr and "gateway migrate" in unmigrated.stderr
    assert gateway(tmp_path, "migrate", **stores).returncode == 0
    migrated = gateway(tmp_path, "check-config", "--connect", **stores)
    assert migrated.returncode == 0 and ": ok (" in migrated.stdout


def test_check_config_connect_asks_for_the_sqlite_file_without_making_it(tmp_path: Path) -> None:
    fresh = gateway(tmp_path, "check-config", "--connect")  # the default: sqlite:///data/gateway.db
    assert fresh.returncode == 1 and "data/gateway.db does not exist yet" in fresh.stderr
    assert not (tmp_path / "data").exists()
    assert gateway(tmp_path, "migrate").returncode == 0
    assert gateway(tmp_path, "check-config", "--connect").returncode == 0


def test_every_missing_variable_is_named_at_once(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(
        "providers:\n"
        "  - {name: a, kind: openai, region: r, base_url: '${FIRST_HOST}', api_key: '${FIRST_KEY}'}\n"
        "models:\n"
        "  - {name: m, deployments: [{provider: a, model: x, price: {input: 1, output: 1}}]}\n"
    )
    finished = gateway(tmp_path, "check-config", GATEWAY_CONFIG=str(config))
    assert finished.returncode == 2
    assert "FIRST_HOST is not set" in finished.stderr and "FIRST_KEY is not set" in finished.stderr


def test_the_default_configuration_is_found_from_any_folder(tmp_path: Path) -> None:
    assert not (tmp_path / "config").exists()
    finished = gateway(tmp_path, "check-config")
    assert finished.returncode == 0, finished.stderr
    assert "gateway.yaml: ok (" in finished.stdout


def test_a_bare_gateway_prints_its_help(tmp_path: Path) -> None:
    finished = gateway(tmp_path)
    assert finished.returncode == 0
    assert finished.stdout.startswith("usage: gateway")
    assert "serve" in finished.stdout and "check-config" in finished.stdout
    assert "error" not in finished.stderr


def test_the_root_leads_to_the_console(stack: Stack) -> None:
    reply = httpx.get(stack.gateway.base_url + "/")
    assert reply.status_code == 302 and reply.headers["location"] == "/ui"
    assert httpx.get(stack.gateway.base_url + "/", follow_redirects=True).status_code == 200
