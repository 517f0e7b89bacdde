"""The bound on the token counts an upstream reports: a count outside it is not believed.

Every adapter reads the counts through `reported_count` and `bounded`, so that a negative, absurd
or non-integer count never becomes a usage record, a cost or a limiter's charge. The request is
then metered from the gateway's own estimate instead (`usage_source = estimated`).
"""

from __future__ import annotations

from gateway.providers.base import TokenUsage

# Tokens per count per request: orders of magnitude past any context window, and far inside the
# BIGINT columns of usage_records and the integer arithmetic of pricing.
MAX_TOKENS = 1_000_000_000


class UntrustedUsage(ValueError):
    """A usage report with a count that cannot be true; the message names the field, never a prompt."""


def reported_count(value: object, field: str) -> int:
    """A count as the upstream sent it: absent (None) is 0; anything but a whole number in
    [0, MAX_TOKENS] raises UntrustedUsage."""
    if value is None:
        return 0
    if type(value) is not int:  # bool is an int to Python, not to JSON
        raise UntrustedUsage(f"{field} is a {type(value).__name__}, not a token count")
    if not 0 <= value <= MAX_TOKENS:
        raise UntrustedUsage(f"{field} = {value} is outside [0, {MAX_TOKENS}]")
    return value


def bounded(usage: TokenUsage) -> TokenUsage:
    """`usage` when it adds up: each count within MAX_TOKENS, cache reads and writes within the prompt."""
    for field in ("prompt_tokens", "completion_tokens", "cached_tokens", "cache_write_tokens"):
        reported_count(getattr(usage, field), field)
    if usage.cached_tokens + usage.cache_write_tokens > usage.prompt_tokens:
        raise UntrustedUsage(
            f"cached ({usage.cached_tokens}) and cache-write ({usage.cache_write_tokens}) tokens "
            f"exceed the prompt's {usage.prompt_tokens}"
        )
    return usage
