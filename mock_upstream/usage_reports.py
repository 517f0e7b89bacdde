"""The fake provider's own bill: what it served, per API, UTC day, model and service tier, read back
through OpenAI's organization usage and costs endpoints and Anthropic's usage and cost reports
(shapes: gateway.schemas.provider_reports), behind the admin key (`ADMIN_KEY`).

Each answer is counted from the usage the mock put on the wire (a body's, or a stream's frames),
so a day of traffic through the gateway should agree with these reports to the token. Costs come
from prices set with `PUT /_mock/reports/prices` (USD per million tokens, per model and, where a
tier is billed apart, per tier; none: 0).
A test makes a report drift from what was served with `POST /_mock/reports/drift`:

    {"api": "openai", "model": "m", "tier": "default", "day": "2026-12-04",
     "input_tokens": 100, "cached_tokens": 0, "output_tokens": 0, "cost_share": 0.1}

adds the tokens to that day's group (its cost follows them) and then `cost_share` of the cost.
`GET /_mock/reports` shows what is held; `DELETE /_mock/reports` forgets it, prices kept.
"""

from __future__ import annotations

import base64
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qs

import msgspec

from gateway.schemas.provider_reports import (
    AnthropicCacheCreation,
    AnthropicCostBucket,
    AnthropicCostReport,
    AnthropicCostResult,
    AnthropicUsageBucket,
    AnthropicUsageReport,
    AnthropicUsageResult,
    OpenAICostAmount,
    OpenAICostBucket,
    OpenAICostPage,
    OpenAICostResult,
    OpenAIUsageBucket,
    OpenAIUsagePage,
    OpenAIUsageResult,
)
from mock_upstream import anthropic_format, openai_format
from mock_upstream.replies import MockReply, json_reply
from mock_upstream.routes import Api, Operation, Route

ADMIN_KEY = "sk-admin-mock"  # the admin key the report endpoints take
PER_MILLION = Decimal(1_000_000)
DAY_S = 86_400
MAX_GROUPS = 100_000  # (api, day, model, tier) groups held: a flood of made-up model names stops here
REPORT_PATHS = {
    "/organization/usage/completions": (Api.OPENAI, "usage"),
    "/organization/costs": (Api.OPENAI, "costs"),
    "/organizations/usage_report/messages": (Api.ANTHROPIC, "usage"),
    "/organizations/cost_report": (Api.ANTHROPIC, "costs"),
}
_DEFAULT_TIER = {Api.OPENAI: "default", Api.ANTHROPIC: "standard"}


class MockPrice(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """USD per million tokens; cached_input and cache_write fall back to input. `tiers`: the prices
    of the service tiers billed apart (`{"flex": {...}}`); any other tier at these."""

    input: Decimal = Decimal(0)
    output: Decimal = Decimal(0)
    cached_input: Decimal | None = None
    cache_write: Decimal | None = None
    tiers: dict[str, MockPrice] = {}


class Drift(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    api: Api
    model: str
    tier: str | None = None  # None: the API's default tier
    day: date | None = None  # None: today (UTC)
    input_tokens: int = 0  # uncached input tokens added
    cached_tokens: int = 0  # cache reads added (to the input too)
    output_tokens: int = 0
    cost_share: float = 0.0  # then the cost times (1 + cost_share)


@dataclass(slots=True)
class Served:
    """One group's day: `input` counts every prompt token, cache reads and writes included."""

    input: int = 0
    cache_read: int = 0
    cache_write: int = 0
    output: int = 0
    requests: int = 0
    cost_share: float = 0.0


Key = tuple[Api, date, str, str]  # api, day, model, tier


@dataclass
class MockBill:
    admin_key: str = ADMIN_KEY
    prices: dict[str, MockPrice] = field(default_factory=dict)
    served: dict[Key, Served] = field(default_factory=dict)

    # counting what was served

    def count(self, route: Route, request_body: Any, reply: MockReply, now: float | None = None) -> None:
        """Count a successful answer's usage, as its body or frames carry it."""
        if reply.status != 200 or route.operation not in _BILLED:
            return
        usage: dict[str, Any] = {}
        model = tier = None
        for billed in _billed_parts(reply):
            for holder in (billed, billed.response, billed.message):
                if holder is None:
                    continue
                usage.update(holder.usage or {})
                model = holder.model or model
                tier = holder.service_tier or tier
        if not usage:
            return
        tier = usage.get("service_tier") or tier
        if tier is None and isinstance(request_body, dict):
            tier = request_body.get("service_tier")
        day = datetime.fromtimestamp(time.time() if now is None else now, UTC).date()
        key = (route.api, day, model or "", self._tier(route.api, tier))
        if key not in self.served and len(self.served) >= MAX_GROUPS:
            return
        group = self.served.setdefault(key, Served())
        prompt, read, written, output = _tokens(route.api, usage)
        group.input += prompt
        group.cache_read += read
        group.cache_write += written
        group.output += output
        group.requests += 1

    @staticmethod
    def _tier(api: Api, tier: Any) -> str:
        if not isinstance(tier, str) or tier in ("", "auto", "standard_only"):
            return _DEFAULT_TIER[api]
        return tier

    def drift(self, drift: Drift) -> None:
        day = drift.day or datetime.now(UTC).date()
        key = (drift.api, day, drift.model, drift.tier or _DEFAULT_TIER[drift.api])
        group = self.served.setdefault(key, Served())
        group.input += drift.input_tokens + drift.cached_tokens
        group.cache_read += drift.cached_tokens
        group.output += drift.output_tokens
        group.cost_share += drift.cost_share

    # the reports

    def reply(self, api: Api, report: str, headers: dict[str, str], query: str) -> MockReply:
        if not self._admitted(api, headers):
            body = (anthropic_format if api is Api.ANTHROPIC else openai_format).error_body(
                401, "invalid admin API key"
            )
            return json_reply(401, body)
        params = parse_qs(query)
        if api is Api.OPENAI:
            start = int(_one(params, "start_time", "0"))
            end = int(_one(params, "end_time", str(start + 7 * DAY_S)))
            first, last = _day(start), _day(end - 1)
        else:
            first = _parse_day(_one(params, "starting_at", "1970-01-01T00:00:00Z"))
            ending = _one(params, "ending_at", "")
            last = _parse_day(ending) - timedelta(days=1) if ending else first + timedelta(days=6)
        limit = max(1, int(_one(params, "limit", "7")))
        page = _one(params, "page", "")
        if page:
            first = date.fromisoformat(base64.urlsafe_b64decode(page.encode()).decode())
        days = [first + timedelta(days=i) for i in range((last - first).days + 1)]
        shown, rest = days[:limit], days[limit:]
        next_page = base64.urlsafe_b64encode(rest[0].isoformat().encode()).decode() if rest else None
        builder = {
            (Api.OPENAI, "usage"): self._openai_usage,
            (Api.OPENAI, "costs"): self._openai_costs,
            (Api.ANTHROPIC, "usage"): self._anthropic_usage,
            (Api.ANTHROPIC, "costs"): self._anthropic_costs,
        }[(api, report)]
        return json_reply(200, msgspec.json.encode(builder(shown, next_page)))

    def _admitted(self, api: Api, headers: dict[str, str]) -> bool:
        if api is Api.ANTHROPIC:
            return headers.get("x-api-key") == self.admin_key
        return headers.get("authorization") == f"Bearer {self.admin_key}"

    def _groups(self, api: Api, day: date) -> list[tuple[str, str, Served]]:
        return sorted(
            (model, tier, served)
            for (group_api, group_day, model, tier), served in self.served.items()
            if group_api is api and group_day == day
        )

    def _parts(self, model: str, tier: str, served: Served) -> list[tuple[str, int, Decimal]]:
        """What a group is billed for: (what, tokens, USD), before its drift's share."""
        price = self.prices.get(model, MockPrice())
        price = price.tiers.get(tier, price)
        cached = price.input if price.cached_input is None else price.cached_input
        written = price.input if price.cache_write is None else price.cache_write
        uncached = served.input - served.cache_read - served.cache_write
        return [
            ("input", uncached, uncached * price.input / PER_MILLION),
            ("cached input", served.cache_read, served.cache_read * cached / PER_MILLION),
            ("cache write", served.cache_write, served.cache_write * written / PER_MILLION),
            ("output", served.output, served.output * price.output / PER_MILLION),
        ]

    def _openai_usage(self, days: list[date], next_page: str | None) -> OpenAIUsagePage:
        buckets = []
        for day in days:
            results = [
                OpenAIUsageResult(
                    input_tokens=s.input,
                    input_cached_tokens=s.cache_read,
                    output_tokens=s.output,
                    num_model_requests=s.requests,
                    model=model,
                    service_tier=tier,
                )
                for model, tier, s in self._groups(Api.OPENAI, day)
            ]
            buckets.append(
                OpenAIUsageBucket(start_time=_epoch(day), end_time=_epoch(day) + DAY_S, results=results)
            )
        return OpenAIUsagePage(data=buckets, has_more=next_page is not None, next_page=next_page)

    def _openai_costs(self, days: list[date], next_page: str | None) -> OpenAICostPage:
        buckets = []
        for day in days:
            results = []
            for model, tier, served in self._groups(Api.OPENAI, day):
                for what, tokens, usd in self._parts(model, tier, served):
                    if tokens:
                        amount = float(usd * Decimal(1 + served.cost_share))
                        results.append(
                            OpenAICostResult(
                                amount=OpenAICostAmount(value=amount), line_item=f"{model}, {what}"
                            )
                        )
            buckets.append(
                OpenAICostBucket(start_time=_epoch(day), end_time=_epoch(day) + DAY_S, results=results)
            )
        return OpenAICostPage(data=buckets, has_more=next_page is not None, next_page=next_page)

    def _anthropic_usage(self, days: list[date], next_page: str | None) -> AnthropicUsageReport:
        buckets = []
        for day in days:
            results = [
                AnthropicUsageResult(
                    uncached_input_tokens=s.input - s.cache_read - s.cache_write,
                    cache_read_input_tokens=s.cache_read,
                    cache_creation=AnthropicCacheCreation(ephemeral_5m_input_tokens=s.cache_write),
                    output_tokens=s.output,
                    model=model,
                    service_tier=tier,
                    context_window="0-200k",
                )
                for model, tier, s in self._groups(Api.ANTHROPIC, day)
            ]
            start, end = _rfc3339(day), _rfc3339(day + timedelta(days=1))
            buckets.append(AnthropicUsageBucket(starting_at=start, ending_at=end, results=results))
        return AnthropicUsageReport(data=buckets, has_more=next_page is not None, next_page=next_page)

    def _anthropic_costs(self, days: list[date], next_page: str | None) -> AnthropicCostReport:
        token_types = {
            "input": "uncached_input_tokens",
            "cached input": "cache_read_input_tokens",
            "cache write": "cache_creation.ephemeral_5m_input_tokens",
            "output": "output_tokens",
        }
        buckets = []
        for day in days:
            results = []
            for model, tier, served in self._groups(Api.ANTHROPIC, day):
                for what, tokens, usd in self._parts(model, tier, served):
                    if tokens:
                        cents = usd * Decimal(100) * Decimal(1 + served.cost_share)
                        results.append(
                            AnthropicCostResult(
                                amount=format(cents.normalize(), "f"),
                                cost_type="tokens",
                                description=f"{model} usage - {what} tokens",
                                model=model,
                                service_tier=tier,
                                token_type=token_types[what],
                                context_window="0-200k",
                            )
                        )
            start, end = _rfc3339(day), _rfc3339(day + timedelta(days=1))
            buckets.append(AnthropicCostBucket(starting_at=start, ending_at=end, results=results))
        return AnthropicCostReport(data=buckets, has_more=next_page is not None, next_page=next_page)

    # control

    def control(self, method: str, path: str, body: bytes) -> MockReply:
        """`/_mock/reports`, `/_mock/reports/prices`, `/_mock/reports/drift` (see the module docstring)."""
        try:
            if path == "/_mock/reports/prices" and method == "PUT":
                self.prices = msgspec.json.decode(body or b"{}", type=dict[str, MockPrice])
                return json_reply(200, msgspec.json.encode(self.prices))
            if path == "/_mock/reports/drift" and method == "POST":
                self.drift(msgspec.json.decode(body or b"{}", type=Drift))
                return MockReply(204, [])
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            return json_reply(400, openai_format.error_body(400, f"invalid report control: {exc}"))
        if path == "/_mock/reports" and method == "DELETE":
            self.served.clear()
            return MockReply(204, [])
        if path == "/_mock/reports" and method == "GET":
            held = [
                {"api": api, "day": day.isoformat(), "model": model, "tier": tier, **asdict(served)}
                for (api, day, model, tier), served in sorted(self.served.items())
            ]
            return json_reply(200, msgspec.json.encode(held))
        return json_reply(404, openai_format.error_body(404, f"Unknown control request: {method} {path}"))


_BILLED = frozenset({Operation.CHAT, Operation.COMPLETIONS, Operation.RESPONSES, Operation.MESSAGES})


def report_route(method: str, path: str) -> tuple[Api, str] | None:
    """The report a GET names, under any base URL prefix."""
    if method != "GET":
        return None
    for suffix, found in REPORT_PATHS.items():
        if path.endswith(suffix):
            return found
    return None


class _Billed(msgspec.Struct):
    """What the bill reads of a reply's body or stream event; the rest is skipped unread."""

    model: str | None = None
    service_tier: str | None = None
    usage: dict[str, Any] | None = None
    response: _Billed | None = None  # a Responses stream event's Response
    message: _Billed | None = None  # Anthropic's message_start


_BILLED_DECODER = msgspec.json.Decoder(_Billed)
_USAGE = b'"usage":{'  # a frame with counts in it (msgspec, as the mock writes, puts no space)


def _billed_parts(reply: MockReply) -> list[_Billed]:
    """A reply's body, or those of its stream's frames that carry usage."""
    if reply.frames is None:
        raws = [reply.body]
    else:
        raws = [
            line[len(b"data: ") :]
            for frame in reply.frames
            if _USAGE in frame
            for line in frame.split(b"\n")
            if line.startswith(b"data: ")
        ]
    parts = []
    for raw in raws:
        try:
            parts.append(_BILLED_DECODER.decode(raw))
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
    return parts


def _tokens(api: Api, usage: dict[str, Any]) -> tuple[int, int, int, int]:
    """Prompt (all of it), cache reads, cache writes and output tokens of a usage object."""

    def count(name: str, of: dict[str, Any] = usage) -> int:
        value = of.get(name)
        return value if isinstance(value, int) else 0

    if "prompt_tokens" in usage:  # chat, completions
        details = usage.get("prompt_tokens_details")
        cached = count("cached_tokens", details) if isinstance(details, dict) else 0
        return count("prompt_tokens"), cached, 0, count("completion_tokens")
    if api is Api.ANTHROPIC:
        read, written = count("cache_read_input_tokens"), count("cache_creation_input_tokens")
        return count("input_tokens") + read + written, read, written, count("output_tokens")
    details = usage.get("input_tokens_details")  # Responses
    cached = count("cached_tokens", details) if isinstance(details, dict) else 0
    return count("input_tokens"), cached, 0, count("output_tokens")


def _one(params: dict[str, list[str]], name: str, default: str) -> str:
    values = params.get(name)
    return values[0] if values else default


def _day(epoch: int) -> date:
    return datetime.fromtimestamp(epoch, UTC).date()


def _epoch(day: date) -> int:
    return int(datetime.combine(day, datetime.min.time(), UTC).timestamp())


def _parse_day(moment: str) -> date:
    return datetime.fromisoformat(moment.replace("Z", "+00:00")).astimezone(UTC).date()


def _rfc3339(day: date) -> str:
    return f"{day.isoformat()}T00:00:00Z"
