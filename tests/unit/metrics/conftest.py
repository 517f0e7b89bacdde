"""Fixtures for the metrics unit tests: the metering tests' usage-event factory."""

from tests.unit.metering.conftest import make_event  # noqa: F401  (shared fixture)
