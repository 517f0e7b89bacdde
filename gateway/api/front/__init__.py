"""The hot-path front: the proxied endpoints served straight from ASGI, their body budget, SSE relay, header cap and error replies."""
