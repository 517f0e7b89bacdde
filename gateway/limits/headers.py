"""OpenAI's rate-limit headers and the 429 errors that carry them (windows and budgets).

`x-ratelimit-{limit,remaining,reset}-{requests,tokens}` describe, for each kind, the binding window
with the least room left; resets are durations in Go's notation, as OpenAI sends them ("6s",
"6m0s", "120ms"). Refusals add `retry-after` (whole seconds, at least 1) and `retry-after-ms`,
which the OpenAI SDK honours for its own retries.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import Decimal

from gateway.errors import QuotaExceeded, RateLimited
from gateway.limits.windows import Kind, WindowCheck

NO_RETRY = {"x-should-retry": "false"}  # the OpenAI SDK would otherwise retry a hopeless 429


def go_duration(microseconds: float) -> str:
    """`1.5s`, `6m0s`, `1h0m0s`, `120ms`, `0s`: milliseconds rounded up, as OpenAI writes them."""
    millis = math.ceil(max(microseconds, 0.0) / 1000.0 - 1e-9)
    if millis == 0:
        return "0s"
    if millis < 1000:
        return f"{millis}ms"
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds = f"{rest / 1000:.3f}".rstrip("0").rstrip(".")
    if hours:
        return f"{hours}h{minutes}m{seconds}s"
    if minutes:
        return f"{minutes}m{seconds}s"
    return f"{seconds}s"


def _tightest(checks: Sequence[WindowCheck], kind: Kind) -> WindowCheck | None:
    of_kind = [c for c in checks if c.window.kind == kind]
    if not of_kind:
        return None
    return min(of_kind, key=lambda c: (c.remaining, -c.reset_us))


def rate_limit_headers(checks: Sequence[WindowCheck]) -> dict[str, str]:
    headers: dict[str, str] = {}
    kinds: tuple[Kind, ...] = ("requests", "tokens")
    for kind in kinds:
        check = _tightest(checks, kind)
        if check is None:
            continue
        headers[f"x-ratelimit-limit-{kind}"] = str(check.window.limit)
        headers[f"x-ratelimit-remaining-{kind}"] = str(check.remaining)
        headers[f"x-ratelimit-reset-{kind}"] = go_duration(check.reset_us)
    return headers


def _name(check: WindowCheck) -> str:
    unit = "requests per min (RPM)" if check.window.kind == "requests" else "tokens per min (TPM)"
    return f"{unit} for {check.window.scope} {check.window.owner}"


def rate_limited(checks: Sequence[WindowCheck]) -> RateLimited:
    """The 429 for a request that did not fit one or more of its windows (`checks` holds them all)."""
    refused = [c for c in checks if not c.fits]
    worst = max(refused, key=lambda c: (c.too_large, c.wait_us))
    headers = rate_limit_headers(checks)
    if worst.too_large:
        message = (
            f"Request too large: {worst.cost} estimated tokens exceed the limit of {worst.window.limit} "
            f"{_name(worst)}. Reduce the prompt or max_tokens."
        )
        return RateLimited(message, headers=headers | NO_RETRY | {"retry-after": "60"})
    wait_ms = math.ceil(worst.wait_us / 1000.0)
    message = (
        f"Rate limit reached for {_name(worst)}: limit {worst.window.limit}, "
        f"requested {worst.cost}. Please try again in {go_duration(worst.wait_us)}."
    )
    retry = {"retry-after": str(max(1, math.ceil(wait_ms / 1000))), "retry-after-ms": str(wait_ms)}
    return RateLimited(message, headers=headers | retry)


def quota_exceeded(scope: str, owner: str, budget: Decimal, month: str, seconds_left: float) -> QuotaExceeded:
    """The 429 `insufficient_quota` once a key's or team's spend this month reached its budget."""
    message = (
        f"The monthly budget of {budget.normalize():f} USD for {scope} {owner} is spent for {month}; "
        "requests are refused until the next calendar month (UTC) or until the budget is raised."
    )
    retry_after = str(max(1, math.ceil(seconds_left)))
    return QuotaExceeded(message, headers=NO_RETRY | {"retry-after": retry_after})


def request_over_budget(
    scope: str, owner: str, budget: Decimal, cost: Decimal, left: Decimal, month: str, seconds_left: float
) -> QuotaExceeded:
    """The 429 `insufficient_quota` for a request whose reservation is more than the budget has left."""
    message = (
        f"This request may cost up to {cost.normalize():f} USD (its prompt and max_tokens at the "
        f"model's prices), more than the {left.normalize():f} USD left of the monthly budget of "
        f"{budget.normalize():f} USD for {scope} {owner} in {month}. Lower max_tokens or raise the budget."
    )
    retry_after = str(max(1, math.ceil(seconds_left)))
    return QuotaExceeded(message, headers=NO_RETRY | {"retry-after": retry_after})


BUDGET_HELD_RETRY_S = 1  # the requests holding the rest of a budget are usually done by then


def budget_held(scope: str, owner: str, budget: Decimal, held: Decimal) -> RateLimited:
    """The 429 for a request that would fit the budget but for what requests in flight reserved."""
    message = (
        f"The rest of the monthly budget of {budget.normalize():f} USD for {scope} {owner} is reserved "
        f"by requests in flight ({held.normalize():f} USD). Please try again once they finish."
    )
    retry = {"retry-after": str(BUDGET_HELD_RETRY_S), "retry-after-ms": str(BUDGET_HELD_RETRY_S * 1000)}
    return RateLimited(message, headers=retry)
