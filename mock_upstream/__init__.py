"""The mock upstream: a fake OpenAI-, Azure- and Anthropic-compatible provider for development,
tests and benchmarks, served over HTTP (`server.py`) or in-process to httpx (`transport.py`)."""

from mock_upstream.behaviour import MockBehaviour
from mock_upstream.service import MockUpstream

__all__ = ["MockBehaviour", "MockUpstream"]
