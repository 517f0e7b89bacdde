"""Routing directives: what the client asked for, from `X-Gateway-*` headers and the `gateway` body object."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from gateway.errors import DirectiveConflict, InvalidRequest

BATCH_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
CACHE_KEY_MAX = 256
_BODY_FIELDS = frozenset({"batch", "region", "provider", "fallback", "cache_key", "priority"})


class Priority(str, Enum):
    """The scheduling class (gateway.scheduling): interactive work goes first; batch work waits,
    but keeps a share."""

    INTERACTIVE = "interactive"
    BATCH = "batch"


class Fallback(str, Enum):
    BATCH = "batch"  # fallback allowed at batch boundaries (the default)
    NEVER = "never"  # retry on the same deployment only


@dataclass(frozen=True, slots=True)
class Directives:
    """What the client asked of routing; never changed once parsed."""

    batch: str | None = None
    region: str | None = None
    providers: tuple[str, ...] = ()
    fallback: Fallback = Fallback.BATCH
    cache_key: str | None = None
    priority: Priority | None = None  # None: batch for a request with a batch id, else interactive

    @property
    def priority_class(self) -> Priority:
        if self.priority is not None:
            return self.priority
        return Priority.BATCH if self.batch is not None else Priority.INTERACTIVE


NO_DIRECTIVES = Directives()


def parse_directives(headers: Mapping[str, str], body_object: Any) -> Directives:
    """Merge header and body forms; a disagreement between them is a 400."""
    from_headers = _from_headers(headers)
    from_body = _from_body(body_object)
    merged: dict[str, Any] = {}
    for name in ("batch", "region", "providers", "fallback", "cache_key", "priority"):
        header_value, body_value = from_headers.get(name), from_body.get(name)
        if header_value is not None and body_value is not None and header_value != body_value:
            raise DirectiveConflict(
                f"The {name} directive differs between the X-Gateway header and the gateway body object "
                f"({_show(header_value)} vs {_show(body_value)})",
                param=f"gateway.{'provider' if name == 'providers' else name}",
            )
        value = header_value if header_value is not None else body_value
        if value is not None:
            merged[name] = value
    return Directives(**merged) if merged else NO_DIRECTIVES


def _show(value: Any) -> str:
    return ",".join(value) if isinstance(value, tuple) else str(getattr(value, "value", value))


def _from_headers(headers: Mapping[str, str]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    if (batch := headers.get("x-gateway-batch")) is not None:
        found["batch"] = _batch_id(batch.strip(), "X-Gateway-Batch")
    if (region := headers.get("x-gateway-region")) is not None:
        found["region"] = _name(region.strip(), "X-Gateway-Region")
    if (provider := headers.get("x-gateway-provider")) is not None:
        found["providers"] = _providers([p.strip() for p in provider.split(",")], "X-Gateway-Provider")
    if (fallback := headers.get("x-gateway-fallback")) is not None:
        found["fallback"] = _fallback(fallback.strip(), "X-Gateway-Fallback")
    if (cache_key := headers.get("x-gateway-cache-key")) is not None:
        found["cache_key"] = _cache_key(cache_key.strip(), "X-Gateway-Cache-Key")
    if (priority := headers.get("x-gateway-priority")) is not None:
        found["priority"] = _priority(priority.strip(), "X-Gateway-Priority")
    return found


def _from_body(obj: Any) -> dict[str, Any]:
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise InvalidRequest("The gateway field must be an object", param="gateway")
    unknown = set(obj) - _BODY_FIELDS
    if unknown:
        raise InvalidRequest(
            f"Unknown gateway directive(s): {', '.join(sorted(map(str, unknown)))}; "
            f"known: {', '.join(sorted(_BODY_FIELDS))}",
            param="gateway",
        )
    found: dict[str, Any] = {}
    if obj.get("batch") is not None:
        found["batch"] = _batch_id(_string(obj["batch"], "gateway.batch"), "gateway.batch")
    if obj.get("region") is not None:
        found["region"] = _name(_string(obj["region"], "gateway.region"), "gateway.region")
    if obj.get("provider") is not None:
        raw = obj["provider"]
        names = [raw] if isinstance(raw, str) else raw
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise InvalidRequest(
                "gateway.provider must be a string or a list of strings", param="gateway.provider"
            )
        found["providers"] = _providers(names, "gateway.provider")
    if obj.get("fallback") is not None:
        found["fallback"] = _fallback(_string(obj["fallback"], "gateway.fallback"), "gateway.fallback")
    if obj.get("cache_key") is not None:
        found["cache_key"] = _cache_key(_string(obj["cache_key"], "gateway.cache_key"), "gateway.cache_key")
    if obj.get("priority") is not None:
        found["priority"] = _priority(_string(obj["priority"], "gateway.priority"), "gateway.priority")
    return found


def _string(value: Any, param: str) -> str:
    if not isinstance(value, str):
        raise InvalidRequest(f"{param} must be a string", param=param)
    return value


def _batch_id(value: str, param: str) -> str:
    if not BATCH_ID.fullmatch(value):
        raise InvalidRequest(f"{param} must be 1-128 characters of A-Za-z0-9._:-", param=param)
    return value


def _name(value: str, param: str) -> str:
    if not value or len(value) > 200:
        raise InvalidRequest(f"{param} must be a non-empty name", param=param)
    return value


def _providers(names: list[str], param: str) -> tuple[str, ...]:
    if not names or any(not n or len(n) > 200 for n in names):
        raise InvalidRequest(f"{param} must name one or more providers", param=param)
    if len(set(names)) != len(names):
        raise InvalidRequest(f"{param} names a provider twice", param=param)
    return tuple(names)


def _fallback(value: str, param: str) -> Fallback:
    try:
        return Fallback(value)
    except ValueError:
        raise InvalidRequest(f"{param} must be 'batch' or 'never'", param=param) from None


def _priority(value: str, param: str) -> Priority:
    try:
        return Priority(value)
    except ValueError:
        raise InvalidRequest(f"{param} must be 'interactive' or 'batch'", param=param) from None


def _cache_key(value: str, param: str) -> str:
    if not value or len(value) > CACHE_KEY_MAX:
        raise InvalidRequest(f"{param} must be 1-{CACHE_KEY_MAX} characters", param=param)
    return value
