"""Redis as operators run it, started by the tests: a 3-master Cluster and a Sentinel set.

Every server is a `redis-server` of its own on free ports in a temporary directory, dies with the
test process (`die_with_parent`) and is killed and its directory removed by `destroy`.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.support.children import die_with_parent
from tests.support.children import stop as stop_process
from tests.support.gateway import free_port

SERVICE = "gw"  # the Sentinel service name of the master
START_TIMEOUT_S = 20.0


def wait_until(what: str, ready: Callable[[], bool], timeout_s: float = START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if ready():
                return
        except (redis.ConnectionError, redis.ResponseError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.1)


@dataclass
class RedisServer:
    """One redis-server (or Sentinel, with `sentinel=True`) on a free port."""

    root: Path
    args: list[str] = field(default_factory=list)
    sentinel_config: str | None = None
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisServer:
        self.root.mkdir(parents=True, exist_ok=True)
        command = ["redis-server"]
        if self.sentinel_config is not None:
            config = self.root / "sentinel.conf"  # Sentinel rewrites its file: one of its own
            config.write_text(f"port {self.port}\nbind 127.0.0.1\ndir {self.root}\n{self.sentinel_config}")
            command += [str(config), "--sentinel"]
        else:
            command += [
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.root),
                "--save",
                "",
            ]
            command += self.args
        log = (self.root / "redis.log").open("ab")
        self.process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent
        )
        wait_until(f"redis-server on port {self.port}", lambda: self.client().ping() is True)
        return self

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_connect_timeout=0.5, socket_timeout=2.0)

    def kill(self) -> None:
        """SIGKILL: the server is gone at once, as a host lost; what it did not replicate is lost."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)


def _temporary_root(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))


@dataclass
class LocalCluster:
    """Three masters with no replicas, the 16384 slots split between them by redis-cli."""

    root: Path = field(default_factory=lambda: _temporary_root("gateway-redis-cluster-"))
    nodes: list[RedisServer] = field(default_factory=list)

    def start(self, masters: int = 3) -> LocalCluster:
        for i in range(masters):
            args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
            args += ["--cluster-port", str(free_port()), "--cluster-node-timeout", "2000"]
            args += ["--appendonly", "no"]
            self.nodes.append(RedisServer(self.root / f"node-{i}", args).start())
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        subprocess.run(
            ["redis-cli", "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        wait_until("the cluster's slots", self._covered)
        return self

    def _covered(self) -> bool:
        for node in self.nodes:
            info = node.client().cluster("INFO")
            if info.get("cluster_state") != "ok" or int(info.get("cluster_known_nodes", 0)) != len(
                self.nodes
            ):
                return False
        return True

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)

    def flush(self) -> None:
        for node in self.nodes:
            node.client().flushall()

    def keys_per_node(self) -> list[list[bytes]]:
        return [list(node.client().scan_iter(count=1000)) for node in self.nodes]

    def destroy(self) -> None:
        for node in self.nodes:
            node.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass
class LocalSentinelSet:
    """One master, its replicas and three Sentinels watching it as service `gw` (quorum 2)."""

    replicas: int = 1
    root: Path = field(default_factory=lambda: _temporary_root("gateway-redis-sentinel-"))
    servers: list[RedisServer] = field(default_factory=list)
    sentinels: list[RedisServer] = field(default_factory=list)

    def start(self) -> LocalSentinelSet:
        master = RedisServer(self.root / "server-0", ["--appendonly", "no"]).start()
        self.servers.append(master)
        for i in range(1, self.replicas + 1):
            args = ["--appendonly", "no", "--replicaof", "127.0.0.1", str(master.port)]
            self.servers.append(RedisServer(self.root / f"server-{i}", args).start())
        config = (
            f"sentinel monitor {SERVICE} 127.0.0.1 {master.port} 2\n"
            f"sentinel down-after-milliseconds {SERVICE} 1000\n"
            f"sentinel failover-timeout {SERVICE} 5000\n"
            f"sentinel parallel-syncs {SERVICE} 1\n"
        )
        for i in range(3):
            self.sentinels.append(RedisServer(self.root / f"sentinel-{i}", sentinel_config=config).start())
        wait_until("the Sentinels to know every server", lambda: self._watching(self.replicas))
        return self

    def _watching(self, replicas: int) -> bool:
        for sentinel in self.sentinels:
            client = sentinel.client()
            state = client.sentinel_master(SERVICE)
            if int(state["num-other-sentinels"]) != 2 or int(state["num-slaves"]) < replicas:
                return False
            linked = [r for r in client.sentinel_slaves(SERVICE) if r["master-link-status"] == "ok"]
            if len(linked) < replicas:
                return False
        return True

    def url(self, **options: object) -> str:
        hosts = ",".join(f"127.0.0.1:{sentinel.port}" for sentinel in self.sentinels)
        query = "&".join(f"{name}={value}" for name, value in options.items())
        return f"redis+sentinel://{hosts}/{SERVICE}" + (f"?{query}" if query else "")

    def master(self) -> RedisServer:
        """The server the Sentinels name as master now."""
        _, port = self.sentinels[0].client().sentinel_get_master_addr_by_name(SERVICE)
        return next(server for server in self.servers if server.port == int(port))

    def wait_for_new_master(self, old: RedisServer) -> RedisServer:
        """The master that replaced `old`, once every Sentinel names it and it accepts writes."""

        def promoted() -> bool:
            ports = {int(s.client().sentinel_get_master_addr_by_name(SERVICE)[1]) for s in self.sentinels}
            if len(ports) != 1 or ports == {old.port}:
                return False
            new = next(server for server in self.servers if server.port in ports)
            return bool(new.client().info("replication")["role"] == "master")

        wait_until("a new master", promoted, timeout_s=30.0)
        return self.master()

    def destroy(self) -> None:
        for server in [*self.sentinels, *self.servers]:
            server.stop()
        shutil.rmtree(self.root, ignore_errors=True)
