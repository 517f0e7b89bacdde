"""Rows to admin wire Structs: what of a team or a key the admin API shows (never a key hash)."""

from __future__ import annotations

from decimal import Decimal

import msgspec

from gateway.db.models import ApiKey, Team
from gateway.db.teams import as_utc
from gateway.schemas.admin import KeyCreated, KeyOut, TeamOut


def money(amount: Decimal | None) -> Decimal | None:
    """1000.5000000000 (the column's scale) -> 1000.5: the same amount, as the admin wrote it."""
    return None if amount is None else Decimal(f"{amount.normalize():f}")


def team_out(team: Team) -> TeamOut:
    return TeamOut(
        id=team.id,
        name=team.name,
        allowed_models=team.allowed_models,
        allowed_regions=team.allowed_regions,
        monthly_budget_usd=money(team.monthly_budget_usd),
        rpm_limit=team.rpm_limit,
        tpm_limit=team.tpm_limit,
        weight=team.weight,
        created_at=as_utc(team.created_at),
        updated_at=as_utc(team.updated_at),
        deleted_at=as_utc(team.deleted_at) if team.deleted_at else None,
    )


def key_out(key: ApiKey) -> KeyOut:
    return KeyOut(
        id=key.id,
        team_id=key.team_id,
        name=key.name,
        prefix=key.key_prefix,
        allowed_models=key.allowed_models,
        allowed_regions=key.allowed_regions,
        monthly_budget_usd=money(key.monthly_budget_usd),
        rpm_limit=key.rpm_limit,
        tpm_limit=key.tpm_limit,
        expires_at=as_utc(key.expires_at) if key.expires_at else None,
        revoked_at=as_utc(key.revoked_at) if key.revoked_at else None,
        created_at=as_utc(key.created_at),
        updated_at=as_utc(key.updated_at),
    )


def key_created(key: ApiKey, secret: str) -> KeyCreated:
    return KeyCreated(**msgspec.structs.asdict(key_out(key)), key=secret)
