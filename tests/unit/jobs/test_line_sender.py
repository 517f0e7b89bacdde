"""Which failures fail a line and which pause the job; the line usage sink; each line's cache key."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.errors import (
    GatewayError,
    InvalidRequest,
    NoRoute,
    PinnedProviderUnavailable,
    QueueFull,
    QueueTimeout,
    RateLimited,
    UpstreamError,
    UpstreamRateLimited,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamTooLarge,
    UpstreamUnavailable,
)
from gateway.jobs.input_lines import prefix_key
from gateway.jobs.ledger import PendingLine, line_request_id
from gateway.jobs.line_sender import (
    LineSender,
    LineUsage,
    estimated_prompt,
    line_cache_key,
    pacing_s,
    pause_reason,
    refuses_line,
)
from gateway.limits import Reservations
from gateway.metering.events import UsageEvent
from gateway.providers.base import Endpoint
from gateway.proxy.request import parse_request
from gateway.proxy.service import ProxyService
from gateway.routing.directives import Directives, Priority
from gateway.routing.health import HealthBoard
from gateway.routing.pins import MemoryPinStore
from gateway.scheduling.ticket import Ticket
from gateway.settings import CircuitSettings, RetrySettings
from tests.unit.routing.catalog import PLACED_TABLE, TABLE, principal


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


def body(system: Any, question: str, **extra: Any) -> dict[str, Any]:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    return {"model": "m", "messages": messages, **extra}


def cache_key_of(line_body: dict[str, Any]) -> str | None:
    """The cache key a line's directives get, its prefix key made as the Batch API's create makes it."""
    parsed = parse_request(json.dumps(line_body).encode(), Endpoint.CHAT, max_messages=100)
    return line_cache_key("team-1", parsed, prefix_key(line_body))


def test_lines_with_the_same_system_prompt_get_the_same_cache_key() -> None:
    first = cache_key_of(body("You are terse.", "question 1"))
    second = cache_key_of(body("You are terse.", "question 2"))
    other = cache_key_of(body("You are verbose.", "question 1"))
    assert first is not None and first == second
    assert other is not None and other != first


def test_a_line_that_brings_its_own_cache_key_or_breakpoint_keeps_it() -> None:
    assert cache_key_of(body("You are terse.", "question 1", prompt_cache_key="mine")) is None
    marked = [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}]
    assert cache_key_of(body(marked, "question 1")) is None


def test_a_full_window_paces_for_as_long_as_the_limiter_says_and_a_hopeless_one_fails() -> None:
    assert pacing_s(RateLimited("full", headers={"retry-after": "6", "retry-after-ms": "5400"})) == 5.4
    assert pacing_s(RateLimited("held", headers={"retry-after": "1"})) == 1.0
    too_large = RateLimited("too large", headers={"x-should-retry": "false", "retry-after": "60"})
    assert pacing_s(too_large) is None


def test_a_first_run_keeps_the_lines_request_id_and_a_rerun_has_its_own() -> None:
    assert line_request_id("batch_1", 7, 1) == "batch_1-7"
    assert line_request_id("batch_1", 7, 2) == "batch_1-7-2"
    assert len({line_request_id("batch_1", 7, run) for run in range(1, 6)}) == 5


def test_a_lost_runs_prompt_is_estimated_from_its_text_or_from_its_bytes() -> None:
    text = json.dumps(body("x" * 400, "y" * 400))
    assert 200 <= estimated_prompt(text, max_messages=100) < 250
    assert estimated_prompt("[" * 10_000, max_messages=100) == 2_500  # unreadable: its bytes / 4


def test_a_lone_user_message_gets_no_key_of_its_own() -> None:
    lone = {"model": "m", "messages": [{"role": "user", "content": "question 1"}]}
    assert cache_key_of(lone) is None  # one key for every such line would crowd them on one replica
    assert cache_key_of({**lone, "tools": [{"type": "function", "function": {"name": "f"}}]}) is not None


HANDBOOK = "Extract every field of the invoice. " * 120


def line_ticket(line_body: dict[str, Any], team: str = "team-1") -> Ticket:
    """The ticket a line's send asks the scheduler for, built as `LineSender` builds it."""
    health = HealthBoard([d.id for d in PLACED_TABLE.all()], CircuitSettings())
    proxy = ProxyService(PLACED_TABLE, MemoryPinStore(3600), health, None, LineUsage(), RetrySettings())  # type: ignore[arg-type]
    sender = LineSender(proxy, LineUsage(), Reservations(TABLE, 4096), None, 100)  # type: ignore[arg-type]
    line = PendingLine(1, json.dumps(line_body), prefix_key(line_body))
    ctx = sender._context("batch_1-1-1", line, principal(team), Directives(batch="batch_1"))
    return ctx.ticket


def test_a_lines_ticket_names_its_shared_prefix_within_its_team() -> None:
    first, second = line_ticket(body(HANDBOOK, "question 1")), line_ticket(body(HANDBOOK, "question 2"))
    assert first.priority is Priority.BATCH
    assert first.prefix is not None and first.prefix == second.prefix
    assert abs(first.prefix_tokens - len(HANDBOOK) / 4) < 8
    assert first.replica is None  # a batch follows its pin, never a conversation
    assert line_ticket(body(HANDBOOK, "question 1"), "team-2").prefix != first.prefix
