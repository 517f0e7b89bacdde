"""Rate limits (requests and tokens per minute, per key and team) and monthly budgets.

`Limiter.admit` runs before a request is dispatched, `Limiter.settle` after it is metered;
`RedisLimiter` is exact across processes, `MemoryLimiter` serves the embedded single process.
"""

from gateway.limits.limiter import Admission, Limiter, MemoryLimiter
from gateway.limits.reconcile import load_month_spend, reconcile
from gateway.limits.redis_limiter import RedisLimiter
from gateway.limits.spend import MonthSpend
from gateway.limits.windows import estimate_tokens, requested_max_tokens

__all__ = [
    "Admission",
    "Limiter",
    "MemoryLimiter",
    "MonthSpend",
    "RedisLimiter",
    "estimate_tokens",
    "load_month_spend",
    "reconcile",
    "requested_max_tokens",
]
