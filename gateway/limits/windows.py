"""Rate windows: which per-minute limits bind a principal, and GCRA, the rule that applies them.

Each window (requests or tokens per minute, for a key or a team) is a token bucket holding one
minute's allowance and refilled continuously, kept as one number: its theoretical arrival time
(TAT, GCRA). A request of `cost` fits when `max(tat, now) + cost * interval - WINDOW <= now`, where
`interval = WINDOW / limit`. So a full bucket admits exactly `limit` at once, then one more every
`interval`. The same arithmetic runs here (MemoryLimiter) and in the Redis Lua script.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from gateway.auth.principal import Principal

WINDOW_US = 60_000_000.0  # one minute, in microseconds (Redis TIME's resolution)
SLACK_US = 1.0  # floating-point tolerance: a request may not be refused by rounding alone
MAX_TAT_AHEAD_US = 2 * WINDOW_US  # how far a settle may push a window's arrival time past now

Scope = Literal["key", "team"]
Kind = Literal["requests", "tokens"]


@dataclass(frozen=True, slots=True)
class Window:
    """One per-minute limit that binds a request: `limit` units of `kind` for `scope` `owner`."""

    scope: Scope
    owner: str  # the key id or the team id
    kind: Kind
    limit: int

    @property
    def interval_us(self) -> float:
        return WINDOW_US / max(self.limit, 1)  # the admin API accepts limits >= 1 only


@dataclass(frozen=True, slots=True)
class WindowCheck:
    """A window after a request was weighed against it: its TAT now and how long to wait, if refused."""

    window: Window
    cost: int
    tat_us: float  # after charging `cost` when it fitted; unchanged when refused
    now_us: float
    wait_us: float = 0.0  # 0 when the request fits

    @property
    def fits(self) -> bool:
        return self.wait_us <= 0.0

    @property
    def too_large(self) -> bool:
        """More than a whole minute's allowance: no amount of waiting lets it in."""
        return self.cost > self.window.limit

    @property
    def remaining(self) -> int:
        spare = (self.now_us + WINDOW_US - self.tat_us) / self.window.interval_us
        return max(0, min(self.window.limit, math.floor(spare + 1e-9)))

    @property
    def reset_us(self) -> float:
        """Time until the bucket is full again (OpenAI's `x-ratelimit-reset-*`)."""
        return max(0.0, self.tat_us - self.now_us)


def windows_for(principal: Principal) -> list[Window]:
    """The windows that bind a principal, in a fixed order (key before team, requests before tokens)."""
    limits: list[tuple[Scope, str, Kind, int | None]] = [
        ("key", principal.key_id, "requests", principal.key_rpm),
        ("key", principal.key_id, "tokens", principal.key_tpm),
        ("team", principal.team_id, "requests", principal.team_rpm),
        ("team", principal.team_id, "tokens", principal.team_tpm),
    ]
    return [Window(scope, owner, kind, limit) for scope, owner, kind, limit in limits if limit is not None]


def cost_in(window: Window, estimated_tokens: int) -> int:
    return 1 if window.kind == "requests" else estimated_tokens


def weigh(window: Window, tat_us: float | None, now_us: float, cost: int) -> WindowCheck:
    """GCRA: charge `cost` to the window if it fits, else say how long until it would."""
    base = now_us if tat_us is None else max(tat_us, now_us)
    charged = base + cost * window.interval_us
    allowed_at = charged - WINDOW_US
    if allowed_at > now_us + SLACK_US:
        return WindowCheck(window, cost, base, now_us, wait_us=allowed_at - now_us)
    return WindowCheck(window, cost, charged, now_us)


def corrected_tat(window: Window, tat_us: float | None, now_us: float, tokens_delta: int) -> float:
    """A token window after the request: debit what it used beyond its estimate, refund the rest.

    The debt is capped at one minute beyond a full window (`MAX_TAT_AHEAD_US`): a count no request
    could use refuses the window's next requests for two minutes at most, not for good."""
    base = now_us if tat_us is None else max(tat_us, now_us)
    return min(max(base + tokens_delta * window.interval_us, now_us), now_us + MAX_TAT_AHEAD_US)
