"""A provider's own account of a day, read from its admin API: OpenAI's organization usage and
costs, Anthropic's usage and cost reports (the wire formats: gateway.schemas.provider_reports).

Each is read for one UTC day in one bucket (`bucket_width=1d`), page after page, into a `Ledger`
(gateway.reconciliation.comparison). HTTP goes through an `httpx.AsyncClient` the caller owns;
every failure is a `ProviderReportError`, which names the call and the status, never the key.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal, InvalidOperation
from typing import Protocol, TypeVar

import httpx
import msgspec

from gateway.reconciliation.comparison import Ledger, Tokens, attribute, tier_name
from gateway.schemas.provider_reports import (
    AnthropicCostReport,
    AnthropicUsageReport,
    OpenAICostPage,
    OpenAIUsagePage,
)
from gateway.settings import Provider, ProviderKind

MAX_PAGES = 1000  # a cursor that never ends is the provider's fault, not a reason to loop forever
CENTS = Decimal(100)
Page = TypeVar("Page")


class ProviderReportError(Exception):
    """A provider's report could not be read: unreachable, refused, or not in its format."""


class ProviderReports(Protocol):
    async def day(self, day: date, known_models: set[str]) -> Ledger:
        """The provider's usage and cost of `day`, its models named as the gateway knows them
        (`known_models`: the records' upstream models) where a report names a dated snapshot."""
        ...


def reconcilable(provider: Provider) -> bool:
    """Whether the provider's own reports can be read: an OpenAI or Anthropic provider with an admin
    key (Azure bills through Azure Cost Management, which these reports are not). An empty key, as
    `${OPENAI_ADMIN_KEY:-}` leaves it unset, is none."""
    return bool(provider.admin_api_key) and provider.kind in (
        ProviderKind.OPENAI,
        ProviderKind.ANTHROPIC,
    )


def reports_of(provider: Provider, http: httpx.AsyncClient) -> ProviderReports:
    if provider.kind is ProviderKind.ANTHROPIC:
        return AnthropicReports(provider, http)
    return OpenAIReports(provider, http)


def day_bounds(day: date) -> tuple[datetime, datetime]:
    start = datetime.combine(day, time.min, UTC)
    return start, start + timedelta(days=1)


async def _get(
    http: httpx.AsyncClient, url: str, headers: dict[str, str], params: list[tuple[str, str]]
) -> bytes:
    what = f"GET {url}"
    try:
        reply = await http.get(url, headers=headers, params=tuple(params))
    except httpx.HTTPError as exc:
        raise ProviderReportError(f"{what}: {type(exc).__name__}") from exc
    if not 200 <= reply.status_code < 300:
        raise ProviderReportError(f"{what}: HTTP {reply.status_code}")
    return reply.content


def _decode(body: bytes, kind: type[Page], what: str) -> Page:
    try:
        return msgspec.json.decode(body, type=kind)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ProviderReportError(f"{what}: not a report ({exc})") from exc


async def read_report(
    http: httpx.AsyncClient,
    url: str,
    headers: dict[str, str],
    kind: type[Page],
    params: list[tuple[str, str]],
) -> list[Page]:
    """Every page of a report, each page's `next_page` sent back as `page` while it `has_more`."""
    pages: list[Page] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        paged = [*params, ("page", cursor)] if cursor else params
        page = _decode(await _get(http, url, headers, paged), kind, f"GET {url}")
        pages.append(page)
        cursor = getattr(page, "next_page", None) if getattr(page, "has_more", False) else None
        if cursor is None:
            return pages
    raise ProviderReportError(f"GET {url}: more than {MAX_PAGES} pages")


@dataclass(frozen=True, slots=True)
class OpenAIReports:
    """`/v1/organization/usage/completions` (grouped by model and service tier) and
    `/v1/organization/costs` (grouped by line item: "<model>, <what>"), the admin key as bearer."""

    provider: Provider
    http: httpx.AsyncClient

    def _headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.provider.admin_api_key}"}

    async def _read(self, path: str, kind: type[Page], params: list[tuple[str, str]]) -> list[Page]:
        return await read_report(self.http, f"{self.provider.urls[0]}{path}", self._headers(), kind, params)

    async def day(self, day: date, known_models: set[str]) -> Ledger:
        start, end = day_bounds(day)
        span = [("start_time", str(int(start.timestamp()))), ("end_time", str(int(end.timestamp())))]
        span += [("bucket_width", "1d"), ("limit", "1")]
        ledger = Ledger(cost_by_tier=False)
        usage = [*span, ("group_by", "model"), ("group_by", "service_tier")]
        for usage_page in await self._read("/organization/usage/completions", OpenAIUsagePage, usage):
            for bucket in usage_page.data:
                for result in bucket.results or bucket.result:
                    tokens = Tokens(result.input_tokens, result.input_cached_tokens, result.output_tokens)
                    model = attribute(result.model or "", known_models)
                    ledger.add_tokens(model, tier_name(result.service_tier), tokens)
        for cost_page in await self._read(
            "/organization/costs", OpenAICostPage, [*span, ("group_by", "line_item")]
        ):
            for cost_bucket in cost_page.data:
                for cost in cost_bucket.results or cost_bucket.result:
                    model = attribute(line_item_model(cost.line_item), known_models)
                    ledger.add_cost(model, "", Decimal(repr(cost.amount.value)))
        return ledger


def line_item_model(line_item: str | None) -> str:
    """The model a cost line item names: "gpt-4o-mini-2024-07-18, input" -> its model."""
    if not line_item:
        return ""
    return line_item.rsplit(", ", 1)[0].strip()


@dataclass(frozen=True, slots=True)
class AnthropicReports:
    """`/v1/organizations/usage_report/messages` (grouped by model and service tier) and
    `/v1/organizations/cost_report` (grouped by description, which names the model and tier)."""

    provider: Provider
    http: httpx.AsyncClient

    def _headers(self) -> dict[str, str]:
        return {
            "x-api-key": self.provider.admin_api_key or "",
            "anthropic-version": self.provider.anthropic_version,
        }

    async def _read(self, path: str, kind: type[Page], params: list[tuple[str, str]]) -> list[Page]:
        return await read_report(self.http, f"{self.provider.urls[0]}{path}", self._headers(), kind, params)

    async def day(self, day: date, known_models: set[str]) -> Ledger:
        start, end = day_bounds(day)
        span = [("starting_at", _rfc3339(start)), ("ending_at", _rfc3339(end))]
        span += [("bucket_width", "1d"), ("limit", "1")]
        ledger = Ledger(cost_by_tier=True)
        usage = [*span, ("group_by[]", "model"), ("group_by[]", "service_tier")]
        for usage_page in await self._read(
            "/v1/organizations/usage_report/messages", AnthropicUsageReport, usage
        ):
            for bucket in usage_page.data:
                for result in bucket.results:
                    written = (
                        result.cache_creation.ephemeral_5m_input_tokens
                        + result.cache_creation.ephemeral_1h_input_tokens
                    )
                    prompt = result.uncached_input_tokens + result.cache_read_input_tokens + written
                    tokens = Tokens(prompt, result.cache_read_input_tokens, result.output_tokens)
                    model = attribute(result.model or "", known_models)
                    ledger.add_tokens(model, tier_name(result.service_tier), tokens)
        costs = [*span, ("group_by[]", "description")]
        for cost_page in await self._read("/v1/organizations/cost_report", AnthropicCostReport, costs):
            for cost_bucket in cost_page.data:
                for cost in cost_bucket.results:
                    if cost.model is None or cost.cost_type not in (None, "tokens"):
                        continue  # web search, code execution...: the gateway meters tokens only
                    model = attribute(cost.model, known_models)
                    ledger.add_cost(model, tier_name(cost.service_tier), _cents(cost.amount) / CENTS)
        return ledger


def _rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _cents(amount: str) -> Decimal:
    try:
        return Decimal(amount)
    except InvalidOperation as exc:
        raise ProviderReportError(f"cost report: amount {amount!r} is not a number") from exc
