"""The successful answer to each completion-like endpoint: usage accounting plus the wire body."""

from __future__ import annotations

from typing import Any

from mock_upstream import anthropic_format, count_tokens, openai_format, responses_format
from mock_upstream.behaviour import MockBehaviour
from mock_upstream.cache import PromptCache, PromptUsage
from mock_upstream.generation import (
    anthropic_forced_tool,
    chat_structured_text,
    generate,
    openai_forced_tool,
    output_tokens,
    requested_tool,
)
from mock_upstream.openai_format import ReplyHeader
from mock_upstream.prompt import (
    PromptShape,
    anthropic_prompt,
    chat_prompt,
    last_user_text,
    plain_texts,
    plain_tokens,
)
from mock_upstream.replies import MockReply, json_reply, stream_reply
from mock_upstream.routes import Operation, Route

Body = dict[str, Any]


def _model(route: Route, body: Body) -> str:
    model = body.get("model")
    return model if isinstance(model, str) else route.deployment or ""


def _choices(body: Body) -> int:
    n = body.get("n")
    return n if isinstance(n, int) and n > 0 else 1


def _include_usage(body: Body) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def _usage(cache: PromptCache, shape: PromptShape, behaviour: MockBehaviour) -> PromptUsage | None:
    usage = cache.account(shape, behaviour)  # accounted even when omitted, so later hits still happen
    return None if behaviour.omit_usage else usage


def chat(cache: PromptCache, route: Route, body: Body, behaviour: MockBehaviour) -> MockReply:
    model = _model(route, body)
    usage = _usage(cache, chat_prompt(body), behaviour)
    tokens, truncated = output_tokens(behaviour, body, "max_tokens", "max_completion_tokens")
    seed = f"{model}\x00{last_user_text(body['messages'])}"
    answered = (
        bool(body["messages"])
        and isinstance(body["messages"][-1], dict)
        and body["messages"][-1].get("role") == "tool"
    )
    tool = openai_forced_tool(body) or requested_tool(
        behaviour, body.get("tools"), wrapped=True, answered=answered
    )
    generation = generate(seed, _choices(body), tokens, truncated, tool, chat_structured_text(body))
    head = ReplyHeader.new("chatcmpl-", model, openai_format.served_tier(body, behaviour.serve_tier))
    if body.get("stream") is True:
        frames = openai_format.chat_stream(head, generation, usage, behaviour.chunks, _include_usage(body))
        return stream_reply(frames, behaviour)
    return json_reply(200, openai_format.chat_completion(head, generation, usage))


def completions(cache: PromptCache, route: Route, body: Body, behaviour: MockBehaviour) -> MockReply:
    model = _model(route, body)
    prompts = plain_texts(body["prompt"])
    usage = _usage(cache, PromptShape(plain_tokens(prompts), None, 0), behaviour)
    tokens, truncated = output_tokens(behaviour, body, "max_tokens")
    generation = generate(f"{model}\x00{prompts[0]!r}", len(prompts) * _choices(body), tokens, truncated)
    head = ReplyHeader.new("cmpl-", model)
    if body.get("stream") is True:
        frames = openai_format.completion_stream(
            head, generation, usage, behaviour.chunks, _include_usage(body)
        )
        return stream_reply(frames, behaviour)
    return json_reply(200, openai_format.text_completion(head, generation, usage))


def embeddings(route: Route, body: Body, behaviour: MockBehaviour) -> MockReply:
    reply = openai_format.embeddings(body, _model(route, body), behaviour.prompt_tokens, behaviour.omit_usage)
    return json_reply(200, reply)


def anthropic_answered(messages: list[Any]) -> bool:
    """The conversation ends with a tool's output: a user turn of tool_result blocks."""
    last = messages[-1] if messages else None
    content = last.get("content") if isinstance(last, dict) and last.get("role") == "user" else None
    return isinstance(content, list) and any(
        isinstance(block, dict) and block.get("type") == "tool_result" for block in content
    )


def messages(cache: PromptCache, route: Route, body: Body, behaviour: MockBehaviour) -> MockReply:
    model = _model(route, body)
    usage = _usage(cache, anthropic_prompt(body), behaviour)
    tokens, truncated = output_tokens(behaviour, body, "max_tokens")
    seed = f"{model}\x00{last_user_text(body['messages'])}"
    tool = anthropic_forced_tool(body) or requested_tool(
        behaviour, body.get("tools"), wrapped=False, answered=anthropic_answered(body["messages"])
    )
    generation = generate(seed, 1, tokens, truncated, tool)
    head = ReplyHeader.new("msg_", model, anthropic_format.anthropic_served_tier(body, behaviour.serve_tier))
    if body.get("stream") is True:
        return stream_reply(
            anthropic_format.message_stream(head, generation, usage, behaviour.chunks), behaviour
        )
    return json_reply(200, anthropic_format.message(head, generation, usage))


def answer(cache: PromptCache, route: Route, body: Body, behaviour: MockBehaviour) -> MockReply:
    """The answer to a valid request on a completion-like route."""
    if route.operation is Operation.CHAT:
        return chat(cache, route, body, behaviour)
    if route.operation is Operation.COMPLETIONS:
        return completions(cache, route, body, behaviour)
    if route.operation is Operation.EMBEDDINGS:
        return embeddings(route, body, behaviour)
    if route.operation is Operation.RESPONSES:
        return responses_format.responses(cache, body, behaviour)
    if route.operation is Operation.COUNT_TOKENS:
        return count_tokens.count_tokens(body, behaviour)
    return messages(cache, route, body, behaviour)
