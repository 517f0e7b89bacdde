"""Bad keys, bad input and failing upstreams all come back as OpenAI error objects."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.e2e.conftest import MAX_BODY, Stack, Team
from tests.support.openapi import validate

CHAT = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}


def post(stack: Stack, key: str | None, body: object = None, content: bytes | None = None) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    if content is not None:
        headers["content-type"] = "application/json"
        return httpx.post(stack.base_url + "/chat/completions", headers=headers, content=content, timeout=30)
    return httpx.post(stack.base_url + "/chat/completions", headers=headers, json=body, timeout=30)


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> dict[str, object]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    validate("ErrorResponse", body)
    if code is not None:
        assert body["error"]["code"] == code, body
    return body["error"]  # type: ignore[no-any-return]


def test_missing_and_unknown_keys_are_401(stack: Stack) -> None:
    assert_error(post(stack, None, CHAT), 401)
    assert_error(post(stack, "sk-gw-not-a-real-key", CHAT), 401)
    with pytest.raises(openai.AuthenticationError):
        stack.client("sk-gw-nope").chat.completions.create(**CHAT)  # type: ignore[call-overload]


def test_revoked_key_is_401_within_seconds(stack: Stack) -> None:
    team = stack.new_team("revoked-team")
    assert post(stack, team.key, CHAT).status_code == 200
    assert stack.admin.delete(f"/admin/keys/{team.key_id}").status_code in (200, 204)
    assert_error(post(stack, team.key, CHAT), 401)


def test_expired_key_is_401(stack: Stack) -> None:
    team = stack.admin.post("/admin/teams", json={"name": "expiring"}).json()
    key = stack.admin.post("/admin/keys", json={"team_id": team["id"], "name": "short", "expires_in_s": 1})
    assert key.status_code == 201, key.text
    assert post(stack, key.json()["key"], CHAT).status_code == 200  # cached as valid now...
    import time

    time.sleep(1.2)  # ...and refused once expired, although still cached
    assert "expired" in str(assert_error(post(stack, key.json()["key"], CHAT), 401)["message"])


def test_unknown_model_is_404(stack: Stack, team_a: Team) -> None:
    assert_error(post(stack, team_a.key, {**CHAT, "model": "gpt-9"}), 404, "model_not_found")


def test_malformed_json_and_wrong_types_are_400(stack: Stack, team_a: Team) -> None:
    assert_error(post(stack, team_a.key, content=b'{"model": "chat", "messages": ['), 400)
    assert_error(post(stack, team_a.key, content=b"[1, 2]"), 400)
    error = assert_error(post(stack, team_a.key, {"model": "chat", "messages": "hello"}), 400)
    assert error["param"] == "messages"
    error = assert_error(post(stack, team_a.key, {**CHAT, "temperature": "hot"}), 400)
    assert error["param"] == "temperature"
    assert_error(post(stack, team_a.key, {"messages": CHAT["messages"]}), 400)


def test_body_over_the_limit_is_413(stack: Stack, team_a: Team) -> None:
    big = {"model": "chat", "messages": [{"role": "user", "content": "x" * (MAX_BODY + 10)}]}
    assert_error(post(stack, team_a.key, big), 413)


def test_admin_auth(stack: Stack, team_a: Team) -> None:
    assert_error(httpx.get(stack.gateway.base_url + "/admin/teams"), 401)
    team_key = {"authorization": f"Bearer {team_a.key}"}
    assert_error(httpx.get(stack.gateway.base_url + "/admin/teams", headers=team_key), 403)
    assert stack.admin.get("/admin/teams").status_code == 200


def test_unknown_route_is_an_openai_error(stack: Stack, team_a: Team) -> None:
    response = httpx.get(stack.base_url + "/nothing-here", headers={"authorization": f"Bearer {team_a.key}"})
    assert_error(response, 404)


@pytest.mark.parametrize(
    ("behaviour", "status"),
    [
        ({"fail_rate": 1.0, "fail_status": 500}, 502),
        ({"fail_rate": 1.0, "fail_status": 503}, 503),
        ({"garbage": True}, 502),
        ({"hang": True}, 504),
    ],
)
def test_upstream_failures_are_openai_errors_and_metered_once(
    stack: Stack, fresh_upstream, behaviour: dict[str, object], status: int
) -> None:
    team = stack.new_team(f"upstream-fail-{status}-{sorted(behaviour)[0]}")
    fresh_upstream.set_behaviour(**behaviour)
    response = post(stack, team.key, CHAT)
    body = assert_error(response, status)
    assert "Traceback" not in response.text and "upstream-secret" not in response.text
    assert body["type"]
    request_id = response.headers["x-request-id"]
    fresh_upstream.set_behaviour()
    events = _events_for(stack, team.id)
    assert [e["request_id"] for e in events] == [request_id]
    assert events[0]["status"] == status and events[0]["prompt_tokens"] == 0


def test_refused_connection_is_503_and_metered(stack: Stack) -> None:
    team = stack.new_team("refused")
    response = post(stack, team.key, {**CHAT, "model": "nowhere"})
    assert_error(response, 503)
    assert len(_events_for(stack, team.id)) == 1


def _events_for(stack: Stack, team_id: str) -> list[dict[str, object]]:
    import time

    for _ in range(120):  # up to 30 s on a loaded machine; returns as soon as the record is there
        events = stack.admin.get("/admin/usage/events", params={"team_id": team_id}).json()["data"]
        if events:
            time.sleep(0.5)  # a duplicate would show up by now
            return stack.admin.get("/admin/usage/events", params={"team_id": team_id}).json()["data"]  # type: ignore[no-any-return]
        time.sleep(0.25)
    return []
