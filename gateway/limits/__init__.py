"""Rate limits (requests and tokens per minute, per key and team) and monthly budgets.

`Limiter.admit` reserves a request's tokens and cost before it is dispatched (`Reservations`
prices it), `Limiter.settle` replaces the reservation by what was metered; `RedisLimiter` is
exact across processes, `MemoryLimiter` serves the embedded single process.
"""

from gateway.limits.limiter import Admission, Limiter, MemoryLimiter
from gateway.limits.reconcile import RecordedSpend, load_month_spend, reconcile
from gateway.limits.redis.limiter import RedisLimiter
from gateway.limits.reservation import Reservation, Reservations
from gateway.limits.spend import MonthSpend

__all__ = [
    "Admission",
    "Limiter",
    "MemoryLimiter",
    "MonthSpend",
    "RecordedSpend",
    "RedisLimiter",
    "Reservation",
    "Reservations",
    "load_month_spend",
    "reconcile",
]
