"""The authenticated caller of an OpenAI endpoint: a team key and the limits that bind it."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal


@dataclass(frozen=True, slots=True)
class Principal:
    key_id: str
    key_prefix: str  # safe to log
    team_id: str
    team_name: str
    # None = no restriction; otherwise the key's and the team's lists intersected
    allowed_models: frozenset[str] | None = None
    allowed_regions: frozenset[str] | None = None
    key_rpm: int | None = None
    key_tpm: int | None = None
    team_rpm: int | None = None
    team_tpm: int | None = None
    key_budget_usd: Decimal | None = None
    team_budget_usd: Decimal | None = None
    expires_at: float | None = None  # unix seconds
    team_weight: float = 1.0  # the team's share of a busy upstream (gateway.scheduling.fair_queue)

    @property
    def unlimited(self) -> bool:
        """No rate window and no budget binds this caller: admission has nothing to check."""
        return (
            self.key_rpm is None
            and self.key_tpm is None
            and self.team_rpm is None
            and self.team_tpm is None
            and self.key_budget_usd is None
            and self.team_budget_usd is None
        )

    def may_use_model(self, model: str) -> bool:
        return self.allowed_models is None or model in self.allowed_models

    def expired(self, now: float) -> bool:
        """`now` is wall-clock unix seconds."""
        return self.expires_at is not None and now >= self.expires_at


@dataclass(frozen=True, slots=True)
class KeyState:
    """A stored key as authentication sees it: whom it names, and whether it may still be used."""

    principal: Principal
    revoked: bool = False
    team_deleted: bool = False


def intersect(key_list: list[str] | None, team_list: list[str] | None) -> frozenset[str] | None:
    """The restriction both the key and its team impose; None when neither restricts."""
    if key_list is None and team_list is None:
        return None
    if key_list is None:
        return frozenset(team_list or ())
    if team_list is None:
        return frozenset(key_list)
    return frozenset(key_list) & frozenset(team_list)
