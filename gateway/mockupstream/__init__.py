"""The mock upstream: a fake OpenAI-, Azure- and Anthropic-compatible provider for development,
tests and benchmarks, served over HTTP (`server.py`) or in-process to httpx (`transport.py`)."""

from gateway.mockupstream.behaviour import MockBehaviour
from gateway.mockupstream.service import MockUpstream

__all__ = ["MockBehaviour", "MockUpstream"]
