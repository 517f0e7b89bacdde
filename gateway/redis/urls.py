"""The Redis URL of the settings, read into the topology it names: one server, Sentinel or Cluster.

redis-py reads `redis://`, `rediss://` and `unix://` URLs itself but has no URL for the other two,
so these forms are the gateway's own (the Sentinel one as other Redis clients spell it):

    redis+sentinel://[user:password@]host:port[,host:port...]/<service>[/<db>][?options]
    redis+cluster://[user:password@]host:port[,host:port...][?options]

(`rediss+...` for TLS). The credentials are the data nodes' (the master's, every cluster node's);
a Sentinel's own are the options `sentinel_username` and `sentinel_password`. Every form takes
`client_name`; one server and Sentinel also `min_replicas` and `replica_timeout_ms` (`Durability`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

SINGLE_SCHEMES = frozenset({"redis", "rediss", "unix"})
SENTINEL_SCHEMES = frozenset({"redis+sentinel", "rediss+sentinel"})
CLUSTER_SCHEMES = frozenset({"redis+cluster", "rediss+cluster"})
DURABILITY_OPTIONS = ("min_replicas", "replica_timeout_ms")
SENTINEL_OPTIONS = frozenset({"client_name", "sentinel_username", "sentinel_password", *DURABILITY_OPTIONS})
# No WAIT in a Cluster: the group commit's round trip spans nodes (docs/redis.md says what a Cluster
# failover may lose instead).
CLUSTER_OPTIONS = frozenset({"client_name"})
DEFAULT_PORT = 6379
DEFAULT_SENTINEL_PORT = 26379
DEFAULT_REPLICA_TIMEOUT_MS = 500


class RedisUrlError(ValueError):
    """The URL names no topology the gateway can connect to; the message says why."""


@dataclass(frozen=True, slots=True)
class Durability:
    """How many replicas must hold a write the gateway cannot afford to lose before it counts.

    Replication is asynchronous: a master that fails over can lose writes it acknowledged. For the
    few writes that must survive (a usage event, a batch pin placed or moved), the gateway sends
    `WAIT min_replicas replica_timeout_ms` after them on the same connection; 0 (the default, for
    a lone Redis with no replica to wait for) sends nothing.
    """

    min_replicas: int = 0
    replica_timeout_ms: int = DEFAULT_REPLICA_TIMEOUT_MS

    @property
    def waits(self) -> bool:
        return self.min_replicas > 0


@dataclass(frozen=True, slots=True)
class RedisTopology:
    """What a Redis URL names. `url` is set for one server: redis-py's own URL, minus our options."""

    kind: Literal["single", "sentinel", "cluster"]
    durability: Durability = Durability()
    url: str | None = None
    hosts: tuple[tuple[str, int], ...] = ()
    service: str | None = None
    db: int = 0
    username: str | None = None
    password: str | None = None
    tls: bool = False
    client_name: str | None = None
    sentinel_username: str | None = None
    sentinel_password: str | None = None


def parse_redis_url(url: str) -> RedisTopology:
    """The topology `url` names; RedisUrlError when it names none."""
    parts = urlsplit(url)
    if parts.scheme in SINGLE_SCHEMES:
        return _single(url)
    if parts.scheme not in SENTINEL_SCHEMES | CLUSTER_SCHEMES:
        raise RedisUrlError(
            f"unsupported scheme {parts.scheme!r} (use redis://, rediss://, unix://, "
            "redis+sentinel://, rediss+sentinel://, redis+cluster:// or rediss+cluster://)"
        )
    sentinel = parts.scheme in SENTINEL_SCHEMES
    options = _options(parts.query, SENTINEL_OPTIONS if sentinel else CLUSTER_OPTIONS)
    userinfo, _, hostlist = parts.netloc.rpartition("@")
    username, password = _credentials(userinfo)
    service, db = _service_and_db(parts.path) if sentinel else (None, 0)
    if not sentinel and parts.path.strip("/"):
        raise RedisUrlError("a cluster has no databases: the URL takes no path (/<db>)")
    return RedisTopology(
        "sentinel" if sentinel else "cluster",
        durability=_durability(options),
        hosts=_hosts(hostlist, DEFAULT_SENTINEL_PORT if sentinel else DEFAULT_PORT),
        service=service,
        db=db,
        username=username,
        password=password,
        tls=parts.scheme.startswith("rediss"),
        client_name=options.get("client_name"),
        sentinel_username=options.get("sentinel_username"),
        sentinel_password=options.get("sentinel_password"),
    )


def _single(url: str) -> RedisTopology:
    """One server: redis-py reads the URL; our options come out of its query first, since redis-py
    hands every query option it does not know to the connection as a keyword (a TypeError)."""
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018  (urlsplit checks the port only when it is read)
    except ValueError:
        raise RedisUrlError("the port must be a number from 0 to 65535") from None
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    ours = {name: value for name, value in pairs if name in DURABILITY_OPTIONS}
    rest = [(name, value) for name, value in pairs if name not in DURABILITY_OPTIONS]
    base = url.partition("?")[0]  # not urlunsplit: it would turn unix:///path into unix:/path
    plain = f"{base}?{urlencode(rest)}" if rest else base
    return RedisTopology("single", durability=_durability(ours), url=plain)


def _options(query: str, allowed: frozenset[str]) -> dict[str, str]:
    options = dict(parse_qsl(query, keep_blank_values=True))
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise RedisUrlError(f"unknown option(s) {', '.join(unknown)} (known: {', '.join(sorted(allowed))})")
    return options


def _durability(options: dict[str, str]) -> Durability:
    replicas = _whole(options, "min_replicas", 0)
    timeout_ms = _whole(options, "replica_timeout_ms", DEFAULT_REPLICA_TIMEOUT_MS)
    if replicas and timeout_ms == 0:
        raise RedisUrlError("replica_timeout_ms must be positive: WAIT with 0 would wait forever")
    return Durability(replicas, timeout_ms)


def _whole(options: dict[str, str], name: str, default: int) -> int:
    raw = options.get(name)
    if raw is None:
        return default
    if not raw.isdigit():
        raise RedisUrlError(f"{name} must be a whole number, not {raw!r}")
    return int(raw)


def _credentials(userinfo: str) -> tuple[str | None, str | None]:
    if not userinfo:
        return None, None
    user, colon, password = userinfo.partition(":")
    return unquote(user) or None, unquote(password) if colon else None


def _hosts(hostlist: str, default_port: int) -> tuple[tuple[str, int], ...]:
    hosts = []
    for entry in hostlist.split(","):
        host, port = _host_port(entry.strip(), default_port)
        hosts.append((host, port))
    return tuple(hosts)


def _host_port(entry: str, default_port: int) -> tuple[str, int]:
    if not entry:
        raise RedisUrlError("every host of the list needs a name (host:port,host:port)")
    if entry.startswith("["):  # an IPv6 address: [::1]:26379
        host, _, rest = entry[1:].partition("]")
        port = rest.removeprefix(":")
    else:
        host, _, port = entry.rpartition(":") if ":" in entry else (entry, "", "")
    if not host:
        raise RedisUrlError(f"no host name in {entry!r}")
    if not port:
        return host, default_port
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise RedisUrlError(f"the port of {entry!r} must be a number from 1 to 65535")
    return host, int(port)


def _service_and_db(path: str) -> tuple[str, int]:
    segments = [unquote(s) for s in path.strip("/").split("/")] if path.strip("/") else []
    if not segments or len(segments) > 2:
        raise RedisUrlError(
            "a Sentinel URL names the master's service: redis+sentinel://hosts/<service>[/<db>]"
        )
    db = segments[1] if len(segments) == 2 else "0"
    if not db.isdigit():
        raise RedisUrlError(f"the database must be a number, not {db!r}")
    return segments[0], int(db)
