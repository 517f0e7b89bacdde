"""Batch quotes' wire format (`POST /v1/gateway/batches/quote`) and the placement a job records
from one (the `gateway.placement` member of a Batch object)."""

from __future__ import annotations

from typing import Any

from msgspec import Struct

# What a quote's tokens were counted with (`QuoteTokens.counted_by`)
COUNTED_BY_TOKENIZER, COUNTED_BY_ESTIMATE = "tokenizer", "estimate"
# Where a lane's expected duration comes from (`QuoteDuration.basis`)
FROM_HISTORY, NO_HISTORY, FROM_WINDOW = "history", "no history", "window"


class QuoteRequest(Struct, kw_only=True, forbid_unknown_fields=True):
    """An uploaded Batch API input file, or its lines inline (each as a line of such a file: custom_id,
    method, url, body). `completion_window` is the deadline a lane is checked against."""

    input_file_id: str | None = None
    lines: list[dict[str, Any]] | None = None
    endpoint: str = "/v1/chat/completions"
    completion_window: str = "24h"


class QuoteTokens(Struct, kw_only=True):
    prompt: int
    cached: int  # of `prompt`: the part a prefix shared across lines lets the cache serve
    output: int  # the allowance: each line's max_completion_tokens or max_tokens, times n
    counted_by: str  # "tokenizer" or "estimate"
    tokenizer: str  # its name, or "estimate"


class QuotePrices(Struct, kw_only=True):
    """USD per million tokens, as the lane is metered."""

    input: str
    cached_input: str
    output: str


class QuoteDuration(Struct, kw_only=True):
    """Seconds. `expected_s` with the spread `p10_s`-`p90_s` of the deployment's recent batches,
    None with basis "no history"; `bound_s` what the lane promises at most (a provider's window)."""

    basis: str  # "history", "no history" or "window"
    expected_s: float | None
    p10_s: float | None
    p90_s: float | None
    bound_s: float | None
    history_batches: int
    queue_lines: int  # lines ahead of this batch on the deployment


class QuoteLane(Struct, kw_only=True):
    id: str  # "<deployment>:<execution>[:<tier>]"
    deployment: str
    provider: str
    region: str
    execution: str  # "gateway" (the gateway sends the lines) or "provider" (the provider's Batch API)
    service_tier: str | None  # None: the provider's default tier
    tokens: QuoteTokens
    shared_prefix_share: float  # cached / prompt
    prices: QuotePrices
    cost: str  # exact USD
    uncached_cost: str  # the same with no prompt token cached
    duration: QuoteDuration
    meets_window: bool  # expected (or bound) within completion_window; unknown counts as met


class BatchQuote(Struct, kw_only=True):
    model: str
    lines: int
    endpoint: str
    completion_window: str
    lanes: list[QuoteLane]
    cheapest: str | None  # the lane each placement rule picks
    fastest: str | None
    by_deadline: str | None
    object: str = "gateway.batch_quote"


class JobPlacement(Struct, kw_only=True):
    """A job placed by `metadata.gateway_placement`: the rule, the lane it picked and the quote."""

    rule: str
    lane: str
    deployment: str
    execution: str
    service_tier: str | None
    quote: BatchQuote
