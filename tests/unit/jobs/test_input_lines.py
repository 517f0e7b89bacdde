from __future__ import annotations

import json
from typing import Any

import msgspec

from gateway.jobs.input_lines import (
    MAX_LISTED_ERRORS,
    MAX_REQUESTS,
    InputCheck,
    LineError,
    check_input,
    prefix_key,
)
from gateway.schemas.nesting import MAX_NESTING

CHAT = "/v1/chat/completions"
SYSTEM = {"role": "system", "content": "You are terse."}


def request(custom_id: str, question: str = "hi", **changes: Any) -> dict[str, Any]:
    line: dict[str, Any] = {
        "custom_id": custom_id,
        "method": "POST",
        "url": CHAT,
        "body": {"model": "chat", "messages": [SYSTEM, {"role": "user", "content": question}]},
    }
    return line | changes


def jsonl(*lines: object) -> bytes:
    return "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines).encode()


def test_a_good_file_keeps_every_request_in_order_with_its_body_as_json() -> None:
    checked = check_input(jsonl(request("a", "one"), request("b", "two")), CHAT)

    assert checked.errors == ()
    assert checked.model == "chat"
    assert [line.custom_id for line in checked.lines] == ["a", "b"]
    assert json.loads(checked.lines[1].body) == request("b", "two")["body"]


def test_blank_lines_are_skipped_but_counted_in_line_numbers() -> None:
    data = jsonl(request("a"), "", "   ", "not json")

    checked = check_input(data, CHAT)

    assert checked.lines == ()
    assert [(e.code, e.line) for e in checked.errors] == [("invalid_json_line", 4)]


def test_each_bad_line_is_named_with_its_code_param_and_1_based_line() -> None:
    data = jsonl(
        request("ok"),
        "{truncated",
        [1, 2],
        request("no-method", method="GET"),
        request("elsewhere", url="/v1/embeddings"),
        request("no-body", body="text"),
        request("no-model", body={"messages": []}),
        {"method": "POST", "url": CHAT, "body": {"model": "chat"}},
        request("ok"),
        request("other-model", body={"model": "embed", "messages": []}),
    )

    errors = check_input(data, CHAT).errors

    assert [(e.code, e.param, e.line) for e in errors] == [
        ("invalid_json_line", None, 2),
        ("invalid_json_line", None, 3),
        ("invalid_request", "method", 4),
        ("mismatched_endpoint", "url", 5),
        ("invalid_request", "body", 6),
        ("invalid_request", "body.model", 7),
        ("invalid_request", "custom_id", 8),
        ("duplicate_custom_id", "custom_id", 9),
        ("mismatched_model", "body.model", 10),
    ]


def test_an_empty_file_is_invalid() -> None:
    for data in (b"", b"\n\n  \n"):
        assert check_input(data, CHAT).errors == (
            LineError("empty_file", "The input file is empty: it holds no requests."),
        )


def test_more_requests_than_a_batch_may_hold_is_one_error() -> None:
    line = json.dumps(request("x")).encode() + b"\n"

    checked = check_input(line * (MAX_REQUESTS + 1), CHAT)

    assert [(e.code, e.line) for e in checked.errors] == [("too_many_requests", None)]
    assert (
        check_input(b"".join(json.dumps(request(str(i))).encode() + b"\n" for i in range(3)), CHAT).errors
        == ()
    )


def test_listed_errors_are_capped() -> None:
    data = b"nope\n" * (MAX_LISTED_ERRORS + 50)

    errors = check_input(data, CHAT).errors

    assert len(errors) == MAX_LISTED_ERRORS
    assert errors[-1].line == MAX_LISTED_ERRORS


def test_a_line_that_is_not_utf8_is_invalid_json() -> None:
    data = jsonl(request("a")) + b'{"custom_id": "\xff"}\n'

    assert [(e.code, e.line) for e in check_input(data, CHAT).errors] == [("invalid_json_line", 2)]


def test_lines_sharing_a_system_prompt_share_a_prefix_key() -> None:
    checked = check_input(jsonl(request("a", "one"), request("b", "two")), CHAT)
    first, second = checked.lines

    assert first.prefix_key == second.prefix_key
    assert len(first.prefix_key) == 32
    assert int(first.prefix_key, 16) >= 0


def test_the_prefix_is_what_comes_before_the_last_user_message_plus_the_tools() -> None:
    history = [SYSTEM, {"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"}]
    body = {"model": "chat", "messages": [*history, {"role": "user", "content": "q2"}]}
    other_question = {"model": "chat", "messages": [*history, {"role": "user", "content": "q3"}]}
    other_system = {"model": "chat", "messages": [{"role": "system", "content": "Be loud."}, *history[1:]]}
    with_tools = body | {"tools": [{"type": "function", "function": {"name": "f"}}]}

    assert prefix_key(body) == prefix_key(other_question)
    assert prefix_key(body) != prefix_key(other_system)
    assert prefix_key(body) != prefix_key(with_tools)


def test_the_prefix_key_does_not_depend_on_key_order() -> None:
    shuffled = {"content": SYSTEM["content"], "role": "system"}
    one = {"model": "chat", "messages": [SYSTEM, {"role": "user", "content": "a"}]}
    two = {"messages": [shuffled, {"role": "user", "content": "b"}], "model": "chat"}

    assert prefix_key(one) == prefix_key(two)
    assert msgspec.json.encode(SYSTEM) != msgspec.json.encode(shuffled)


def test_ids_and_models_with_control_characters_are_refused() -> None:
    data = jsonl(
        request("nul\x00id"),
        request("tab\tid"),
        request("ok", body={"model": "chat\x00", "messages": []}),
        request("x" * 513),
    )

    errors = check_input(data, CHAT).errors

    assert [(e.param, e.line) for e in errors] == [
        ("custom_id", 1),
        ("custom_id", 2),
        ("body.model", 3),
        ("custom_id", 4),
    ]


def test_a_streaming_line_is_refused_at_validation() -> None:
    body = {"model": "chat", "messages": [SYSTEM], "stream": True}
    errors = check_input(jsonl(request("a"), request("b", body=body)), CHAT).errors
    assert [(e.code, e.param, e.line) for e in errors] == [("invalid_request", "body.stream", 2)]


def nested_body(depth: int) -> dict[str, Any]:
    """A chat body whose `metadata` value nests `depth` objects deep, the body itself being one."""
    value: Any = "x"
    for _ in range(depth - 1):
        value = {"v": value}
    return {"model": "chat", "messages": [], "metadata": value} if depth > 1 else {"model": "chat"}


def test_a_body_nesting_past_the_bound_is_refused_at_its_line() -> None:
    deepest = request("deepest", body=nested_body(MAX_NESTING))
    data = jsonl(request("a"), deepest, request("deeper", body=nested_body(MAX_NESTING + 1)), request("b"))
    opened, closed = '{"a":' * 5000, "}" * 5000
    hostile = f'{{"custom_id": "h", "method": "POST", "url": "{CHAT}", "body": {opened}1{closed}}}'

    errors = check_input(data + jsonl(hostile), CHAT).errors

    assert [(e.code, e.param, e.line) for e in errors] == [
        ("invalid_request", "body", 3),
        ("invalid_request", "body", 5),
    ]
    assert f"{MAX_NESTING} levels" in errors[0].message
    assert check_input(jsonl(request("a"), deepest), CHAT).errors == ()


def test_a_lines_own_gateway_directive_is_refused_naming_where_directives_go() -> None:
    steered = request("steered", body={"model": "chat", "messages": [], "gateway": {"region": "eu"}})

    errors = check_input(jsonl(request("a"), steered), CHAT).errors

    assert [(e.code, e.param, e.line) for e in errors] == [("invalid_request", "body.gateway", 2)]
    assert "X-Gateway-Region" in errors[0].message and "metadata" in errors[0].message


def test_a_file_fed_in_any_chunks_checks_as_a_whole() -> None:
    data = jsonl(*(request(f"r{i}", "q" * i) for i in range(40)))[:-1]  # no final newline
    whole = check_input(data, CHAT)

    for size in (1, 7, 64, len(data)):
        check = InputCheck(CHAT)
        lines = [
            line for start in range(0, len(data), size) for line in check.feed(data[start : start + size])
        ]
        last, verdict = check.verdict()
        assert (lines + last, verdict.requests, verdict.errors) == (list(whole.lines), 40, ())


def test_no_line_is_handed_out_once_the_file_fails() -> None:
    check = InputCheck(CHAT)

    first = check.feed(jsonl(request("a"), "not json"))
    later = check.feed(jsonl(request("b")))

    assert [line.custom_id for line in first] == ["a"] and later == []
    assert [e.line for e in check.verdict()[1].errors] == [2]
