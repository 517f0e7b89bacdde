"""A batch pin, the value the pin stores keep (`gateway.routing.pins`), how it is made and moved,
and the stores' failure.

A msgspec Struct: the Redis store keeps a pin's fixed part as its JSON.
"""

from __future__ import annotations

import msgspec

from gateway.errors import GatewayError
from gateway.routing.deployment import Deployment


class PinStoreUnavailable(GatewayError):
    """The shared store cannot be reached; callers degrade to rendezvous hashing."""

    status = 503


class BatchPin(msgspec.Struct, frozen=True, kw_only=True):
    team_id: str
    batch_id: str
    deployment: str
    model: str
    provider: str
    region: str
    created_at: float
    last_used_at: float
    confirmed: bool = False
    moves: int = 0


def new_pin(team_id: str, batch_id: str, deployment: Deployment, now: float) -> BatchPin:
    return BatchPin(
        team_id=team_id,
        batch_id=batch_id,
        deployment=deployment.id,
        model=deployment.model,
        provider=deployment.provider.name,
        region=deployment.region,
        created_at=now,
        last_used_at=now,
    )


def moved_pin(pin: BatchPin, to: Deployment) -> BatchPin:
    """`pin` on `to` instead: one move more (a pin moves once, while unconfirmed)."""
    return msgspec.structs.replace(
        pin, deployment=to.id, provider=to.provider.name, region=to.region, moves=pin.moves + 1
    )
