"""Refused requests are counted with bounded labels, and a process on its own reports its process."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.errors import (
    AuthenticationFailed,
    ModelNotFound,
    QueueFull,
    QuotaExceeded,
    ServiceUnavailable,
    UpstreamRejected,
)
from gateway.metering.storage.buffer import MeteringBacklogFull
from gateway.metrics.instruments import Metrics
from gateway.metrics.labels import code_label, endpoint_label


@pytest.mark.parametrize(
    ("path", "label"),
    [
        ("/v1/chat/completions", "chat/completions"),
        ("/v1/completions", "completions"),
        ("/v1/embeddings", "embeddings"),
        ("/v1/responses", "responses"),
        ("/v1/messages", "messages"),
        ("/v1/batches/batch_123/cancel", "batches"),
        ("/v1/files/file-1/content", "files"),
        ("/v1/models", "models"),
        ("/admin/teams", "admin"),
        ("/v1/chat/completions/extra", "other"),
        ("/v1/" + "x" * 5000, "other"),
        ("/wp-login.php", "other"),
    ],
)
def test_the_endpoint_is_one_the_gateway_serves_or_other(path: str, label: str) -> None:
    assert endpoint_label(path) == label


def test_the_code_is_one_of_the_gateways_own_or_other() -> None:
    for error in (
        AuthenticationFailed("x"),
        AuthenticationFailed("x", code="api_key_revoked"),
        ModelNotFound("x"),
        QuotaExceeded("x"),
        QueueFull("x"),
        ServiceUnavailable("x", code="server_busy"),
        MeteringBacklogFull("x"),
    ):
        assert code_label(error.code) == error.code
    assert code_label("request_too_large") == "request_too_large"  # Litestar's 413, answered by the gateway
    # a provider's own code, passed on with its 4xx, never becomes a label value
    assert code_label(UpstreamRejected("x", code="context_length_exceeded").code) == "other"
    assert code_label(None) == "none"


def scrape(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for sample in family.samples
    }


def test_refusals_are_counted_by_endpoint_status_and_code() -> None:
    metrics = Metrics()
    for _ in range(3):
        metrics.count_refused("/v1/chat/completions", 401, "invalid_api_key")
    metrics.count_refused("/v1/embeddings", 429, "rate_limit_exceeded")
    metrics.count_refused("/v1/embeddings", 400, "whatever-an-upstream-said")
    series = scrape(metrics)
    refused = "gateway_requests_refused_total"
    assert (
        series[(refused, (("code", "invalid_api_key"), ("endpoint", "chat/completions"), ("status", "401")))]
        == 3
    )
    assert (
        series[(refused, (("code", "rate_limit_exceeded"), ("endpoint", "embeddings"), ("status", "429")))]
        == 1
    )
    assert series[(refused, (("code", "other"), ("endpoint", "embeddings"), ("status", "400")))] == 1


def test_a_process_on_its_own_reports_its_process_and_interpreter() -> None:
    series = scrape(Metrics())
    for name in ("process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds"):
        assert series[(name, ())] > 0
    assert series[("process_start_time_seconds", ())] > 1e9
    assert any(name == "python_info" for name, _ in series)
    assert ("python_gc_collections_total", (("generation", "0"),)) in series
