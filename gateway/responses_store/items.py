"""The items of a stored Response, without I/O: a request's input as OpenAI lists input items,
the conversation a continuation resends (its chain's inputs and outputs, oldest first), and a
page of input items in OpenAI's list shape.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gateway.errors import InvalidRequest
from gateway.schemas.responses import InputItemList

Item = dict[str, Any]
IdSource = Callable[[str], str]  # a new id with the given prefix

# How OpenAI prefixes the ids of the items it keeps.
_ID_PREFIXES = {"message": "msg_", "function_call": "fc_", "function_call_output": "fco_"}


def input_items(body: dict[str, Any], new_id: IdSource) -> list[Item]:
    """The request's `input` as input items: a string is one user message; a message's string
    content is a list of one text part; each item without an id is given one (the input_items
    listing pages by id)."""
    given = body.get("input")
    if isinstance(given, str):
        given = [{"type": "message", "role": "user", "content": given}]
    items: list[Item] = []
    for raw in given if isinstance(given, list) else ():
        if not isinstance(raw, dict):
            continue  # the request was validated: nothing else reaches here
        item = {"type": "message", **raw}
        if item["type"] == "message" and isinstance(item.get("content"), str):
            kind = "output_text" if item.get("role") == "assistant" else "input_text"
            item["content"] = [{"type": kind, "text": item["content"]}]
        if not isinstance(item.get("id"), str):
            item["id"] = new_id(_ID_PREFIXES.get(item["type"], "item_"))
        items.append(item)
    return items


def resent_items(items: Sequence[Item], *, native: bool) -> list[Item]:
    """`items` of earlier turns as the input of a new request. Without their ids: an upstream that
    stores Responses looks an item id up, and these ids are the gateway's, or another upstream's.
    Reasoning goes too, but for the encrypted reasoning an OpenAI upstream can read back."""
    resent: list[Item] = []
    for item in items:
        if item.get("type") == "reasoning":
            if native and item.get("encrypted_content"):
                resent.append(item)
            continue
        resent.append({key: value for key, value in item.items() if key != "id"})
    return resent


def items_page(
    items: Sequence[Item],
    *,
    limit: int,
    newest_first: bool,
    after: str | None = None,
    before: str | None = None,
) -> InputItemList:
    """A page of `items` as OpenAI lists them: `data`, `first_id`, `last_id`, `has_more`.
    `after` and `before` are item ids of the same order; an id the list lacks is a 400."""
    ordered = list(reversed(items)) if newest_first else list(items)
    start, end = 0, len(ordered)
    if after is not None:
        start = _position(ordered, after, "after") + 1
    if before is not None:
        end = _position(ordered, before, "before")
    window = ordered[start:end]
    if before is not None and after is None:  # the items just before the cursor
        data, has_more = window[-limit:], len(window) > limit
    else:
        data, has_more = window[:limit], len(window) > limit
    return InputItemList(
        data=data,
        first_id=data[0].get("id") if data else None,
        last_id=data[-1].get("id") if data else None,
        has_more=has_more,
    )


def _position(items: Sequence[Item], item_id: str, param: str) -> int:
    for index, item in enumerate(items):
        if item.get("id") == item_id:
            return index
    raise InvalidRequest(f"No input item with id '{item_id}' in this response.", param=param)
