"""The OpenAI endpoints served by Litestar itself (in-process clients, the OpenAPI schema's
handlers), behind no proxy front: a stream is relayed whole and metered once."""

from __future__ import annotations

from pathlib import Path

import msgspec
from litestar.testing import AsyncTestClient

from gateway.app import create_app
from gateway.services import Services
from tests.fuzz.stack import fuzz_settings, prepare_database


async def test_a_stream_through_litestars_handler_is_relayed_whole_and_metered(tmp_path: Path) -> None:
    settings = fuzz_settings(tmp_path)
    _, secret = await prepare_database(settings)
    app = create_app(settings)
    body = {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with AsyncTestClient(app=app) as client:
        response = await client.post(
            "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {secret}"}
        )
        services: Services = app.state.services
        await services.writer.flush()
        pending = await services.buffer.read(100, 0)

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    frames = [line for line in response.text.split("\n\n") if line]
    assert frames[-1] == "data: [DONE]"
    chunks = [msgspec.json.decode(frame.removeprefix("data: ")) for frame in frames[:-1]]
    assert chunks[-1]["usage"]["completion_tokens"] > 0
    assert pending == []  # the one usage event was written, none left behind
    assert services.writer.records_written == 1
