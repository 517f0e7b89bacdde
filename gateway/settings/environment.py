"""The environment's settings (`GATEWAY_*`), with the YAML catalog (`gateway.settings.catalog`) they
name, validated once at start-up into one frozen `Settings`.

This is the only module that reads `os.environ`.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from pathlib import Path

import msgspec
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from gateway.redis.urls import RedisUrlError, parse_redis_url
from gateway.settings.catalog import (
    BUFFERED_BODIES,
    BatchSettings,
    Catalog,
    CircuitSettings,
    ConfigError,
    DeploymentSpec,
    LimitSettings,
    ModelSpec,
    Price,
    Provider,
    ProviderKind,
    RetrySettings,
    load_catalog,
    unpriced_deployments,
)
from gateway.settings.work import Capacity, FileSettings, JobSettings, S3Settings, SchedulingSettings

__all__ = [
    "BUFFERED_BODIES",
    "BatchSettings",
    "Capacity",
    "Catalog",
    "CircuitSettings",
    "ConfigError",
    "DeploymentSpec",
    "FileSettings",
    "JobSettings",
    "LimitSettings",
    "ModelSpec",
    "Price",
    "Provider",
    "ProviderKind",
    "RetrySettings",
    "S3Settings",
    "SchedulingSettings",
    "Settings",
    "default_config_path",
    "load_catalog",
    "load_settings",
    "unpriced_deployments",
]


class Settings(msgspec.Struct, frozen=True):
    catalog: Catalog
    config_path: str
    database_url: str
    redis_url: str | None
    admin_key: str | None
    # a read replica for the usage reports, usage endpoints and console pages; None: the primary
    database_read_url: str | None = None
    # usage_records' month partitions created ahead of the current month (PostgreSQL)
    usage_partitions_ahead: int = 3
    # whole months of usage records kept before the current one; None: kept forever. Older months
    # are dropped once usage_daily holds their totals (gateway.metering.storage.retention)
    usage_retention_months: int | None = None
    # days a stored Response (`store: true`) is kept; older ones are purged every few minutes
    # (gateway.dialects.responses.store)
    responses_retention_days: int = 30
    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = 1
    log_format: str = "json"
    key_cache_ttl_s: float = 5.0
    key_cache_unknown_ttl_s: float = 5.0  # how long a hash no key has is answered 401 without a query
    metering_flush_interval_s: float = 0.2
    metering_batch_size: int = 1000
    metering_reclaim_idle_s: float = 60.0  # a writer's unacked entries are taken over after this
    # auto | worker | process | external (gateway.server.writer_process); auto: `gateway serve`
    # starts a writer process when Redis is configured, an app built otherwise writes in its worker
    metering_writer: str = "auto"
    keep_alive_timeout_s: int = 5  # uvicorn's timeout_keep_alive: an idle kept-alive connection is closed
    limit_concurrency: int | None = None  # uvicorn's: connections + requests per worker before 503s
    # seals console sessions (gateway.console.auth.sessions); None: derived from the admin key
    console_secret: str | None = None
    console_session_ttl_s: float = 12 * 3600.0
    # Serving processes claim and run batch jobs (with the catalog's jobs.runner); false: they leave
    # them to `gateway job-runner` processes
    run_jobs: bool = True
    # PROMETHEUS_MULTIPROC_DIR: where every worker of one `gateway serve` keeps its metrics
    # (gateway.metrics.instruments); set by `gateway serve` itself for several workers
    metrics_dir: str | None = None
    # GATEWAY_TRUSTED_PROXIES: the addresses and networks (CIDR) of the reverse proxies whose
    # X-Forwarded-For/-Proto/-Host are believed (gateway.server.forwarded); none by default
    trusted_proxies: tuple[str, ...] = ()
    # OpenTelemetry (gateway.telemetry): traces, and the GenAI metrics, exported over OTLP/HTTP when
    # an endpoint is set for them (OTEL_EXPORTER_OTLP_ENDPOINT or the signal's own) and neither
    # OTEL_SDK_DISABLED=true nor OTEL_<SIGNAL>_EXPORTER=none; the SDK reads the other OTEL_* itself
    otel_traces: bool = False
    otel_metrics: bool = False
    # Idempotent retries (gateway.idempotency): how long an answer is kept for a repeat of its
    # Idempotency-Key, how long a first request's claim lasts unrenewed (its process renews it
    # while it runs), and the largest answer kept (a larger one's retry runs anew)
    idempotency_window_s: float = 24 * 3600.0
    idempotency_lease_s: float = 600.0
    idempotency_max_answer_bytes: int = 4 * 1024 * 1024


METERING_WRITERS = ("auto", "worker", "process", "external")


def load_settings(environ: dict[str, str] | None = None) -> Settings:
    """Read the environment and the catalog it points at; raise ConfigError when anything is off."""
    env = dict(os.environ if environ is None else environ)
    config_path = env.get("GATEWAY_CONFIG") or default_config_path()
    log_format = env.get("GATEWAY_LOG_FORMAT") or _default_log_format()
    if log_format not in ("json", "console"):
        raise ConfigError(f"GATEWAY_LOG_FORMAT: must be json or console, not {log_format!r}")
    database_url = env.get("GATEWAY_DATABASE_URL") or "sqlite:///data/gateway.db"
    _check_database_url(database_url)
    database_read_url = env.get("GATEWAY_DATABASE_READ_URL") or None
    if database_read_url is not None:
        _check_database_url(database_read_url, "GATEWAY_DATABASE_READ_URL")
    partitions_ahead = _int_env(env, "GATEWAY_USAGE_PARTITIONS_AHEAD", 3)
    if partitions_ahead < 0:
        raise ConfigError("GATEWAY_USAGE_PARTITIONS_AHEAD: must not be negative")
    redis_url = env.get("GATEWAY_REDIS_URL") or None
    if redis_url is not None:
        _check_redis_url(redis_url)
    metering_writer = env.get("GATEWAY_METERING_WRITER") or "auto"
    if metering_writer not in METERING_WRITERS:
        raise ConfigError(
            f"GATEWAY_METERING_WRITER: must be auto, worker, process or external, not {metering_writer!r}"
        )
    if metering_writer in ("process", "external") and redis_url is None:
        raise ConfigError(
            f"GATEWAY_METERING_WRITER={metering_writer} needs GATEWAY_REDIS_URL: without Redis the usage "
            "events stay in the serving process, and its own writer moves them"
        )
    return Settings(
        catalog=load_catalog(config_path, env),
        config_path=config_path,
        database_url=database_url,
        redis_url=redis_url,
        admin_key=env.get("GATEWAY_ADMIN_KEY") or None,
        database_read_url=database_read_url,
        usage_partitions_ahead=partitions_ahead,
        usage_retention_months=_positive_int_env(env, "GATEWAY_USAGE_RETENTION_MONTHS"),
        responses_retention_days=_positive_int_env(env, "GATEWAY_RESPONSES_RETENTION_DAYS") or 30,
        host=env.get("GATEWAY_HOST", "127.0.0.1"),
        port=_port_env(env, "GATEWAY_PORT", 8080),
        workers=_int_env(env, "GATEWAY_WORKERS", 1),
        log_format=log_format,
        key_cache_ttl_s=_float_env(env, "GATEWAY_KEY_CACHE_TTL_S", 5.0),
        key_cache_unknown_ttl_s=_float_env(env, "GATEWAY_KEY_CACHE_UNKNOWN_TTL_S", 5.0),
        metering_reclaim_idle_s=_float_env(env, "GATEWAY_METERING_RECLAIM_IDLE_S", 60.0),
        metering_writer=metering_writer,
        keep_alive_timeout_s=_positive_int_env(env, "GATEWAY_KEEP_ALIVE_TIMEOUT_S") or 5,
        limit_concurrency=_positive_int_env(env, "GATEWAY_LIMIT_CONCURRENCY"),
        console_secret=env.get("GATEWAY_CONSOLE_SECRET") or None,
        console_session_ttl_s=_positive_int_env(env, "GATEWAY_CONSOLE_SESSION_TTL_S") or 12 * 3600,
        run_jobs=_bool_env(env, "GATEWAY_RUN_JOBS", True),
        metrics_dir=env.get("PROMETHEUS_MULTIPROC_DIR") or None,
        trusted_proxies=_networks_env(env, "GATEWAY_TRUSTED_PROXIES"),
        otel_traces=_otlp_exports(env, "TRACES"),
        otel_metrics=_otlp_exports(env, "METRICS"),
        idempotency_window_s=_positive_float_env(env, "GATEWAY_IDEMPOTENCY_WINDOW_S", 24 * 3600.0),
        idempotency_lease_s=_positive_float_env(env, "GATEWAY_IDEMPOTENCY_LEASE_S", 600.0),
        idempotency_max_answer_bytes=_positive_int_env(env, "GATEWAY_IDEMPOTENCY_MAX_ANSWER_BYTES")
        or 4 * 1024 * 1024,
    )


def _otlp_exports(env: dict[str, str], signal: str) -> bool:
    """Whether the standard OpenTelemetry variables ask for `signal` (TRACES, METRICS) over OTLP."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get(f"OTEL_{signal}_EXPORTER", "otlp").strip().lower() == "none":
        return False
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get(f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT"))


DEFAULT_CONFIG = "config/gateway.yaml"
# The copy of config/gateway.yaml that the wheel carries (setup.py), for a gateway run outside a checkout
PACKAGED_CONFIG = Path(__file__).resolve().parents[1] / "_data" / "gateway.yaml"


# The checkout's own, beside the package: what an editable install (`make run`'s .venv) reads
CHECKOUT_CONFIG = Path(__file__).resolve().parents[2] / DEFAULT_CONFIG


def default_config_path() -> str:
    """`config/gateway.yaml` of the working directory when there is one, else the package's copy:
    the wheel's, or the checkout's for an editable install (as gateway.db.migrate finds the
    migrations), so that `gateway serve` works from any folder however it was installed."""
    for found in (Path(DEFAULT_CONFIG), PACKAGED_CONFIG, CHECKOUT_CONFIG):
        if found.is_file():
            return str(found)
    return DEFAULT_CONFIG  # when none exists, the error names the documented path


def _default_log_format() -> str:
    """Readable lines for a person watching a terminal, JSON lines for whatever collects them.

    The logs go to stdout (gateway.logs), so that is the stream asked.
    """
    return "console" if sys.stdout.isatty() else "json"


DATABASE_SCHEMES = ("postgresql", "postgres", "postgresql+asyncpg", "sqlite", "sqlite+aiosqlite")


def _check_database_url(url: str, name: str = "GATEWAY_DATABASE_URL") -> None:
    """The URL names a database the gateway has a driver for; its text never goes into the message,
    since it may carry a password."""
    try:
        scheme = make_url(url).drivername
    except ArgumentError:
        raise ConfigError(
            f"{name}: not a database URL (postgresql://user@host:5432/name or sqlite:///path)"
        ) from None
    except ValueError:  # a port that is not a number
        raise ConfigError(f"{name}: the port must be a number") from None
    if scheme not in DATABASE_SCHEMES:
        raise ConfigError(f"{name}: unsupported scheme {scheme!r} (use postgresql:// or sqlite:///)")
    if scheme.startswith("sqlite") and make_url(url).host:
        raise ConfigError(_sqlite_two_slashes(name, url))


def _sqlite_two_slashes(name: str, url: str) -> str:
    """`sqlite://data/x.db` reads `data` as a host: a SQLite path follows a third slash."""
    scheme, _, rest = url.partition("://")
    return (
        f"{name}: a SQLite URL has no host: after '{scheme}://' comes '/' and the path, so a relative "
        f"path takes three slashes ({scheme}:///{rest}) and an absolute one four ({scheme}:////{rest})"
    )


def _check_redis_url(url: str) -> None:
    """One server, a Sentinel set or a Cluster: the forms of gateway.redis.urls (docs/redis.md)."""
    try:
        parse_redis_url(url)
    except RedisUrlError as exc:
        raise ConfigError(f"GATEWAY_REDIS_URL: {exc}") from None


def _networks_env(env: dict[str, str], name: str) -> tuple[str, ...]:
    """Comma-separated addresses or networks (`10.0.0.5, 10.1.0.0/16, ::1`), each as ipaddress writes it."""
    networks = []
    for item in (env.get(name) or "").split(","):
        if item.strip():
            try:
                networks.append(str(ipaddress.ip_network(item.strip(), strict=False)))
            except ValueError:
                raise ConfigError(f"{name}: {item.strip()!r} is not an IP address or network") from None
    return tuple(networks)


def _int_env(env: dict[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{name}: expected an integer, got {raw!r}") from None


def _port_env(env: dict[str, str], name: str, default: int) -> int:
    port = _int_env(env, name, default)
    if not 1 <= port <= 65535:
        raise ConfigError(f"{name}: a TCP port is a number from 1 to 65535, not {port}")
    return port


def _positive_int_env(env: dict[str, str], name: str) -> int | None:
    """A positive integer, or None when the variable is unset or empty."""
    if not env.get(name):
        return None
    value = _int_env(env, name, 0)
    if value < 1:
        raise ConfigError(f"{name}: must be at least 1")
    return value


def _bool_env(env: dict[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    if raw.lower() in ("true", "1", "yes"):
        return True
    if raw.lower() in ("false", "0", "no"):
        return False
    raise ConfigError(f"{name}: must be true or false, not {raw!r}")


def _positive_float_env(env: dict[str, str], name: str, default: float) -> float:
    value = _float_env(env, name, default)
    if value <= 0:
        raise ConfigError(f"{name}: must be more than 0")
    return value


def _float_env(env: dict[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}: expected a number, got {raw!r}") from None
    if value < 0:
        raise ConfigError(f"{name}: must not be negative")
    return value
