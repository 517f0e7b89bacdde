"""The console's forms as the admin API's own input Structs, so a form is checked exactly as the
JSON body of the same admin call would be (`gateway.schemas.admin`).

A form sends every field as text: an empty one means "none" (no restriction, no limit) when it can
be cleared, and "as before" for what cannot (a team's name and weight); lists are comma-separated.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time
from typing import Any, TypeVar

import msgspec
from litestar import Request

from gateway.errors import InvalidRequest
from gateway.schemas.admin import KeyCreate, KeyUpdate, TeamCreate, TeamUpdate

S = TypeVar("S")

LISTS = ("allowed_models", "allowed_regions")
LIMITS = ("rpm_limit", "tpm_limit", "monthly_budget_usd")
_AT_PATH = re.compile(r" - at `\$\.?([^`]*)`$")
_MISSING = re.compile(r"missing required field `([^`]+)`")
SECONDS_A_DAY = 86_400


async def form_fields(request: Request) -> dict[str, str]:
    """A urlencoded or multipart form's text fields (the first value of each; files ignored)."""
    form = await request.form()
    return {name: value.strip() for name, value in form.items() if isinstance(value, str)}


def team_create(form: dict[str, str]) -> TeamCreate:
    fields = _present(form, ("name", "weight", *LISTS, *LIMITS))
    return _convert(fields, TeamCreate)


def team_update(form: dict[str, str]) -> TeamUpdate:
    fields: dict[str, Any] = _clearable(form, (*LISTS, *LIMITS))
    fields |= _present(form, ("name", "weight"))
    return _convert(fields, TeamUpdate)


def key_create(team_id: str, form: dict[str, str]) -> KeyCreate:
    fields: dict[str, Any] = {"team_id": team_id} | _present(form, ("name", *LISTS, *LIMITS))
    days = form.get("expires_in_days")
    if days:
        fields["expires_in_s"] = _number(days, "expires_in_days") * SECONDS_A_DAY
    return _convert(fields, KeyCreate)


def key_update(form: dict[str, str]) -> KeyUpdate:
    fields: dict[str, Any] = _clearable(form, (*LISTS, *LIMITS)) | _present(form, ("name",))
    if "expires_on" in form:
        fields["expires_at"] = _midnight(form["expires_on"])
    return _convert(fields, KeyUpdate)


def listed(values: list[str] | None) -> str:
    """A list as the form shows it."""
    return "" if values is None else ", ".join(values)


def _present(form: dict[str, str], names: tuple[str, ...]) -> dict[str, Any]:
    """The named fields that were filled in."""
    return {name: _value(name, form[name]) for name in names if form.get(name)}


def _clearable(form: dict[str, str], names: tuple[str, ...]) -> dict[str, Any]:
    """The named fields the form has: an empty one clears the setting (null in the admin API)."""
    return {name: _value(name, form[name]) if form[name] else None for name in names if name in form}


def _value(name: str, text: str) -> Any:
    if name in LISTS:
        return [item.strip() for item in text.split(",") if item.strip()]
    return text  # numbers and amounts are converted (and checked) with the Struct


def _number(text: str, param: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise InvalidRequest(f"{param}: expected a whole number, got {text!r}", param=param) from None


def _midnight(text: str) -> datetime | None:
    """A date field as the start of that day in UTC; empty: none."""
    if not text:
        return None
    try:
        return datetime.combine(date.fromisoformat(text), time(), UTC)
    except ValueError:
        raise InvalidRequest("expires_on: expected a date, YYYY-MM-DD", param="expires_on") from None


def _convert(fields: dict[str, Any], schema: type[S]) -> S:
    """The Struct, or a 400 naming the field; text is accepted for numbers (`strict=False`)."""
    try:
        return msgspec.convert(fields, schema, strict=False)
    except msgspec.ValidationError as exc:
        message = str(exc)
        if (missing := _MISSING.search(message)) is not None:
            raise InvalidRequest(f"{missing.group(1)}: required", param=missing.group(1)) from None
        at = _AT_PATH.search(message)
        if at is None or not at.group(1):
            raise InvalidRequest(message) from None
        param = at.group(1)
        raise InvalidRequest(f"{param}: {_AT_PATH.sub('', message)}", param=param) from None
