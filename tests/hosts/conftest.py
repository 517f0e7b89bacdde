"""The hosts fixture: three namespaces behind nginx (tests/hosts/cluster.py), once per module.

It skips only where the kernel, or a lack of privileges, refuses network namespaces, and says so.
nginx or redis-server missing fails in CI (CI=true) and skips elsewhere: `make hosts` installs
Debian's nginx.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from tests.hosts.balancer import nginx_binary
from tests.hosts.cluster import Cluster, cluster
from tests.hosts.stores import remove_stale_dirs
from tests.hosts.topology import NamespacesRefused, probe_namespaces, remove_stale


def _missing(message: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def _namespaces_or_skip() -> None:
    if shutil.which("ip") is None:
        _missing("`ip` (iproute2) is missing: the hosts are network namespaces made with `ip netns`")
    try:
        probe_namespaces()
    except NamespacesRefused as refused:
        pytest.skip(f"network namespaces refused here (`ip netns add`: {refused}); run as root on Linux")


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    _namespaces_or_skip()
    nginx = nginx_binary()
    if nginx is None:
        _missing("nginx is missing: `make hosts` installs Debian's nginx (the load balancer)")
    if shutil.which("redis-server") is None:
        _missing("redis-server is missing: the hosts share a private one")
    assert nginx is not None
    remove_stale()
    remove_stale_dirs()
    with cluster(tmp_path_factory.mktemp("hosts"), nginx) as running:
        yield running
