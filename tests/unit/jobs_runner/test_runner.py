"""Which failures fail a line and which pause the job; the job's directives; the line usage sink."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gateway.db.models import BatchJob
from gateway.errors import (
    GatewayError,
    InvalidRequest,
    NoRoute,
    PinnedProviderUnavailable,
    QueueFull,
    QueueTimeout,
    UpstreamError,
    UpstreamRateLimited,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamTooLarge,
    UpstreamUnavailable,
)
from gateway.jobs.runner import LineUsage, job_directives, pause_reason, refuses_line
from gateway.metering.events import UsageEvent
from gateway.routing.directives import Priority


@pytest.mark.parametrize(
    "error",
    [
        UpstreamRejected("bad request", status=400),
        UpstreamRejected("no such model", status=404),
        UpstreamTooLarge(),
        InvalidRequest("messages must not be empty"),
        NoRoute("no deployment in that region"),
    ],
)
def test_a_line_fails_when_the_request_itself_is_refused(error: GatewayError) -> None:
    assert refuses_line(error)


@pytest.mark.parametrize(
    "error",
    [
        PinnedProviderUnavailable("pinned deployment down"),
        UpstreamUnavailable("503"),
        UpstreamTimeout("504"),
        UpstreamRateLimited("429"),
        UpstreamError("500"),
        QueueTimeout("waited too long"),
        QueueFull("queue full"),
    ],
)
def test_the_job_pauses_when_the_deployment_is_at_fault(error: GatewayError) -> None:
    assert not refuses_line(error)


def test_a_pause_says_why_without_the_upstreams_words() -> None:
    assert pause_reason(PinnedProviderUnavailable("text from upstream")) == "pinned deployment unavailable"
    assert "queue timeout" in pause_reason(QueueTimeout("x"))
    assert "text" not in pause_reason(UpstreamError("text from upstream"))


def job(directives: dict[str, str] | None) -> BatchJob:
    now = datetime.now(UTC)
    return BatchJob(
        id="batch_1", team_id="t", key_id="k", directives=directives, created_at=now, expires_at=now
    )


def test_a_jobs_lines_carry_its_batch_id_at_batch_priority_with_its_directives() -> None:
    directives = job_directives(job({"region": "eu", "provider": "vllm-a, vllm-b"}))
    assert directives.batch == "batch_1" and directives.priority is Priority.BATCH
    assert (directives.region, directives.providers) == ("eu", ("vllm-a", "vllm-b"))
    bare = job_directives(job(None))
    assert (bare.batch, bare.region, bare.providers) == ("batch_1", None, ())


async def test_the_line_usage_sink_gives_each_event_once_to_its_line() -> None:
    usage = LineUsage()
    event = UsageEvent(
        request_id="batch_1-0", created_at=0.0, team_id="t", key_id="k", model="m", provider="p",
        region="eu", deployment="p/m", upstream_model="m", endpoint="chat/completions", status=200,
    )  # fmt: skip
    await usage.append(event)
    assert usage.take("batch_1-1") is None
    assert usage.take("batch_1-0") is event
    assert usage.take("batch_1-0") is None
