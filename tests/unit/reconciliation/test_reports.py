"""The provider report clients read the mock's OpenAI and Anthropic admin reports: what the mock
served (JSON and streamed, cached and cache-written tokens) comes back per model and tier, with its
cost; the admin key is required; a drift shows; pages are followed; errors are ProviderReportError."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from decimal import Decimal

import httpx
import msgspec
import pytest

from gateway.reconciliation.comparison import ALL_TIERS, DEFAULT_TIER, Tokens
from gateway.reconciliation.reports import ProviderReportError, read_report, reconcilable, reports_of
from gateway.schemas.provider_reports import OpenAIUsagePage
from gateway.settings import Provider, ProviderKind
from mock_upstream.transport import InProcessMockTransport
from mock_upstream.usage_reports import ADMIN_KEY

PRICES = {"gpt-x": {"input": "2", "cached_input": "0.5", "output": "8", "tiers": {"flex": {"input": "1", "output": "4"}}},
          "claude-x": {"input": "3", "cached_input": "0.3", "cache_write": "3.75", "output": "15"}}  # fmt: skip
PREFIX = "You are a careful assistant. " * 200  # long enough to be cached


def provider(kind: ProviderKind, admin_key: str = ADMIN_KEY) -> Provider:
    url = "http://mock/v1" if kind is ProviderKind.OPENAI else "http://mock"
    return Provider(name=kind.value, kind=kind, region="r", base_url=url, admin_api_key=admin_key)


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=InProcessMockTransport(), base_url="http://mock") as client:
        (await client.put("/_mock/reports/prices", json=PRICES)).raise_for_status()
        yield client


async def chat(http: httpx.AsyncClient, text: str, **extra: object) -> dict:
    """The usage the mock answered with (a stream's from its last frame with usage)."""
    messages = [{"role": "system", "content": PREFIX}, {"role": "user", "content": text}]
    body = {"model": "gpt-x", "messages": messages, "prompt_cache_key": "k", **extra}
    reply = await http.post("/v1/chat/completions", json=body)
    reply.raise_for_status()
    if not extra.get("stream"):
        return dict(reply.json()["usage"])
    frames = [line[6:] for line in reply.text.splitlines() if line.startswith("data: {")]
    return dict([msgspec.json.decode(f) for f in frames if b'"usage":{' in f.encode()][-1]["usage"])


async def message(http: httpx.AsyncClient, text: str, **extra: object) -> None:
    system = [{"type": "text", "text": PREFIX, "cache_control": {"type": "ephemeral"}}]
    body = {
        "model": "claude-x",
        "max_tokens": 50,
        "system": system,
        "messages": [{"role": "user", "content": text}],
    }
    (await http.post("/v1/messages", json={**body, **extra})).raise_for_status()


def today() -> datetime:
    return datetime.now(UTC)


async def test_openai_reports_give_what_was_served(http: httpx.AsyncClient) -> None:
    default = [await chat(http, "one"), await chat(http, "two")]
    default.append(await chat(http, "three", stream=True, stream_options={"include_usage": True}))
    flex = await chat(http, "four", service_tier="flex")
    ledger = await reports_of(provider(ProviderKind.OPENAI), http).day(today().date(), {"gpt-x"})
    assert default[1]["prompt_tokens_details"]["cached_tokens"] > 0

    def tokens(usages: list[dict]) -> Tokens:
        return Tokens(
            sum(u["prompt_tokens"] for u in usages),
            sum(u["prompt_tokens_details"]["cached_tokens"] for u in usages),
            sum(u["completion_tokens"] for u in usages),
        )

    assert ledger.tokens == {("gpt-x", DEFAULT_TIER): tokens(default), ("gpt-x", "flex"): tokens([flex])}
    normal, cheap = ledger.tokens[("gpt-x", DEFAULT_TIER)], ledger.tokens[("gpt-x", "flex")]
    cost = (
        Decimal(normal.input - normal.cached_input) * 2 + Decimal(normal.cached_input) * Decimal("0.5")
        + Decimal(normal.output) * 8 + Decimal(cheap.input) * 1 + Decimal(cheap.output) * 4
    ) / 1_000_000  # fmt: skip
    assert set(ledger.costs) == {
        ("gpt-x", ALL_TIERS)
    }  # OpenAI's costs: per model, the flex tier at its price
    assert abs(ledger.costs[("gpt-x", ALL_TIERS)] - cost) < Decimal("1e-12")


async def test_anthropic_reports_split_cache_reads_and_writes(http: httpx.AsyncClient) -> None:
    await message(http, "one")
    await message(http, "two", stream=True)
    ledger = await reports_of(provider(ProviderKind.ANTHROPIC), http).day(today().date(), {"claude-x"})
    tokens = ledger.tokens[("claude-x", DEFAULT_TIER)]
    held = (await http.get("/_mock/reports")).json()
    [group] = [g for g in held if g["api"] == "anthropic"]
    assert group["cache_write"] > 0 and group["cache_read"] > 0
    assert tokens == Tokens(group["input"], group["cache_read"], group["output"])
    uncached = group["input"] - group["cache_read"] - group["cache_write"]
    expected = (
        uncached * Decimal(3) + group["cache_read"] * Decimal("0.3") + group["cache_write"] * Decimal("3.75")
        + group["output"] * Decimal(15)
    ) / 1_000_000  # fmt: skip
    assert ledger.costs == {("claude-x", DEFAULT_TIER): expected}


async def test_a_drift_shows_in_the_report(http: httpx.AsyncClient) -> None:
    await message(http, "one")
    before = await reports_of(provider(ProviderKind.ANTHROPIC), http).day(today().date(), set())
    drift = {
        "api": "anthropic",
        "model": "claude-x",
        "input_tokens": 500,
        "output_tokens": 7,
        "cost_share": 0.25,
    }
    assert (await http.post("/_mock/reports/drift", json=drift)).status_code == 204
    after = await reports_of(provider(ProviderKind.ANTHROPIC), http).day(today().date(), set())
    key = ("claude-x", DEFAULT_TIER)
    assert after.tokens[key].input - before.tokens[key].input == 500
    assert after.tokens[key].output - before.tokens[key].output == 7
    grown = before.costs[key] + Decimal(500 * 3 + 7 * 15) / 1_000_000
    assert after.costs[key] == grown * Decimal("1.25")


async def test_a_wrong_admin_key_is_refused(http: httpx.AsyncClient) -> None:
    for kind in (ProviderKind.OPENAI, ProviderKind.ANTHROPIC):
        with pytest.raises(ProviderReportError, match="HTTP 401"):
            await reports_of(provider(kind, admin_key="sk-wrong"), http).day(today().date(), set())


async def test_pages_are_followed_to_the_last(http: httpx.AsyncClient) -> None:
    await chat(http, "one")
    start = int(today().timestamp()) // 86_400 * 86_400 - 3 * 86_400
    params = [("start_time", str(start)), ("end_time", str(start + 4 * 86_400)), ("limit", "1"),
              ("group_by", "model")]  # fmt: skip
    headers = {"authorization": f"Bearer {ADMIN_KEY}"}
    pages = await read_report(
        http, "http://mock/v1/organization/usage/completions", headers, OpenAIUsagePage, params
    )
    assert [len(page.data) for page in pages] == [1, 1, 1, 1]
    assert [bool(page.data[0].results) for page in pages] == [False, False, False, True]


async def test_an_answer_that_is_not_a_report_is_an_error() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=msgspec.json.encode({"data": "nope"}))

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
        with pytest.raises(ProviderReportError, match="not a report"):
            await reports_of(provider(ProviderKind.OPENAI), http).day(today().date(), set())


def test_only_openai_and_anthropic_providers_with_an_admin_key_are_reconciled() -> None:
    assert reconcilable(provider(ProviderKind.OPENAI)) and reconcilable(provider(ProviderKind.ANTHROPIC))
    assert not reconcilable(provider(ProviderKind.OPENAI, admin_key=""))  # `${VAR:-}` left unset
    azure = Provider(name="a", kind=ProviderKind.AZURE, region="r", base_url="http://a", admin_api_key="k")
    assert not reconcilable(azure)
