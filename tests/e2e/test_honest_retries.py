"""Retries the SDK can trust: an upstream 429 reaches the client with the upstream's `Retry-After`
and never opens a circuit; a 503 for open circuits says when one turns half-open; a path the
gateway does not serve under /v1/ is an OpenAI error naming it; `HEAD /healthz` answers.

Its own stack: one `gateway serve` in front of `gateway mock-upstream`, a SQLite file, no Redis.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest

from tests.support.gateway import GatewayProcess, Team, create_team
from tests.support.upstream import RunningUpstream, start_mock_upstream

pytestmark = pytest.mark.e2e
ADMIN_KEY = "admin-retries-secret"
FAILURE_THRESHOLD = 3
MAX_ATTEMPTS = 2
COOLDOWN_S = 30

CONFIG = f"""
providers:
  - name: busy
    kind: openai
    region: us-east
    base_url: {{upstream}}/v1
    timeout_s: 5
  - name: broken
    kind: openai
    region: us-east
    base_url: {{upstream}}/v1
    timeout_s: 5
models:
  - name: chat
    deployments:
      - provider: busy
        model: upstream-chat
        price: {{{{input: 1, output: 1}}}}
  - name: fragile
    deployments:
      - provider: broken
        model: upstream-fragile
        price: {{{{input: 1, output: 1}}}}
retry:
  max_attempts: {MAX_ATTEMPTS}
  backoff_base_s: 0.01
  backoff_max_s: 0.02
  retry_after_cap_s: 0.1   # the gateway's own waits stay short; the client is told the upstream's
circuit:
  failure_threshold: {FAILURE_THRESHOLD}
  cooldown_s: {COOLDOWN_S}
"""
CHAT: dict[str, Any] = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
ALWAYS_500 = {"mock": {"fail_rate": 1, "fail_status": 500}}  # per request, in the forwarded body


@dataclass
class Served:
    gateway: GatewayProcess
    upstream: RunningUpstream
    admin: httpx.Client
    team: Team

    def sdk(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.gateway.base_url + "/v1", api_key=self.team.key, max_retries=0)

    def circuit(self, provider: str) -> tuple[str, int]:
        rows = self.admin.get("/admin/providers").raise_for_status().json()["data"]
        row = next(r for r in rows if r["provider"] == provider)
        return row["circuit"], row["consecutive_failures"]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    directory = tmp_path_factory.mktemp("retries")
    upstream = start_mock_upstream()
    config = directory / "gateway.yaml"
    config.write_text(CONFIG.format(upstream=upstream.base_url))
    env = {
        "GATEWAY_DATABASE_URL": f"sqlite:///{directory / 'gateway.db'}",
        "GATEWAY_REDIS_URL": "",
        "GATEWAY_WORKERS": "1",
        "GATEWAY_ADMIN_KEY": ADMIN_KEY,
    }
    gateway = GatewayProcess(config, env).start()
    admin = httpx.Client(
        base_url=gateway.base_url, headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=10
    )
    try:
        yield Served(gateway, upstream, admin, create_team(admin, "retries"))
    finally:
        admin.close()
        gateway.stop()
        upstream.stop()


@pytest.fixture
def upstream(served: Served) -> Iterator[RunningUpstream]:
    served.upstream.clear()
    served.upstream.set_behaviour()
    yield served.upstream
    served.upstream.set_behaviour()


# --- upstream 429s ----------------------------------------------------------------------------------


def test_a_rate_limited_upstream_reaches_the_sdk_with_its_retry_after(
    served: Served, upstream: RunningUpstream
) -> None:
    upstream.set_behaviour(fail_rate=1, fail_status=429, retry_after=2)
    requests = FAILURE_THRESHOLD + 2

    for _ in range(requests):
        with pytest.raises(openai.RateLimitError) as raised:
            served.sdk().chat.completions.create(**CHAT)
        assert raised.value.response.headers["retry-after"] == "2"
        assert raised.value.code == "upstream_rate_limited"

    assert upstream.stats()["total"] == requests * MAX_ATTEMPTS  # each retried on its deployment
    assert served.circuit("busy") == ("closed", 0)  # more 429s than the threshold: still closed
    upstream.set_behaviour()
    answer = served.sdk().chat.completions.create(**CHAT)
    assert answer.choices[0].message.content


def test_a_rate_limited_stream_is_refused_before_its_first_byte_with_retry_after(
    served: Served, upstream: RunningUpstream
) -> None:
    upstream.set_behaviour(fail_rate=1, fail_status=429, retry_after=1.5)

    with pytest.raises(openai.RateLimitError) as raised:
        served.sdk().chat.completions.create(**CHAT, stream=True)

    assert raised.value.response.headers["retry-after"] == "2"  # rounded up to whole seconds
    assert served.circuit("busy") == ("closed", 0)


def test_a_429_without_retry_after_still_tells_the_client_when_to_come_back(
    served: Served, upstream: RunningUpstream
) -> None:
    upstream.set_behaviour(fail_rate=1, fail_status=429)

    with pytest.raises(openai.RateLimitError) as raised:
        served.sdk().chat.completions.create(**CHAT)

    assert int(raised.value.response.headers["retry-after"]) >= 1


# --- open circuits ----------------------------------------------------------------------------------


def test_every_circuit_open_is_a_503_saying_when_one_turns_half_open(
    served: Served, upstream: RunningUpstream
) -> None:
    fragile = {**CHAT, "model": "fragile"}
    while served.circuit("broken")[0] != "open":
        with pytest.raises(openai.InternalServerError):
            served.sdk().chat.completions.create(**fragile, extra_body=ALWAYS_500)
        assert served.circuit("broken")[1] <= FAILURE_THRESHOLD + MAX_ATTEMPTS  # it does open
    sent = upstream.stats()["total"]

    with pytest.raises(openai.InternalServerError) as raised:
        served.sdk().chat.completions.create(**fragile)

    assert raised.value.status_code == 503
    assert 1 <= int(raised.value.response.headers["retry-after"]) <= COOLDOWN_S
    assert upstream.stats()["total"] == sent  # refused without asking the upstream
    assert served.circuit("busy") == ("closed", 0)  # the other provider is untouched


# --- paths the gateway does not serve ---------------------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "PATCH", "DELETE"])
def test_an_unserved_v1_path_is_an_openai_404_naming_it(served: Served, method: str) -> None:
    reply = httpx.request(
        method,
        served.gateway.base_url + "/v1/assistants/asst_1/runs",
        headers={"authorization": f"Bearer {served.team.key}"},
        json={} if method in ("POST", "PUT", "PATCH") else None,
    )

    assert reply.status_code == 404
    assert reply.headers["content-type"].startswith("application/json")
    error = reply.json()["error"]
    assert error["code"] == "unsupported_endpoint" and error["type"] == "invalid_request_error"
    assert f"{method} /v1/assistants/asst_1/runs" in error["message"]


def test_the_sdk_sees_an_unserved_endpoint_as_not_found(served: Served) -> None:
    with pytest.raises(openai.NotFoundError) as raised:
        served.sdk().moderations.create(input="hi")

    assert raised.value.code == "unsupported_endpoint"
    assert "POST /v1/moderations" in raised.value.message


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_a_served_path_asked_with_the_wrong_method_is_an_openai_405(served: Served, method: str) -> None:
    reply = httpx.request(
        method, served.gateway.base_url + "/v1/chat/completions", headers={"authorization": "Bearer x"}
    )

    assert reply.status_code == 405
    error = reply.json()["error"]
    assert error["code"] == "method_not_allowed" and error["type"] == "invalid_request_error"
    assert f"{method} /v1/chat/completions" in error["message"]
    assert "POST" in reply.headers["allow"]


def test_head_healthz_answers_200_without_a_body(served: Served) -> None:
    head = httpx.head(served.gateway.base_url + "/healthz")
    get = httpx.get(served.gateway.base_url + "/healthz")

    assert head.status_code == get.status_code == 200
    assert head.content == b"" and get.json() == {"status": "ok"}
