"""The items of a stored Response: a request's input as input items, what a continuation resends,
and OpenAI's pages of input items."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from gateway.errors import InvalidRequest
from gateway.responses_store.items import input_items, items_page, resent_items


def counter() -> Any:
    numbers = itertools.count(1)
    return lambda prefix: f"{prefix}{next(numbers)}"


def test_a_string_input_is_one_user_message_and_every_item_has_an_id() -> None:
    assert input_items({"input": "Hi"}, counter()) == [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}], "id": "msg_1"}
    ]
    given = [
        {"role": "assistant", "content": "Earlier."},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}", "id": "fc_upstream"},
        {"type": "function_call_output", "call_id": "c1", "output": "42"},
    ]
    items = input_items({"input": given}, counter())
    assert items[0] == {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Earlier."}],
        "id": "msg_1",
    }
    assert [item["id"] for item in items] == ["msg_1", "fc_upstream", "fco_2"]
    assert given[0] == {"role": "assistant", "content": "Earlier."}  # the request is left as it came


def test_resent_items_lose_their_ids_and_reasoning_but_what_a_native_upstream_reads() -> None:
    items = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}], "id": "msg_1"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "opaque"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}", "id": "fc_1"},
    ]
    translated = resent_items(items, native=False)
    assert [item.get("type") for item in translated] == ["message", "function_call"]
    assert all("id" not in item for item in translated)
    native = resent_items(items, native=True)
    assert [item.get("id") for item in native] == [None, "rs_2", None]


ITEMS = [{"id": f"msg_{n}", "type": "message"} for n in range(1, 6)]


def ids(page: Any) -> list[str]:
    return [item["id"] for item in page.data]


def test_pages_of_input_items_as_openai_lists_them() -> None:
    newest = items_page(ITEMS, limit=2, newest_first=True)
    assert (ids(newest), newest.first_id, newest.last_id, newest.has_more) == (
        ["msg_5", "msg_4"],
        "msg_5",
        "msg_4",
        True,
    )
    following = items_page(ITEMS, limit=2, newest_first=True, after="msg_4")
    assert (ids(following), following.has_more) == (["msg_3", "msg_2"], True)
    last = items_page(ITEMS, limit=2, newest_first=True, after="msg_2")
    assert (ids(last), last.has_more) == (["msg_1"], False)
    oldest = items_page(ITEMS, limit=10, newest_first=False)
    assert (ids(oldest), oldest.has_more) == (["msg_1", "msg_2", "msg_3", "msg_4", "msg_5"], False)
    before = items_page(ITEMS, limit=2, newest_first=False, before="msg_4")
    assert (ids(before), before.has_more) == (["msg_2", "msg_3"], True)
    empty = items_page([], limit=20, newest_first=True)
    assert (empty.data, empty.first_id, empty.last_id, empty.has_more) == ([], None, None, False)


def test_a_cursor_the_list_lacks_is_a_400_naming_it() -> None:
    with pytest.raises(InvalidRequest) as refused:
        items_page(ITEMS, limit=2, newest_first=True, after="msg_9")
    assert refused.value.param == "after"
