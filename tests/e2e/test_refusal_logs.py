"""A refusal explains itself in the gateway's own log: its `request_rejected` line, read from a real
`gateway serve`'s output, names the request id (the reply's `x-request-id`), status, code, message,
`param`, path, user agent and key id, and never the key or the body.

Refusals from the hot-path front (chat completions) and from Litestar's handlers (the admin API, the
Files API) alike; every reply, refusals included, carries `x-request-id`.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.e2e.conftest import Stack

SECRET_TEXT = "a prompt the log must never hold"


def rejected_line(stack: Stack, request_id: str) -> dict[str, object]:
    """The `request_rejected` line of `request_id` (lines are written once per loop iteration)."""
    for _ in range(50):
        for line in stack.gateway.logs().splitlines():
            if request_id in line and line.startswith("{"):
                event = json.loads(line)
                if event.get("event") == "request_rejected" and event.get("request_id") == request_id:
                    return event  # type: ignore[no-any-return]
        time.sleep(0.1)
    raise AssertionError(f"no request_rejected line for {request_id}")


def refused(stack: Stack, method: str, path: str, key: str | None, **kwargs: object) -> httpx.Response:
    headers = {"user-agent": "refusal-test/1.0"}
    if key is not None:
        headers["authorization"] = f"Bearer {key}"
    reply = httpx.request(method, stack.gateway.base_url + path, headers=headers, **kwargs)  # type: ignore[arg-type]
    assert reply.status_code >= 400, reply.text
    assert reply.headers.get("x-request-id"), reply.headers
    return reply


def check_line(stack: Stack, reply: httpx.Response, path: str, key_id: str | None) -> dict[str, object]:
    error = reply.json()["error"]
    line = rejected_line(stack, reply.headers["x-request-id"])
    print(json.dumps(line))  # what an operator reads
    assert line["status"] == reply.status_code
    assert line["code"] == error["code"] is not None
    assert line["message"] == error["message"]
    assert line["param"] == error["param"]
    assert line["path"] == path
    assert line["user_agent"] == "refusal-test/1.0"
    assert line["key_id"] == key_id
    assert SECRET_TEXT not in json.dumps(line)
    return line


def test_a_schema_error_names_its_parameter_and_code(stack: Stack) -> None:
    team = stack.new_team("refusal-schema")
    body = {"model": "chat", "messages": [{"role": "user", "content": SECRET_TEXT}], "n": "two"}
    reply = refused(stack, "POST", "/v1/chat/completions", team.key, json=body)
    assert reply.status_code == 400
    line = check_line(stack, reply, "/v1/chat/completions", team.key_id)
    assert line["param"] == "n"
    assert line["code"] == "invalid_type"
    assert team.key not in json.dumps(line)


@pytest.mark.parametrize(
    ("method", "path"), [("POST", "/v1/chat/completions"), ("GET", "/v1/files"), ("GET", "/admin/teams")]
)
def test_an_unknown_key_is_logged_with_a_request_id_on_every_front(
    stack: Stack, method: str, path: str
) -> None:
    reply = refused(stack, method, path, "sk-not-a-key-of-ours", json={"model": "chat"})
    assert reply.status_code == 401
    line = check_line(stack, reply, path, None)
    assert "sk-not-a-key-of-ours" not in json.dumps(line)


def test_an_unknown_model_is_logged_with_its_key(stack: Stack) -> None:
    team = stack.new_team("refusal-model")
    body = {"model": "no-such-model", "messages": [{"role": "user", "content": SECRET_TEXT}]}
    reply = refused(stack, "POST", "/v1/chat/completions", team.key, json=body)
    assert reply.status_code == 404
    line = check_line(stack, reply, "/v1/chat/completions", team.key_id)
    assert line["code"] == "model_not_found" and line["param"] == "model"


def test_a_rate_limited_request_is_logged(stack: Stack) -> None:
    team = stack.new_team("refusal-rpm", rpm_limit=1)
    body = {"model": "chat", "messages": [{"role": "user", "content": SECRET_TEXT}]}
    served = httpx.post(
        stack.base_url + "/chat/completions", json=body, headers={"authorization": f"Bearer {team.key}"}
    )
    assert served.status_code == 200, served.text
    reply = refused(stack, "POST", "/v1/chat/completions", team.key, json=body)
    assert reply.status_code == 429
    check_line(stack, reply, "/v1/chat/completions", team.key_id)


def test_every_reply_carries_a_request_id(stack: Stack) -> None:
    for path in ("/healthz", "/admin/teams", "/v1/models", "/nowhere"):
        reply = httpx.get(stack.gateway.base_url + path)
        assert reply.headers.get("x-request-id"), (path, reply.status_code, reply.headers)
