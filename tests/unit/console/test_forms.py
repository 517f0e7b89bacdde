"""Console forms into the admin API's Structs: empty fields, lists, numbers, and refusals naming the field."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from msgspec import UNSET

from gateway.console.forms import key_create, key_update, team_create, team_update
from gateway.errors import InvalidRequest


def test_a_new_team_takes_what_was_filled_in() -> None:
    team = team_create(
        {
            "name": "research",
            "weight": "2.5",
            "allowed_models": "chat, mini ,",
            "rpm_limit": "",
            "monthly_budget_usd": "100.50",
        }
    )
    assert (team.name, team.weight, team.allowed_models, team.rpm_limit) == (
        "research",
        2.5,
        ["chat", "mini"],
        None,
    )
    assert team.monthly_budget_usd == Decimal("100.50")


def test_an_edit_clears_what_was_emptied_and_keeps_name_and_weight_when_empty() -> None:
    patch = team_update({"name": "", "weight": "", "allowed_models": "", "rpm_limit": "60", "tpm_limit": ""})
    assert patch.name is UNSET and patch.weight is UNSET
    assert (patch.allowed_models, patch.rpm_limit, patch.tpm_limit) == (None, 60, None)
    assert patch.allowed_regions is UNSET, "a field the form did not have is left as it is"


@pytest.mark.parametrize(
    ("form", "param"),
    [
        ({"name": "t", "rpm_limit": "many"}, "rpm_limit"),
        ({"name": "t", "weight": "0"}, "weight"),
        ({"name": "t", "monthly_budget_usd": "-1"}, None),
        ({"name": ""}, "name"),
    ],
)
def test_a_bad_field_is_refused_by_name(form: dict[str, str], param: str | None) -> None:
    with pytest.raises(InvalidRequest) as refused:
        team_create(form)
    if param is not None:
        assert refused.value.param == param and refused.value.message.startswith(param)


def test_keys_expire_in_days_or_on_a_date() -> None:
    created = key_create("team_1", {"name": "ci", "expires_in_days": "7", "tpm_limit": "1000"})
    assert (created.team_id, created.expires_in_s, created.tpm_limit) == ("team_1", 7 * 86_400, 1000)
    assert key_update({"name": "ci", "expires_on": "2030-01-02"}).expires_at == datetime(
        2030, 1, 2, tzinfo=UTC
    )
    assert key_update({"name": "ci", "expires_on": ""}).expires_at is None
    with pytest.raises(InvalidRequest):
        key_create("team_1", {"name": "ci", "expires_in_days": "a week"})
