"""The admin API's wire format: teams, API keys and pages of them, as msgspec Structs.

Inputs forbid unknown fields so a typo is a 400, not a silently ignored setting. Updates tell an
absent field (`UNSET`: keep) from an explicit `null` (clear the restriction).
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Annotated, Generic, TypeVar

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

T = TypeVar("T")

# No control characters: PostgreSQL refuses NUL in text, and none belongs in a name or an id.
# (Python's `$` also matches before a final newline; the lookahead refuses that one too.)
PRINTABLE = r"^[^\x00-\x1f\x7f]*(?!\n)$"
Name = Annotated[str, Meta(min_length=1, max_length=200, pattern=PRINTABLE)]
Id = Annotated[str, Meta(min_length=1, max_length=200, pattern=PRINTABLE)]
Limit = Annotated[int, Meta(ge=1, le=2**31 - 1)]  # the columns are 32-bit integers
# The fair queue divides the tokens a team is served by its weight: bounded both ways, the
# quotient stays finite and no team's share can round another's to nothing.
Weight = Annotated[float, Meta(ge=0.001, le=1_000_000)]
Names = list[Name]
AwareDatetime = Annotated[datetime, Meta(tz=True)]
ExpiresInS = Annotated[int, Meta(ge=1, le=100 * 366 * 86_400)]  # a century: beyond it dates overflow

# Money is Numeric(20, 10): ten integer digits at most.
MAX_BUDGET_USD = Decimal(10) ** 10
MONEY_SCALE = Decimal(10) ** -10
# A budget in USD: a decimal string ("100.50") or a number, as check_budget takes it (for a string
# the document says the plain decimal form; an exponent, as in "1e3", is read too).
Budget = Annotated[
    Decimal,
    Meta(
        extra_json_schema={
            "pattern": "^[0-9]{1,10}(\\.[0-9]{1,10})?$",
            "minimum": 0,
            "maximum": 9_999_999_999,
        }
    ),
]


def check_budget(value: Decimal | UnsetType | None) -> None:
    """Raise ValueError (msgspec turns it into a ValidationError) for a budget no one means."""
    if not isinstance(value, Decimal):
        return
    # Compared as stored (ten decimal places): 9999999999.99999999999 rounds up to 10^10.
    if not (
        value.is_finite() and 0 <= value < MAX_BUDGET_USD and value.quantize(MONEY_SCALE) < MAX_BUDGET_USD
    ):
        raise ValueError("`monthly_budget_usd` must be a non-negative amount below 10^10 USD")


def in_utc(moment: datetime | UnsetType | None) -> datetime | UnsetType | None:
    """The same instant in UTC: SQLite keeps no offset, so a stored +02:00 would be read back 2 h off."""
    if not isinstance(moment, datetime):
        return moment
    try:
        return moment.astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:59-05:00 is past the last representable UTC instant
        raise ValueError("`expires_at` is out of range") from None


class TeamCreate(Struct, forbid_unknown_fields=True):
    name: Name
    allowed_models: Names | None = None
    allowed_regions: Names | None = None
    monthly_budget_usd: Budget | None = None  # a decimal string ("100.50") or a number
    rpm_limit: Limit | None = None
    tpm_limit: Limit | None = None
    weight: Weight = 1.0

    def __post_init__(self) -> None:
        check_budget(self.monthly_budget_usd)


class TeamUpdate(Struct, forbid_unknown_fields=True):
    name: Name | UnsetType = UNSET
    allowed_models: Names | UnsetType | None = UNSET
    allowed_regions: Names | UnsetType | None = UNSET
    monthly_budget_usd: Budget | UnsetType | None = UNSET
    rpm_limit: Limit | UnsetType | None = UNSET
    tpm_limit: Limit | UnsetType | None = UNSET
    weight: Weight | UnsetType = UNSET  # never null: every team has a share

    def __post_init__(self) -> None:
        check_budget(self.monthly_budget_usd)


class TeamOut(Struct):
    id: str
    name: str
    allowed_models: list[str] | None
    allowed_regions: list[str] | None
    monthly_budget_usd: Budget | None  # encoded as a decimal string
    rpm_limit: int | None
    tpm_limit: int | None
    weight: float
    created_at: datetime
    updated_at: datetime
    deleted_at: datetime | None


class KeyCreate(Struct, forbid_unknown_fields=True):
    team_id: Id
    name: Name
    expires_at: AwareDatetime | None = None
    expires_in_s: ExpiresInS | None = None
    allowed_models: Names | None = None
    allowed_regions: Names | None = None
    rpm_limit: Limit | None = None
    tpm_limit: Limit | None = None
    monthly_budget_usd: Budget | None = None

    def __post_init__(self) -> None:
        check_budget(self.monthly_budget_usd)
        self.expires_at = in_utc(self.expires_at)  # type: ignore[assignment]
        if self.expires_at is not None and self.expires_in_s is not None:
            raise ValueError("`expires_at` and `expires_in_s` are alternatives: give one of them")


class KeyUpdate(Struct, forbid_unknown_fields=True):
    name: Name | UnsetType = UNSET
    expires_at: AwareDatetime | UnsetType | None = UNSET
    allowed_models: Names | UnsetType | None = UNSET
    allowed_regions: Names | UnsetType | None = UNSET
    rpm_limit: Limit | UnsetType | None = UNSET
    tpm_limit: Limit | UnsetType | None = UNSET
    monthly_budget_usd: Budget | UnsetType | None = UNSET

    def __post_init__(self) -> None:
        check_budget(self.monthly_budget_usd)
        self.expires_at = in_utc(self.expires_at)


class KeyOut(Struct):
    id: str
    team_id: str
    name: str
    prefix: str  # the first characters of the secret, to recognise it; never the secret
    allowed_models: list[str] | None
    allowed_regions: list[str] | None
    monthly_budget_usd: Budget | None
    rpm_limit: int | None
    tpm_limit: int | None
    expires_at: datetime | None
    revoked_at: datetime | None
    created_at: datetime
    updated_at: datetime


class KeyCreated(KeyOut):
    """The answer to POST /admin/keys: the only time the secret is ever shown."""

    key: str


class Page(Struct, Generic[T]):
    data: list[T]
    next_cursor: str | None


def changes(update: TeamUpdate | KeyUpdate) -> dict[str, object]:
    """The fields an update sets, `None` included (it clears); absent fields are left out."""
    return {
        field: value
        for field in update.__struct_fields__
        if (value := getattr(update, field)) is not msgspec.UNSET
    }
