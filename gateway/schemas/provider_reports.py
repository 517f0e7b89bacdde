"""The providers' own usage and cost reports, as their admin APIs answer them (read by
gateway.reconciliation, served by the mock upstream).

OpenAI: `GET /v1/organization/usage/completions` and `GET /v1/organization/costs` (an admin key as
the bearer token; times in unix seconds; a page's `next_page` is the next request's `page`).
Anthropic: `GET /v1/organizations/usage_report/messages` and `GET /v1/organizations/cost_report`
(the admin key in `x-api-key`; times in RFC 3339; `has_more` and `next_page`, sent back as `page`).
Only the fields a reconciliation reads are declared; the others are ignored.
"""

from __future__ import annotations

import msgspec

# OpenAI


class OpenAIUsageResult(msgspec.Struct, kw_only=True):
    """One group's completions usage in a bucket; `input_tokens` includes the cached ones."""

    object: str = "organization.usage.completions.result"
    input_tokens: int = 0
    input_cached_tokens: int = 0
    output_tokens: int = 0
    num_model_requests: int = 0
    model: str | None = None  # with group_by=model
    service_tier: str | None = None  # with group_by=service_tier
    batch: bool | None = None  # with group_by=batch


class OpenAICostAmount(msgspec.Struct, kw_only=True):
    value: float = 0.0  # a JSON number, in `currency`
    currency: str = "usd"


class OpenAICostResult(msgspec.Struct, kw_only=True):
    """One line item's cost in a bucket. A line item names the model and what was billed
    ("gpt-4o-mini-2024-07-18, input"); there is no model or tier of its own."""

    object: str = "organization.costs.result"
    amount: OpenAICostAmount = msgspec.field(default_factory=OpenAICostAmount)
    line_item: str | None = None  # with group_by=line_item
    project_id: str | None = None


class OpenAIUsageBucket(msgspec.Struct, kw_only=True):
    object: str = "bucket"
    start_time: int
    end_time: int
    # The reference names the list `results` in its examples and `result` in its schema: both read.
    results: list[OpenAIUsageResult] = []
    result: list[OpenAIUsageResult] = []


class OpenAICostBucket(msgspec.Struct, kw_only=True):
    object: str = "bucket"
    start_time: int
    end_time: int
    results: list[OpenAICostResult] = []
    result: list[OpenAICostResult] = []


class OpenAIUsagePage(msgspec.Struct, kw_only=True):
    object: str = "page"
    data: list[OpenAIUsageBucket] = []
    has_more: bool = False
    next_page: str | None = None


class OpenAICostPage(msgspec.Struct, kw_only=True):
    object: str = "page"
    data: list[OpenAICostBucket] = []
    has_more: bool = False
    next_page: str | None = None


# Anthropic


class AnthropicCacheCreation(msgspec.Struct, kw_only=True):
    ephemeral_1h_input_tokens: int = 0
    ephemeral_5m_input_tokens: int = 0


class AnthropicUsageResult(msgspec.Struct, kw_only=True):
    """One group's Messages usage in a bucket: the input split into uncached, cache reads and cache
    writes (the three together are what a Messages answer's usage sums to)."""

    uncached_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation: AnthropicCacheCreation = msgspec.field(default_factory=AnthropicCacheCreation)
    output_tokens: int = 0
    model: str | None = None  # with group_by[]=model
    service_tier: str | None = None  # with group_by[]=service_tier: standard, batch, priority...
    context_window: str | None = None
    workspace_id: str | None = None
    api_key_id: str | None = None


class AnthropicCostResult(msgspec.Struct, kw_only=True):
    """One cost item in a bucket. `amount` is in the currency's lowest unit (cents for USD), as a
    decimal string; model, tier and token type are given with group_by[]=description."""

    amount: str = "0"
    currency: str = "USD"
    cost_type: str | None = None  # tokens, web_search, code_execution...
    description: str | None = None
    model: str | None = None
    service_tier: str | None = None
    token_type: str | None = None
    context_window: str | None = None
    workspace_id: str | None = None


class AnthropicUsageBucket(msgspec.Struct, kw_only=True):
    starting_at: str
    ending_at: str
    results: list[AnthropicUsageResult] = []


class AnthropicCostBucket(msgspec.Struct, kw_only=True):
    starting_at: str
    ending_at: str
    results: list[AnthropicCostResult] = []


class AnthropicUsageReport(msgspec.Struct, kw_only=True):
    data: list[AnthropicUsageBucket] = []
    has_more: bool = False
    next_page: str | None = None


class AnthropicCostReport(msgspec.Struct, kw_only=True):
    data: list[AnthropicCostBucket] = []
    has_more: bool = False
    next_page: str | None = None
