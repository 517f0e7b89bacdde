"""The wheel, installed into a fresh virtualenv, migrates a new PostgreSQL database and serves, from a
directory that holds no checkout: the migrations and the default configuration come from the wheel.

The fresh venv gets the wheel alone (`--no-deps`); the dependencies come from this test's own
interpreter, through a `.pth` file that puts its site-packages after the venv's, so that `gateway`
itself can only be the installed wheel's.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from tests.support.children import die_with_parent, stop
from tests.support.gateway import REPO, free_port, recreate_database

pytestmark = pytest.mark.integration

# What building the wheel reads: copied away first, so the build leaves nothing in the checkout
# (setuptools writes build/ and *.egg-info/ beside its sources).
BUILD_INPUTS = (
    "pyproject.toml",
    "setup.py",
    "MANIFEST.in",
    "README.md",
    "LICENSE",
    "gateway",
    "mock_upstream",
    "migrations",
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("source")
    for name in BUILD_INPUTS:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(REPO / name, source / name)
    (source / "config").mkdir()
    shutil.copy2(REPO / "config" / "gateway.yaml", source / "config" / "gateway.yaml")
    dist = tmp_path_factory.mktemp("dist")
    pip = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps"]
    built = subprocess.run(
        [*pip, "--wheel-dir", str(dist), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    (found,) = dist.glob("gateway-*.whl")
    return found


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    packages = Path(
        subprocess.check_output(
            [root / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            text=True,
        ).strip()
    )
    (packages / "dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    install = [sys.executable, "-m", "pip", "--python", str(root / "bin" / "python"), "install"]
    installed = subprocess.run(
        [*install, "--quiet", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr
    return root


@pytest.fixture
def outside(tmp_path: Path) -> dict[str, str]:
    """The environment of a shell in an empty directory: no GATEWAY_* setting, no checkout on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_") and k != "PYTHONPATH"}
    return env | {"GATEWAY_DATABASE_URL": recreate_database("gateway_test_wheel"), "HOME": str(tmp_path)}


def gateway(venv: Path, cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    command = [str(venv / "bin" / "gateway"), *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
def served(venv: Path, tmp_path: Path, outside: dict[str, str]) -> Iterator[tuple[str, str]]:
    """A migrated database with one team key, and `gateway serve` on it: (base URL, key)."""
    migrated = gateway(venv, tmp_path, outside, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert gateway(venv, tmp_path, outside, "teams", "create", "--name", "wheel").returncode == 0
    created = gateway(venv, tmp_path, outside, "keys", "create", "--team", "wheel", "--name", "test")
    assert created.returncode == 0, created.stderr
    port = free_port()
    log = (tmp_path / "serve.log").open("wb")
    process = subprocess.Popen(
        [str(venv / "bin" / "gateway"), "serve", "--no-migrate", "--port", str(port)],
        cwd=tmp_path,
        env=outside,
        stdout=log,
        stderr=subprocess.STDOUT,
        preexec_fn=die_with_parent,
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(process, base_url, tmp_path / "serve.log")
        yield base_url, created.stdout.strip()
    finally:
        stop(process, timeout_s=15)
        log.close()


def wait_until_healthy(process: subprocess.Popen[bytes], base_url: str, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, f"gateway serve exited:\n{log.read_text()}"
        try:
            if httpx.get(f"{base_url}/healthz", timeout=0.5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    pytest.fail(f"gateway serve never became healthy:\n{log.read_text()}")


def test_the_installed_package_is_the_wheel(venv: Path, tmp_path: Path, outside: dict[str, str]) -> None:
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import gateway; print(gateway.__file__)"],
        cwd=tmp_path,
        env=outside,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert Path(where.strip()).is_relative_to(venv)
    version = gateway(venv, tmp_path, outside, "--version")
    assert version.returncode == 0, version.stderr
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert version.stdout.strip() == f"gateway {declared}"


def test_check_config_outside_a_checkout_reads_the_packaged_default(
    venv: Path, tmp_path: Path, outside: dict[str, str]
) -> None:
    checked = gateway(venv, tmp_path, outside, "check-config")
    assert checked.returncode == 0, checked.stderr
    path, _, summary = checked.stdout.strip().partition(": ")
    assert Path(path).is_relative_to(venv)
    assert summary == "ok (2 providers, 2 models, 4 deployments)"


def test_a_bad_database_url_is_one_line_outside_a_checkout(
    venv: Path, tmp_path: Path, outside: dict[str, str]
) -> None:
    failed = gateway(venv, tmp_path, outside | {"GATEWAY_DATABASE_URL": "mysql://db/gateway"}, "migrate")
    assert failed.returncode == 2
    assert failed.stderr.count("\n") == 1 and "GATEWAY_DATABASE_URL" in failed.stderr


def test_migrate_then_serve_answers_the_openai_sdk(served: tuple[str, str]) -> None:
    base_url, key = served
    client = OpenAI(base_url=f"{base_url}/v1", api_key=key, max_retries=0)

    reply = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "Hello from a wheel"}]
    )

    assert reply.choices[0].message.content
    assert reply.usage is not None and reply.usage.prompt_tokens > 0
