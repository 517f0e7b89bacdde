"""Operations endpoints: liveness, readiness (the stores, the degraded modes, how far metering trails),
Prometheus metrics; and `/`, which sends a person who opens the gateway's address to the console."""

from __future__ import annotations

import asyncio
import contextlib

import msgspec
from litestar import MediaType, Response, get, head
from litestar.response import Redirect
from sqlalchemy import text

from gateway.api.openapi import documented, json_schema
from gateway.db.session import ReplicaSessions
from gateway.metering.storage.writer import dead_letter_count
from gateway.routing.batch_pin import PinStoreUnavailable
from gateway.services import Services, ServicesDependency

JSON = "application/json"
# Prometheus' text format; Litestar adds the charset to a text/* type itself.
PROMETHEUS_TEXT = "text/plain; version=0.0.4"


class Liveness(msgspec.Struct):
    status: str = "ok"


class Readiness(msgspec.Struct, kw_only=True, omit_defaults=True):
    """GET /readyz: the stores, the degraded modes, how far metering trails (docs/operations.md)."""

    status: str  # ready | unavailable
    database: str  # ok | unreachable (the error's name)
    redis: str  # ok | not configured (in-process state) | unreachable (...)
    degraded: list[str]  # each store unreachable and each feature serving without one
    metering_backlog: int | None  # usage events not yet written; null: the buffer is unreachable
    metering_oldest_unwritten_s: float | None  # null: nothing waits (or the buffer is unreachable)
    metering_dead_letters: int | None
    metering_last_error: str | None
    reason: str | None = None  # why no request can be served, when status is unavailable


# /health too: the path vLLM, SGLang and TGI answer it on, which benchmark clients probe before
# they start.
@get(
    ["/healthz", "/health"],
    include_in_schema=True,
    operation_class=documented(response=json_schema(Liveness)),
)
async def healthz() -> Response[bytes]:
    return Response(msgspec.json.encode(Liveness()), media_type=JSON)


# Plain text: a JSON response without a body would announce the length of `null`.
@head(["/healthz", "/health"], include_in_schema=False, media_type=MediaType.TEXT)
async def healthz_head() -> None:
    """Liveness for probes that ask with HEAD (load balancers): 200, no body."""


async def _database_ok(services: Services) -> str:
    try:
        async with asyncio.timeout(2.0), services.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
    except Exception as exc:  # any driver failure means "not ready"; the name is enough here
        return f"unreachable ({type(exc).__name__})"
    return "ok"


async def _redis_ok(services: Services) -> str:
    if services.redis is None:
        return "not configured (in-process state)"
    try:
        async with asyncio.timeout(2.0):
            await services.redis.ping()
    except Exception as exc:
        return f"unreachable ({type(exc).__name__})"
    return "ok"


async def _backlog(services: Services) -> int | None:
    try:
        async with asyncio.timeout(2.0):
            return await services.buffer.depth()
    except Exception:  # the buffer's store is down: readiness reports it, it does not fail
        return None


async def _oldest_unwritten_s(services: Services) -> float | None:
    """Seconds since the oldest usage event still waiting to be written was buffered."""
    try:
        async with asyncio.timeout(2.0):
            age = await services.buffer.oldest_age_s()
    except Exception:  # as for the backlog: reported as unknown
        return None
    return None if age is None else round(age, 3)


async def _dead_letters(services: Services) -> int | None:
    try:
        async with asyncio.timeout(2.0):
            return await dead_letter_count(services.sessions)
    except Exception:  # the database is down (readiness says so) or not migrated yet
        return None


async def _replica_ok(services: Services) -> bool:
    """False while usage reports read the primary because the read replica is unreachable."""
    replica = getattr(services, "report_sessions", None)
    if not isinstance(replica, ReplicaSessions):
        return True  # none configured: reports read the primary as they should
    return await replica.reachable()  # tried only once its cool-down is over


@get(
    "/readyz",
    operation_class=documented(
        response=json_schema(Readiness), also={"503": "No request can be served: `reason` says why."}
    ),
)
async def readyz(services: ServicesDependency) -> Response[bytes]:
    """200 while the gateway can serve, in a degraded mode or not (`degraded` names each); 503 only
    when it can serve no request at all."""
    database, redis, backlog, oldest, dead_letters, replica = await asyncio.gather(
        _database_ok(services),
        _redis_ok(services),
        _backlog(services),
        _oldest_unwritten_s(services),
        _dead_letters(services),
        _replica_ok(services),
    )
    unable = unable_to_serve(services, database)
    report = Readiness(
        status="ready" if unable is None else "unavailable",
        database=database,
        redis=redis,
        degraded=degraded_modes(services, database, redis) + ([] if replica else ["read_replica"]),
        metering_backlog=backlog,
        metering_oldest_unwritten_s=oldest,
        metering_dead_letters=dead_letters,
        metering_last_error=services.writer.last_error,
        reason=unable,
    )
    return Response(msgspec.json.encode(report), media_type=JSON, status_code=200 if unable is None else 503)


def degraded_modes(services: Services, database: str, redis: str) -> list[str]:
    """The stores unreachable, then the features serving without them (docs/operations.md)."""
    modes = [
        name for name, state in (("database", database), ("redis", redis)) if state.startswith("unreachable")
    ]
    modes += [
        name
        for name, flag in (
            ("batch_pins", services.proxy.pins_degraded),
            ("provider_health", getattr(services.health, "degraded", False)),
            ("rate_limits", getattr(services.limiter, "degraded", False)),
            ("metering_buffer", getattr(services.buffer, "spooling", False)),
        )
        if flag
    ]
    return modes


def unable_to_serve(services: Services, database: str) -> str | None:
    """Why no request can be served now, or None. Without the database the key cache still
    authenticates the keys it holds (gateway.auth.key_cache): only with none is every request refused."""
    if database != "ok" and services.key_cache.known_keys == 0:
        return "the database is unreachable and no API key is cached: no request can be authenticated"
    return None


@get(
    "/metrics",
    operation_class=documented(
        content={PROMETHEUS_TEXT: {"schema": {"type": "string", "description": "Prometheus' text format."}}}
    ),
)
async def metrics(services: ServicesDependency) -> Response[bytes]:
    services.metrics.open_circuits.set(len(services.health.open_circuits()))
    backlog, oldest, dead_letters = await asyncio.gather(
        _backlog(services), _oldest_unwritten_s(services), _dead_letters(services)
    )
    if backlog is not None:  # each gauge keeps its last value while its store is unreachable
        services.metrics.metering_backlog.set(backlog)
        services.metrics.metering_oldest_unwritten.set(oldest or 0.0)
    if dead_letters is not None:
        services.metrics.usage_dead_letters.set(dead_letters)
    with contextlib.suppress(PinStoreUnavailable):  # the gauge keeps its last value meanwhile
        services.metrics.active_pins.set(await services.pins.active_count())
    return Response(services.metrics.render(), media_type=PROMETHEUS_TEXT)


@get("/", include_in_schema=False)
async def root() -> Redirect:
    """The gateway's address opened in a browser: the console (`/ui`), not a JSON 404."""
    return Redirect("/ui", status_code=302)


OPS_HANDLERS = [healthz, healthz_head, readyz, metrics, root]
