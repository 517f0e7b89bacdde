"""Whose `X-Forwarded-*` headers the gateway believes: only its own reverse proxies'
(`GATEWAY_TRUSTED_PROXIES`, none by default).

From a trusted proxy (the connection's peer is one of those addresses or networks) a request is
taken as the proxy describes it: `X-Forwarded-Proto` is its scheme and `X-Forwarded-For` its client
address, by uvicorn's own `ProxyHeadersMiddleware` (the right-most address that is not itself a
trusted proxy); `X-Forwarded-Host` is its `Host`, done here because uvicorn leaves that header alone.
From anyone else the headers change nothing, so a client cannot make the console believe it came
over https (the session cookie's name and flags), from another site's host (the Origin check) or
from another address (failed sign-ins are counted per address).

uvicorn's `proxy_headers` option is left off (gateway.server.serving): unconfigured, it would trust
127.0.0.1, and the middleware applied here serves any server that runs `serving_app`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Any, cast

from litestar.enums import ScopeType
from litestar.types import ASGIApp, Receive, Scope, Send
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def trusting_proxies(app: ASGIApp, trusted: Sequence[str]) -> ASGIApp:
    """`app` reading the forwarded headers of the `trusted` proxies; `app` itself when there are none."""
    if not trusted:
        return app
    networks = [ipaddress.ip_network(network) for network in trusted]
    # the two libraries spell the same ASGI types each their own way
    described = cast(ASGIApp, ProxyHeadersMiddleware(cast(Any, app), trusted_hosts=list(trusted)))

    async def forwarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == ScopeType.HTTP and from_trusted_proxy(scope, networks):
            scope = with_forwarded_host(scope)
        await described(scope, receive, send)

    return forwarded


def from_trusted_proxy(scope: Scope, networks: Sequence[IPNetwork]) -> bool:
    """Whether the connection's peer (before any forwarded header is read) is a trusted proxy."""
    client = scope.get("client")
    if not client:
        return False
    try:
        peer = ipaddress.ip_address(client[0])
    except ValueError:  # a Unix socket's peer has no address
        return False
    return any(peer in network for network in networks)


def with_forwarded_host(scope: Scope) -> Scope:
    """The scope with the proxy's `X-Forwarded-Host` (its first value: the host the browser asked
    for) as `Host`; unchanged without one."""
    headers = scope["headers"]
    forwarded = next((value for name, value in headers if name == b"x-forwarded-host"), None)
    host = forwarded.split(b",")[0].strip() if forwarded else b""
    if not host:
        return scope
    kept = [(name, value) for name, value in headers if name != b"host"]
    return cast(Scope, {**scope, "headers": [*kept, (b"host", host)]})
