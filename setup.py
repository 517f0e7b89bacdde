"""The build hook for a compiled build: `GATEWAY_COMPILE=1` compiles the request's hot path with mypyc.

Without it (`make install`, `make run`, `make test`) the gateway is plain Python. With it, the
modules below become C extensions next to their sources, and every other module stays Python;
`make compile` builds such a tree in `build/compiled` (docs/performance.md, "Compiled build").
A module compiled here keeps its `.py` source as the truth: the tests run against both.
"""

from __future__ import annotations

import os

from setuptools import setup

# The modules every proxied request runs through. A module listed here must not define msgspec
# Structs (mypyc compiles a class's body, not msgspec's metaclass options), async generators or
# Litestar handlers (Litestar reads their signatures): those stay in modules of their own. Nor may
# it await inside an `except` handler or a `finally` block: a compiled coroutine keeps no exception
# state of its own, so the exception it handles would stay the current one for every other task
# while it waits. A class compiled here cannot be subclassed by an interpreted one (AzureAdapter is
# compiled too). tests/unit/test_compiled_build.py checks all of this.
HOT_PATH = [
    "gateway/api/header_cap.py",
    "gateway/api/proxy_asgi.py",
    "gateway/api/sse_pump.py",
    "gateway/auth/bearer.py",
    "gateway/auth/key_cache.py",
    "gateway/auth/principal.py",
    "gateway/auth/secrets.py",
    "gateway/dispatch/executor.py",
    "gateway/dispatch/http1.py",
    "gateway/dispatch/http1_connection.py",
    "gateway/dispatch/sse.py",
    "gateway/dispatch/stream.py",
    "gateway/http_cycle.py",
    "gateway/http_protocol.py",
    "gateway/limits/__init__.py",
    "gateway/limits/headers.py",
    "gateway/limits/limiter.py",
    "gateway/limits/redis_limiter.py",
    "gateway/limits/spend.py",
    "gateway/limits/windows.py",
    "gateway/loop_tasks.py",
    "gateway/metering/pricing.py",
    "gateway/metering/redis_buffer.py",
    "gateway/metrics.py",
    "gateway/providers/azure.py",
    "gateway/providers/cache_hints.py",
    "gateway/providers/openai.py",
    "gateway/proxy/exchange.py",
    "gateway/proxy/relay.py",
    "gateway/proxy/request.py",
    "gateway/proxy/service.py",
    "gateway/redis_batching.py",
    "gateway/redis_link.py",
    "gateway/routing/deployment.py",
    "gateway/routing/directives.py",
    "gateway/routing/health.py",
    "gateway/routing/pins.py",
    "gateway/routing/policy.py",
]


def ext_modules() -> list[object]:
    if os.environ.get("GATEWAY_COMPILE") != "1":
        return []
    from mypyc.build import mypycify

    return list(mypycify(HOT_PATH, opt_level="3", debug_level="0"))


setup(ext_modules=ext_modules())
