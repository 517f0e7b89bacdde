"""`/metrics` holds each counter once: no `_created` family beside it (prometheus_client's
creation-time samples, which the text format shows as a gauge of their own).

In a fresh interpreter, as a worker starts: the library's switch is process-wide, and a process
that made `Metrics` earlier in the test session would hide whether making it sets the switch.
"""

from __future__ import annotations

import subprocess
import sys

from tests.support.gateway import REPO

SCRAPE = """
from gateway.metrics.instruments import Metrics
metrics = Metrics()
metrics.count_refused("/v1/chat/completions", 401, "invalid_api_key")
metrics.upstream_errors.labels(provider="p", code="upstream_error").inc()
print(metrics.render().decode())
"""


def test_counters_have_no_created_family() -> None:
    scraped = subprocess.run(
        [sys.executable, "-c", SCRAPE], cwd=REPO, capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert "gateway_requests_refused_total{" in scraped
    assert "gateway_upstream_errors_total{" in scraped
    assert "_created" not in scraped
