"""Fixtures for the database integration tests: the usage-event factory of the metering tests."""

from __future__ import annotations

from tests.unit.metering.conftest import make_event  # noqa: F401  (shared fixture)
