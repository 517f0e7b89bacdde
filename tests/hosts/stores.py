"""The shared PostgreSQL and Redis of the hosts: private servers (tests/faults/stores.py) that also
listen on the bridge address, which the hosts reach only over their veth (a Unix socket or the
machine's own servers would let a cut-off host through)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.faults.stores import PrivatePostgres, PrivateRedis, _as_postgres_user, _postgres_bin
from tests.support.children import die_with_parent

DIR_PREFIX = "gateway-hosts-"


def store_dir(kind: str) -> Path:
    """A temporary directory named by the store and the test process (`gateway-hosts-pg-<pid>-...`)."""
    return Path(tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{kind}-{os.getpid()}-"))


def remove_stale_dirs() -> None:
    """Delete the stores' directories of runs whose process is gone (killed before cleaning up)."""
    for path in Path(tempfile.gettempdir()).glob(f"{DIR_PREFIX}*-*-*"):
        pid = path.name.removeprefix(DIR_PREFIX).split("-")[1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(path, ignore_errors=True)


# initdb trusts loopback only; the hosts connect from the bridge's subnet
HOSTS_HBA = "host all all samenet trust\n"


@dataclass
class BridgedPostgres(PrivatePostgres):
    """A private PostgreSQL on 127.0.0.1 (for the test) and on the bridge address (for the hosts).

    The postmaster runs as a child of the test (not daemonized by pg_ctl), so it goes down with
    the test process even when that is killed."""

    bridge_address: str = ""
    root: Path = field(default_factory=lambda: store_dir("pg"))
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> BridgedPostgres:
        hba = self.data_dir / "pg_hba.conf"
        if HOSTS_HBA not in hba.read_text():
            with hba.open("a") as rules:
                rules.write(HOSTS_HBA)
        uid, gid = _as_postgres_user()
        command = [
            *(_postgres_bin("postgres"), "-D", str(self.data_dir)),
            *("-c", f"listen_addresses=127.0.0.1,{self.bridge_address}"),
        ]
        with (self.root / "postgres.log").open("ab") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, user=uid, group=gid, preexec_fn=die_with_parent
            )
        ready = [_postgres_bin("pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)]
        deadline = time.monotonic() + 30
        while subprocess.run(ready, check=False).returncode != 0:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"postgres did not start: {(self.root / 'postgres.log').read_text()}")
            time.sleep(0.1)
        return self

    def stop(self) -> None:
        """SIGINT: PostgreSQL's fast shutdown."""
        if self.process is not None:
            self.process.send_signal(signal.SIGINT)
            self.process.wait(timeout=30)
            self.process = None

    def host_url(self, database: str) -> str:
        """The URL a host uses: the bridge address, never loopback."""
        return f"postgresql://postgres@{self.bridge_address}:{self.port}/{database}"


@dataclass
class BridgedRedis(PrivateRedis):
    """A private redis-server on 127.0.0.1 and the bridge address (Redis 7 rebinds at run time)."""

    bridge_address: str = ""
    root: Path = field(default_factory=lambda: store_dir("redis"))

    def start(self) -> BridgedRedis:
        super().start()
        client = redis.Redis(port=self.port)
        try:
            # protected mode refuses every address but loopback to a server without a password
            client.config_set("protected-mode", "no")
            client.config_set("bind", f"127.0.0.1 {self.bridge_address}")
        finally:
            client.close()
        return self

    def host_url(self, db: int) -> str:
        return f"redis://{self.bridge_address}:{self.port}/{db}"
