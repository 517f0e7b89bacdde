"""Directives from X-Gateway-* headers and the `gateway` body object: every form, conflicts, bad values."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.errors import DirectiveConflict, InvalidRequest
from gateway.routing.directives import NO_DIRECTIVES, Directives, Fallback, Priority, parse_directives

HEADERS = {
    "x-gateway-batch": "run-42:part.1_a-b",
    "x-gateway-region": "eu-west",
    "x-gateway-provider": "vllm-eu, openai-us",
    "x-gateway-fallback": "never",
    "x-gateway-cache-key": "prefix-7",
}
BODY = {
    "batch": "run-42:part.1_a-b",
    "region": "eu-west",
    "provider": ["vllm-eu", "openai-us"],
    "fallback": "never",
    "cache_key": "prefix-7",
}
EVERYTHING = Directives(
    batch="run-42:part.1_a-b",
    region="eu-west",
    providers=("vllm-eu", "openai-us"),
    fallback=Fallback.NEVER,
    cache_key="prefix-7",
)


def test_nothing_given_is_no_directives() -> None:
    assert parse_directives({}, None) is NO_DIRECTIVES
    assert parse_directives({"content-type": "application/json"}, {}) == Directives()


def test_every_header() -> None:
    assert parse_directives(HEADERS, None) == EVERYTHING


def test_every_body_field() -> None:
    assert parse_directives({}, BODY) == EVERYTHING


def test_header_and_body_agreeing() -> None:
    assert parse_directives(HEADERS, BODY) == EVERYTHING


def test_header_and_body_complement_each_other() -> None:
    directives = parse_directives({"x-gateway-batch": "b1"}, {"region": "us-east"})
    assert directives == Directives(batch="b1", region="us-east")


def test_single_provider_forms() -> None:
    assert parse_directives({"x-gateway-provider": "vllm-eu"}, None).providers == ("vllm-eu",)
    assert parse_directives({}, {"provider": "vllm-eu"}).providers == ("vllm-eu",)


def test_fallback_defaults_to_batch() -> None:
    assert parse_directives({"x-gateway-batch": "b"}, None).fallback is Fallback.BATCH
    assert parse_directives({}, {"fallback": "batch"}).fallback is Fallback.BATCH


def test_null_body_fields_are_absent() -> None:
    assert parse_directives({}, {"batch": None, "provider": None}) is NO_DIRECTIVES


@pytest.mark.parametrize(
    ("header", "body_field", "header_value", "body_value"),
    [
        ("x-gateway-batch", "batch", "a", "b"),
        ("x-gateway-region", "region", "us-east", "eu-west"),
        ("x-gateway-provider", "provider", "vllm-eu,openai-us", ["openai-us", "vllm-eu"]),
        ("x-gateway-fallback", "fallback", "batch", "never"),
        ("x-gateway-cache-key", "cache_key", "k1", "k2"),
    ],
)
def test_disagreement_is_a_conflict(header: str, body_field: str, header_value: str, body_value: Any) -> None:
    with pytest.raises(DirectiveConflict) as caught:
        parse_directives({header: header_value}, {body_field: body_value})
    assert caught.value.status == 400
    assert caught.value.code == "directive_conflict"
    assert caught.value.param == f"gateway.{body_field}"


@pytest.mark.parametrize(
    ("headers", "param"),
    [
        ({"x-gateway-batch": ""}, "X-Gateway-Batch"),
        ({"x-gateway-batch": "has space"}, "X-Gateway-Batch"),
        ({"x-gateway-batch": "slash/no"}, "X-Gateway-Batch"),
        ({"x-gateway-batch": "x" * 129}, "X-Gateway-Batch"),
        ({"x-gateway-region": " "}, "X-Gateway-Region"),
        ({"x-gateway-provider": "a,,b"}, "X-Gateway-Provider"),
        ({"x-gateway-provider": "a,a"}, "X-Gateway-Provider"),
        ({"x-gateway-fallback": "sometimes"}, "X-Gateway-Fallback"),
        ({"x-gateway-cache-key": ""}, "X-Gateway-Cache-Key"),
        ({"x-gateway-cache-key": "k" * 257}, "X-Gateway-Cache-Key"),
    ],
)
def test_bad_header_values(headers: dict[str, str], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_directives(headers, None)
    assert (caught.value.status, caught.value.param) == (400, param)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ("batch-1", "gateway"),
        (["batch"], "gateway"),
        ({"batches": "b"}, "gateway"),
        ({"batch": 7}, "gateway.batch"),
        ({"batch": "no spaces please"}, "gateway.batch"),
        ({"region": ["us-east"]}, "gateway.region"),
        ({"region": ""}, "gateway.region"),
        ({"provider": 3}, "gateway.provider"),
        ({"provider": ["a", 3]}, "gateway.provider"),
        ({"provider": []}, "gateway.provider"),
        ({"provider": ["a", "a"]}, "gateway.provider"),
        ({"fallback": True}, "gateway.fallback"),
        ({"fallback": "always"}, "gateway.fallback"),
        ({"cache_key": 5}, "gateway.cache_key"),
        ({"cache_key": "k" * 257}, "gateway.cache_key"),
    ],
)
def test_bad_body_values(body: Any, param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_directives({}, body)
    assert (caught.value.status, caught.value.param) == (400, param)


def test_unknown_body_directive_lists_the_known_ones() -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_directives({}, {"bacth": "b"})
    assert "bacth" in caught.value.message
    assert "batch, cache_key, fallback, priority, provider, region" in caught.value.message


def test_batch_id_boundaries() -> None:
    assert parse_directives({"x-gateway-batch": "x" * 128}, None).batch == "x" * 128
    assert parse_directives({"x-gateway-batch": " padded "}, None).batch == "padded"


def test_priority_from_header_or_body_and_its_default() -> None:
    assert parse_directives({"x-gateway-priority": "batch"}, None).priority_class is Priority.BATCH
    assert (
        parse_directives({}, {"priority": "interactive", "batch": "b1"}).priority_class
        is Priority.INTERACTIVE
    )
    assert parse_directives({"x-gateway-batch": "b1"}, None).priority_class is Priority.BATCH
    assert parse_directives({}, None).priority_class is Priority.INTERACTIVE


@pytest.mark.parametrize(
    ("headers", "body", "param"),
    [
        ({"x-gateway-priority": "urgent"}, None, "X-Gateway-Priority"),
        ({}, {"priority": "low"}, "gateway.priority"),
        ({}, {"priority": 1}, "gateway.priority"),
        ({"x-gateway-priority": "batch"}, {"priority": "interactive"}, "gateway.priority"),
    ],
)
def test_an_unknown_or_conflicting_priority_is_a_400(
    headers: dict[str, str], body: dict[str, object] | None, param: str
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_directives(headers, body)
    assert caught.value.status == 400 and caught.value.param == param
