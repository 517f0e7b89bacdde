"""OpenAI Responses API answers the mock sends: a whole Response and its streamed event sequence.

The prompt is metered as the same conversation sent to chat completions would be (instructions,
input items and tools, with `prompt_cache_key` for the cache), the output follows the behaviour's
token settings and `max_output_tokens`, a forced function tool is called, and a `text.format`
of json_schema is answered with JSON the schema accepts (mock_upstream.schema_values).
"""

from __future__ import annotations

import uuid
from typing import Any

import msgspec

from mock_upstream.behaviour import MockBehaviour
from mock_upstream.cache import PromptCache, PromptUsage
from mock_upstream.content import split_pieces
from mock_upstream.generation import (
    ForcedTool,
    Generation,
    generate,
    output_tokens,
    requested_tool,
    structured_text,
)
from mock_upstream.openai_format import ReplyHeader, served_tier
from mock_upstream.prompt import chat_prompt, last_user_text
from mock_upstream.replies import MockReply, json_reply, stream_reply
from mock_upstream.schema_values import tool_arguments

Body = dict[str, Any]


def _chat_messages(body: Body) -> list[dict[str, Any]]:
    """The Responses input as chat messages, for metering and the generation's seed."""
    messages: list[dict[str, Any]] = []
    if isinstance(body.get("instructions"), str):
        messages.append({"role": "system", "content": body["instructions"]})
    items = body["input"]
    if isinstance(items, str):
        return [*messages, {"role": "user", "content": items}]
    for item in items:
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        if kind == "message":
            messages.append({"role": item.get("role"), "content": item.get("content")})
        elif kind == "function_call":
            call = {
                "id": item.get("call_id"),
                "function": {"name": item.get("name"), "arguments": item.get("arguments")},
            }
            messages.append({"role": "assistant", "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "content": item.get("output")})
    return messages


def _forced_tool(body: Body) -> ForcedTool | None:
    """The function tool a request forces: `tool_choice` "required" or {"type": "function", "name"}."""
    tools = [
        tool for tool in body.get("tools") or () if isinstance(tool, dict) and tool.get("type") == "function"
    ]
    choice = body.get("tool_choice")
    if choice == "required":
        wanted = tools[:1]
    elif isinstance(choice, dict) and choice.get("type") == "function":
        wanted = [tool for tool in tools if tool.get("name") == choice.get("name")][:1]
    else:
        return None
    if not wanted or not isinstance(wanted[0].get("name"), str):
        return None
    arguments = tool_arguments(wanted[0].get("parameters"))
    call_id = f"call_{uuid.uuid4().hex[:24]}"
    return ForcedTool(call_id, wanted[0]["name"], msgspec.json.encode(arguments).decode(), arguments)


def _answered(body: Body) -> bool:
    """Whether the input ends with a tool's output (the model's turn goes on in text)."""
    items = body["input"]
    last = items[-1] if isinstance(items, list) and items else None
    return isinstance(last, dict) and last.get("type") in ("function_call_output", "custom_tool_call_output")


def _structured_text(body: Body) -> str | None:
    """JSON text for a `text.format` of json_schema (its required properties) or json_object."""
    text = body.get("text")
    text_format = text.get("format") if isinstance(text, dict) else None
    return structured_text(text_format, text_format.get("schema") if isinstance(text_format, dict) else None)


def usage_object(prompt: PromptUsage, output_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": prompt.tokens,
        "input_tokens_details": {"cached_tokens": prompt.cache_read, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt.tokens + output_tokens,
    }


def _item(generation: Generation, text: str, item_id: str, status: str) -> dict[str, Any]:
    tool = generation.tool
    if tool is not None:
        return {"type": "function_call", "id": item_id, "status": status, "call_id": tool.call_id,
                "name": tool.name, "arguments": tool.arguments}  # fmt: skip
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": [part]}


def _response(head: ReplyHeader, body: Body, status: str, output: list[Any], usage: Any) -> dict[str, Any]:
    """The Response object; `usage` and `user` are left out when there are none, as OpenAI's
    OpenAPI document has them (an object, a string)."""
    asked = body.get("text")
    text: dict[str, Any] = asked if isinstance(asked, dict) else {}
    response = {
        "id": head.id, "object": "response", "created_at": head.created, "status": status, "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens"),
        "model": head.model, "output": output, "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"), "reasoning": {"effort": None, "summary": None},
        "store": body.get("store", True), "temperature": body.get("temperature", 1.0),
        "text": {"format": {"type": "text"}, **text}, "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools", []), "top_p": body.get("top_p", 1.0), "truncation": "disabled",
        "metadata": body.get("metadata", {}),
    }  # fmt: skip
    if head.service_tier is not None:
        response["service_tier"] = head.service_tier
    if usage is not None:
        response["usage"] = usage
    if isinstance(body.get("user"), str):
        response["user"] = body["user"]
    return response


def _event(payload: dict[str, Any]) -> bytes:
    return b"event: " + str(payload["type"]).encode() + b"\ndata: " + msgspec.json.encode(payload) + b"\n\n"


def _pieces(generation: Generation, text: str, chunks: int) -> list[str]:
    if generation.tool is not None:
        text = generation.tool.arguments
    elif text == " ".join(generation.choices[0]):
        return split_pieces(generation.choices[0], chunks)
    return [text[i : i + 16] for i in range(0, len(text), 16)]


def _stream(
    head: ReplyHeader, body: Body, generation: Generation, text: str, usage: Any, chunks: int
) -> list[bytes]:
    """Every event of a streamed Response, with sequence numbers from 0."""
    status = "incomplete" if generation.truncated and generation.tool is None else "completed"
    item_id = f"{'fc' if generation.tool else 'msg'}_{uuid.uuid4().hex[:24]}"
    pieces = _pieces(generation, text, chunks)
    started = _response(head, body, "in_progress", [], None)
    where = {"item_id": item_id, "output_index": 0}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": started},
        {"type": "response.in_progress", "response": started},
        {"type": "response.output_item.added", "output_index": 0, "item": _item(generation, "", item_id, "in_progress")},
    ]  # fmt: skip
    if generation.tool is not None:
        events += [
            {"type": "response.function_call_arguments.delta", **where, "delta": piece} for piece in pieces
        ]
        events.append({"type": "response.function_call_arguments.done", **where, "name": generation.tool.name,
                       "arguments": generation.tool.arguments})  # fmt: skip
    else:
        part = {"item_id": item_id, "output_index": 0, "content_index": 0}
        empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        events.append({"type": "response.content_part.added", **part, "part": empty})
        events += [{"type": "response.output_text.delta", **part, "delta": p, "logprobs": []} for p in pieces]
        events.append({"type": "response.output_text.done", **part, "text": text, "logprobs": []})
        events.append({"type": "response.content_part.done", **part, "part": {**empty, "text": text}})
    item = _item(generation, text, item_id, status)
    events.append({"type": "response.output_item.done", "output_index": 0, "item": item})
    final = _response(head, body, status, [item], usage)
    events.append({"type": f"response.{status}", "response": final})
    return [_event({**event, "sequence_number": number}) for number, event in enumerate(events)]


def responses(cache: PromptCache, body: Body, behaviour: MockBehaviour) -> MockReply:
    """The answer to a valid POST /v1/responses."""
    model = str(body["model"])
    messages = _chat_messages(body)
    shape = chat_prompt({"model": model, "messages": messages, "tools": body.get("tools"),
                         "prompt_cache_key": body.get("prompt_cache_key")})  # fmt: skip
    prompt = cache.account(shape, behaviour)  # accounted even when omitted, so later hits still happen
    tokens, truncated = output_tokens(behaviour, body, "max_output_tokens")
    tool = _forced_tool(body) or requested_tool(
        behaviour, body.get("tools"), wrapped=False, answered=_answered(body)
    )
    generation = generate(f"{model}\x00{last_user_text(messages)}", 1, tokens, truncated, tool)
    text = _structured_text(body) or " ".join(generation.choices[0])
    usage = None if behaviour.omit_usage else usage_object(prompt, generation.tokens)
    head = ReplyHeader.new("resp_", model, served_tier(body, behaviour.serve_tier))
    if body.get("stream") is True:
        return stream_reply(_stream(head, body, generation, text, usage, behaviour.chunks), behaviour)
    status = "incomplete" if truncated and generation.tool is None else "completed"
    item = _item(generation, text, f"{'fc' if generation.tool else 'msg'}_{uuid.uuid4().hex[:24]}", status)
    return json_reply(200, msgspec.json.encode(_response(head, body, status, [item], usage)))
