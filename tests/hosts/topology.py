"""Hosts of the test's own: network namespaces on one bridge, each reached over its own veth.

The bridge lives in the root namespace and holds the first address of a /24 in 10.231.0.0/16 that
no interface of the machine uses yet; host i gets the address .(10+i) inside its namespace. What
serves every host (Redis, PostgreSQL, the simulated upstream) listens on the bridge address, so
that taking one veth down (`cut`) leaves that host with no way to anything: no store, no upstream,
no load balancer.

Every name carries the pid of the test process (`gwh<pid>...`), so two runs never share a link,
and `remove_stale` deletes the links and namespaces of runs whose process is gone (a run killed
before its finalizer ran). Interface names stay within the kernel's 15 characters.
"""

from __future__ import annotations

import ipaddress
import os
import re
import subprocess
from dataclasses import dataclass, field

PREFIX = "gwh"
SUPERNET = ipaddress.ip_network("10.231.0.0/16")  # an unlikely range: no default route, no VPN
_OWNED = re.compile(rf"^{PREFIX}(\d+)")


class NamespacesRefused(Exception):
    """The kernel (or the lack of privileges) refuses network namespaces here."""


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run `ip ...`; a failure raises with ip's own message."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stale(name: str) -> bool:
    """A name of a run whose process is gone, or of an earlier process that had this one's pid."""
    owner = _OWNED.match(name)
    if owner is None:
        return False
    pid = int(owner.group(1))
    return pid == os.getpid() or not _pid_alive(pid)


def remove_stale() -> None:
    """Delete the namespaces and links a killed run of this suite left behind (before building)."""
    for name in ip("netns", "list").stdout.split():
        if _stale(name):
            ip("netns", "delete", name, check=False)
    for line in ip("-o", "link", "show").stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if _stale(name):
            ip("link", "delete", name, check=False)


def probe_namespaces() -> None:
    """Raise NamespacesRefused, with the kernel's words, when `ip netns add` cannot work here."""
    name = f"{PREFIX}{os.getpid()}probe"
    done = ip("netns", "add", name, check=False)
    if done.returncode != 0:
        raise NamespacesRefused(done.stderr.strip() or f"ip netns add exited with {done.returncode}")
    ip("netns", "delete", name, check=False)


def free_subnet() -> ipaddress.IPv4Network:
    """The first /24 of SUPERNET that no address on the machine falls in."""
    used = []
    for line in ip("-o", "-4", "addr", "show").stdout.splitlines():
        used.append(ipaddress.ip_interface(line.split()[3]).network)
    for subnet in SUPERNET.subnets(new_prefix=24):
        if not any(subnet.overlaps(network) for network in used):
            return subnet
    raise RuntimeError(f"no free /24 left in {SUPERNET}")


@dataclass(frozen=True)
class Host:
    """One namespace, its address, and the root-side end of its veth (what `cut` takes down)."""

    name: str  # the short name tests use: gw1, gw2, ...
    namespace: str
    address: str
    link: str  # the veth end in the root namespace, a port of the bridge

    def command(self, *argv: str) -> list[str]:
        """`argv` run inside this host's namespace."""
        return ["ip", "netns", "exec", self.namespace, *argv]


@dataclass
class Topology:
    """A bridge and `count` hosts on it; `build` makes them, `destroy` removes every one."""

    count: int
    tag: str = field(default_factory=lambda: f"{PREFIX}{os.getpid()}")
    subnet: ipaddress.IPv4Network = field(default_factory=free_subnet)
    hosts: list[Host] = field(default_factory=list)

    @property
    def bridge(self) -> str:
        return f"{self.tag}br"

    @property
    def bridge_address(self) -> str:
        """Where the shared services listen, in the root namespace."""
        return str(self.subnet.network_address + 1)

    def build(self) -> Topology:
        prefix = self.subnet.prefixlen
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", f"{self.bridge_address}/{prefix}", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")
        for index in range(1, self.count + 1):
            host = Host(
                name=f"gw{index}",
                namespace=f"{self.tag}-gw{index}",
                address=str(self.subnet.network_address + 10 + index),
                link=f"{self.tag}h{index}",
            )
            inner = f"{self.tag}n{index}"
            ip("netns", "add", host.namespace)
            self.hosts.append(host)
            ip("link", "add", host.link, "type", "veth", "peer", "name", inner)
            ip("link", "set", host.link, "master", self.bridge)
            ip("link", "set", host.link, "up")
            ip("link", "set", inner, "netns", host.namespace)
            ip("-n", host.namespace, "addr", "add", f"{host.address}/{prefix}", "dev", inner)
            ip("-n", host.namespace, "link", "set", inner, "up")
            ip("-n", host.namespace, "link", "set", "lo", "up")
        return self

    def cut(self, host: Host) -> None:
        """Take the host's link down: its packets, and those sent to it, go nowhere."""
        ip("link", "set", host.link, "down")

    def restore(self, host: Host) -> None:
        ip("link", "set", host.link, "up")

    def host_of_pid(self, pid: int) -> Host:
        """The host whose namespace the process `pid` runs in."""
        names = ip("netns", "identify", str(pid)).stdout.split()
        for host in self.hosts:
            if host.namespace in names:
                return host
        raise LookupError(f"process {pid} runs in none of {[h.namespace for h in self.hosts]}")

    def destroy(self) -> None:
        """Remove every namespace (its veth end goes with it, and the peer too) and the bridge."""
        for host in self.hosts:
            ip("netns", "delete", host.namespace, check=False)
            ip("link", "delete", host.link, check=False)  # gone with its peer, unless the move failed
        ip("link", "delete", self.bridge, check=False)
        self.hosts.clear()
