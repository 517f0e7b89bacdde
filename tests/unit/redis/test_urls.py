from __future__ import annotations

from pathlib import Path

import pytest

from gateway.commands.preflight import redis_hosts
from gateway.redis.urls import DEFAULT_REPLICA_TIMEOUT_MS, Durability, RedisUrlError, parse_redis_url
from gateway.settings import ConfigError, load_settings
from tests.unit.settings.test_environment import MINIMAL


def test_one_server_is_left_to_redis_py_without_the_gateways_options() -> None:
    topology = parse_redis_url(
        "redis://u:p@cache:6380/2?client_name=gw&min_replicas=1&replica_timeout_ms=250"
    )

    assert topology.kind == "single"
    assert topology.url == "redis://u:p@cache:6380/2?client_name=gw"
    assert topology.durability == Durability(1, 250)


@pytest.mark.parametrize("url", ["redis://localhost", "rediss://h:6390/0", "unix:///run/redis.sock?db=3"])
def test_plain_urls_wait_for_no_replica(url: str) -> None:
    topology = parse_redis_url(url)

    assert topology.url == url
    assert topology.durability == Durability(0, DEFAULT_REPLICA_TIMEOUT_MS)
    assert not topology.durability.waits


def test_a_sentinel_url_names_its_sentinels_service_db_and_both_credentials() -> None:
    topology = parse_redis_url(
        "redis+sentinel://app:s%40cret@s1:26380,s2,[::1]:26381/primary/3"
        "?sentinel_username=watch&sentinel_password=pw&min_replicas=1&client_name=gw"
    )

    assert topology.kind == "sentinel"
    assert topology.hosts == (("s1", 26380), ("s2", 26379), ("::1", 26381))
    assert (topology.service, topology.db) == ("primary", 3)
    assert (topology.username, topology.password) == ("app", "s@cret")
    assert (topology.sentinel_username, topology.sentinel_password) == ("watch", "pw")
    assert topology.client_name == "gw"
    assert topology.durability == Durability(1, DEFAULT_REPLICA_TIMEOUT_MS)
    assert not topology.tls


def test_a_sentinel_url_without_a_db_uses_db_0_and_rediss_means_tls() -> None:
    topology = parse_redis_url("rediss+sentinel://s1:26379/mymaster")

    assert (topology.service, topology.db, topology.tls) == ("mymaster", 0, True)
    assert topology.username is None and topology.password is None


def test_a_password_alone_is_a_password() -> None:
    topology = parse_redis_url("redis+cluster://:only-pw@n1:7000")

    assert (topology.username, topology.password) == (None, "only-pw")


def test_a_cluster_url_lists_startup_nodes() -> None:
    topology = parse_redis_url("redis+cluster://n1:7000,n2:7001,n3")

    assert topology.kind == "cluster"
    assert topology.hosts == (("n1", 7000), ("n2", 7001), ("n3", 6379))
    assert topology.service is None


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://x", "unsupported scheme 'http'"),
        ("redis://x:99999", "port must be a number"),
        ("redis+sentinel://s1:26379", "names the master's service"),
        ("redis+sentinel://s1:26379/a/b/c", "names the master's service"),
        ("redis+sentinel://s1:26379/primary/x", "database must be a number"),
        ("redis+sentinel://s1:26379/primary?db=2", "unknown option(s) db"),
        ("redis+sentinel://s1:26379/primary?min_replicas=one", "min_replicas must be a whole number"),
        ("redis+sentinel://s1/primary?min_replicas=1&replica_timeout_ms=0", "would wait forever"),
        ("redis+sentinel://s1:0/primary", "from 1 to 65535"),
        ("redis+sentinel://s1:x/primary", "from 1 to 65535"),
        ("redis+sentinel://s1,,s2/primary", "needs a name"),
        ("redis+cluster://n1:7000/0", "no databases"),
        ("redis+cluster://n1:7000?min_replicas=1", "unknown option(s) min_replicas"),
    ],
)
def test_malformed_urls_say_what_is_wrong(url: str, message: str) -> None:
    with pytest.raises(RedisUrlError) as caught:
        parse_redis_url(url)

    assert message in str(caught.value)


def test_preflight_resolves_every_host_of_a_list() -> None:
    assert redis_hosts("redis+sentinel://s1:26379,s2:26380/primary") == ["s1", "s2"]
    assert redis_hosts("redis+cluster://n1:7000,n2:7000") == ["n1", "n2"]
    assert redis_hosts("redis://cache:6379/0") == ["cache"]
    assert redis_hosts("unix:///run/redis.sock") == []


@pytest.mark.parametrize(
    "url", ["redis+sentinel://s1:26379,s2:26379/primary?min_replicas=1", "rediss+cluster://n1:7000,n2:7000"]
)
def test_the_settings_take_sentinel_and_cluster_urls(url: str, tmp_path: Path) -> None:
    settings = load_settings(_environment(tmp_path, url))

    assert settings.redis_url == url


def test_the_settings_name_the_variable_of_a_bad_url(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^GATEWAY_REDIS_URL: unknown option\(s\) colour"):
        load_settings(_environment(tmp_path, "redis+cluster://n1:7000?colour=red"))


def _environment(tmp_path: Path, redis_url: str) -> dict[str, str]:
    config = tmp_path / "gateway.yaml"
    config.write_text(MINIMAL)
    return {"GATEWAY_CONFIG": str(config), "GATEWAY_REDIS_URL": redis_url}
