from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gateway.api.query_params import MAX_TEXT, moment_param, page_size, path_id, text_param
from gateway.errors import InvalidRequest


@pytest.mark.parametrize("value", ["\x00", "gpt\x00", "a\x01", "a\tb", "line\n", "\x7f", "\ud800", "x" * 513])
def test_text_with_a_control_character_or_too_long_is_refused(value: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        text_param(value, "model")
    assert caught.value.param == "model"
    assert caught.value.status == 400


@pytest.mark.parametrize("value", ["gpt-4o-mini", "eu west", "modèle/ü", "x" * MAX_TEXT])
def test_readable_text_passes_unchanged(value: str) -> None:
    assert text_param(value, "model") == value


def test_absent_or_empty_text_is_no_filter() -> None:
    assert text_param(None, "model") is None
    assert text_param("", "model") is None


def test_an_empty_path_id_is_refused() -> None:
    with pytest.raises(InvalidRequest) as caught:
        path_id("", "team_id")
    assert caught.value.param == "team_id"


@pytest.mark.parametrize(
    ("value", "moment"),
    [
        ("2026-11-01", datetime(2026, 11, 1, tzinfo=UTC)),
        ("2026-11-01T12:30:00", datetime(2026, 11, 1, 12, 30, tzinfo=UTC)),
        ("2026-11-01T12:30:00Z", datetime(2026, 11, 1, 12, 30, tzinfo=UTC)),
        ("2026-11-01T14:30:00+02:00", datetime(2026, 11, 1, 12, 30, tzinfo=UTC)),
        ("0001-01-01T00:00:00", datetime(1, 1, 1, tzinfo=UTC)),
        ("9999-12-31T23:59:59+00:00", datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)),
    ],
)
def test_moments_are_read_as_utc(value: str, moment: datetime) -> None:
    parsed = moment_param(value, "start")
    assert parsed == moment
    assert parsed is not None and parsed.utcoffset() is not None and not parsed.utcoffset()


@pytest.mark.parametrize(
    "value",
    [
        "2026-02-30",
        "2026-13-01",
        "99999-01-01",
        "2026-01-01T24:01",
        "0001-01-01T00:00:00+05:00",
        "9999-12-31T23:59:59-05:00",
        "2026-01-01\x00",
        "soon",
    ],
)
def test_impossible_moments_are_refused(value: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        moment_param(value, "end")
    assert caught.value.param == "end"


@pytest.mark.parametrize("value", ["0", "-1", "201", "1.5", "", " 5", "+5", "\u0661", "9" * 5000])
def test_page_sizes_outside_their_bounds_are_refused(value: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        page_size(value, "limit", default=50, maximum=200)
    assert caught.value.param == "limit"


def test_page_sizes_within_bounds_and_the_default() -> None:
    assert page_size(None, "limit", default=50, maximum=200) == 50
    assert page_size("1", "limit", default=50, maximum=200) == 1
    assert page_size("200", "limit", default=50, maximum=200) == 200
