"""Settings for every test in this process, and the stores the session runs against."""

from __future__ import annotations

import pytest
import structlog

from tests.support.servers import start_session_stores

# loggers follow the configuration of the moment they log in, so `capture_logs` sees every one
# whatever an earlier test configured (gateway.logs.configure_logging keeps this choice)
structlog.configure(cache_logger_on_first_use=False)

# The session's own PostgreSQL and Redis, unless the environment names servers to use
# (tests/support/stores.py). Started as this module is imported, not in `pytest_configure`: pytest
# imports the conftest files of the paths it is given before it configures, and those read the
# stores' addresses as they are imported.
_STOPS = start_session_stores()


def pytest_unconfigure(config: pytest.Config) -> None:
    for stop in reversed(_STOPS):
        stop()
