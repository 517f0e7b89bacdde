"""The nesting bound: depth counted as arrays and objects, the walk stopped past the bound."""

from __future__ import annotations

import json

from gateway.schemas.nesting import MAX_NESTING, nesting_depth, too_deep


def nested(depth: int) -> object:
    value: object = "leaf"
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def test_depth_counts_arrays_and_objects() -> None:
    assert nesting_depth("scalar") == 0
    assert nesting_depth({}) == 1
    assert nesting_depth({"a": [1, {"b": []}]}) == 4
    assert nesting_depth(nested(10)) == 10


def test_the_bound_itself_passes_one_past_it_does_not() -> None:
    assert not too_deep(nested(MAX_NESTING))
    assert too_deep(nested(MAX_NESTING + 1))


def test_a_value_far_past_the_bound_is_refused_without_recursion() -> None:
    deep = nested(50_000)  # past Python's recursion limit: a recursive walk would raise
    assert too_deep(deep)
    assert nesting_depth(deep) == MAX_NESTING + 1  # stopped as soon as the bound was passed


def test_raw_bytes_with_few_brackets_skip_the_walk_but_agree() -> None:
    shallow = {"messages": [{"role": "user", "content": "[[[["}]}
    raw = json.dumps(shallow).encode()
    assert too_deep(shallow, raw) is False
    deep = nested(MAX_NESTING + 1)
    assert too_deep(deep, json.dumps(deep).encode()) is True
