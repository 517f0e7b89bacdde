"""The metering stores of tests/integration/metering, for the writer process that serves them."""

from tests.integration.metering.conftest import make_event, pg_engine, redis, stream  # noqa: F401  (shared fixtures)
