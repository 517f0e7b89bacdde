"""Where the tests find their Redis and PostgreSQL, and which part of each a test area owns.

`GATEWAY_TEST_REDIS_URL` names the Redis server (no db number) and `GATEWAY_TEST_POSTGRES_URL` the
PostgreSQL server (no database). Unset, the session starts servers of its own (temporary folders,
free ports: `start_session_stores`, called from tests/conftest.py), so a test run never touches a
Redis or a database it did not create. Each test area has a Redis db of its own, which it may
flush; the PostgreSQL databases the tests create and drop are named by their areas
(`gateway_test_auth`, ...). tests/faults/ starts further servers of its own, to stop them.
"""

from __future__ import annotations

import os

from tests.support.servers import POSTGRES_ENV, REDIS_ENV


def _server(variable: str) -> str:
    url = os.environ.get(variable)
    if url is None:
        raise RuntimeError(f"{variable} is unset: tests/conftest.py names (or starts) the stores first")
    return url.rstrip("/")


REDIS_SERVER = _server(REDIS_ENV)
POSTGRES_SERVER = _server(POSTGRES_ENV)

# One db per area, so that one area's flush never wipes what another is using.
REDIS_DBS = {
    "redis": 1,  # tests/unit/redis, tests/integration/redis
    "routing": 2,  # tests/unit/routing
    "metering": 3,  # tests/unit/metering, tests/integration/metering
    "limits": 4,  # tests/integration/limits
    "auth": 5,  # tests/integration/auth
    "e2e": 6,  # tests/e2e/conftest.py
    "e2e-limits": 7,
    "e2e-batches": 8,
    "e2e-caching": 9,
    "e2e-workers": 10,
    "services": 11,  # tests/integration/test_services.py
    "metering-app": 12,  # tests/integration/metering/test_upstream_usage_postgres.py
    "scheduling": 13,  # tests/integration/scheduling
    "e2e-scheduling": 14,
    "browser": 15,  # tests/browser (the last db of a default Redis: 0-15)
}


def redis_url(area: str) -> str:
    """The URL of `area`'s own db on the test Redis."""
    return f"{REDIS_SERVER}/{REDIS_DBS[area]}"


def postgres_url(database: str) -> str:
    """The URL of `database` on the test PostgreSQL, as users write it (`postgresql://...`)."""
    return f"{POSTGRES_SERVER}/{database}"


POSTGRES_ADMIN_URL = postgres_url("postgres")  # where databases are created and dropped
