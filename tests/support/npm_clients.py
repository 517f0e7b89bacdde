"""Real clients from npm for end-to-end tests (Claude Code, Codex, ...): each pinned package is
installed once into a cache folder shared by every test run on the machine, and found there again.

A machine without npm, or without the registry, cannot run those tests: they are skipped with the
reason, except under CI=true, where they fail, since CI must run them. Concurrent runs (pytest-xdist
workers, two checkouts) take turns on a lock file, and a package counts as installed only once its
install finished (a marker file), so a run interrupted mid-install is redone.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

INSTALL_TIMEOUT_S = 900  # a large native package over a slow link
CACHE = Path(os.environ.get("GATEWAY_TEST_NPM_CACHE") or Path(tempfile.gettempdir()) / "gateway-test-npm")
_INSTALLED = ".installed"


class NpmUnavailable(RuntimeError):
    """The package cannot be had on this machine (no npm, no registry, a failed install)."""


@dataclass(frozen=True, slots=True)
class NpmPackage:
    """A pinned package and the command it installs (`node_modules/.bin/<command>`)."""

    name: str
    version: str
    command: str

    @property
    def spec(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def folder(self) -> Path:
        return CACHE / self.spec.replace("/", "+")


def installed(package: NpmPackage) -> Path:
    """The path of the package's command, installing the package first if it is not yet there."""
    binary = package.folder / "node_modules" / ".bin" / package.command
    marker = package.folder / _INSTALLED
    if marker.exists() and binary.exists():
        return binary
    npm = shutil.which("npm")
    if npm is None:
        raise NpmUnavailable(f"{package.spec} needs npm, which is not installed")
    package.folder.mkdir(parents=True, exist_ok=True)
    with (package.folder.parent / f"{package.folder.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run may be installing it right now
        if not marker.exists():
            _install(npm, package)
            marker.touch()
    if not binary.exists():
        raise NpmUnavailable(f"{package.spec} installed no command {package.command!r}")
    return binary


def _install(npm: str, package: NpmPackage) -> None:
    command = [npm, "install", "--no-audit", "--no-fund", "--prefix", str(package.folder), package.spec]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise NpmUnavailable(f"npm install {package.spec} took over {INSTALL_TIMEOUT_S} s") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise NpmUnavailable(f"npm install {package.spec} failed: " + " | ".join(tail))


def require(package: NpmPackage) -> Path:
    """`installed(package)` for a test: skipped with the reason where it cannot be had, failed
    under CI=true."""
    try:
        return installed(package)
    except NpmUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run this test: {exc}")
        pytest.skip(str(exc))
