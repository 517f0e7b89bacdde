"""The one pin placement: where a batch goes first and where it may move, read or placed through
the shared pin store, or the same rendezvous choice in every process when the store is down.

The proxy's batched requests and the provider-run jobs both place their batch here.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.errors import UpstreamUnavailable
from gateway.routing.batch_pin import BatchPin, PinStoreUnavailable, new_pin
from gateway.routing.deployment import Deployment
from gateway.routing.directives import Directives
from gateway.routing.pins import PinStore
from gateway.routing.policy import every_circuit_open, rendezvous_choice


@dataclass(frozen=True, slots=True)
class Placed:
    """Where a batch is: the deployment's id, and its pin (None: the store was unreachable, and the
    rendezvous choice stands in for it)."""

    deployment: str
    pin: BatchPin | None


def batch_key(team_id: str, batch_id: str) -> str:
    """What a batch's placement is hashed on: two teams' batches of one name go their own ways."""
    return f"{team_id}:{batch_id}"


def batch_placement(
    key: str, eligible: Sequence[Deployment], directives: Directives, open_circuits: frozenset[str]
) -> Deployment:
    """Where a new batch goes: the preferred provider if one was named, else a rendezvous choice.

    Rendezvous hashing on `key` (team and batch id) weighs deployments like a weighted draw across
    batches, yet every process computes the same answer: the degraded mode (no shared pin store)
    then agrees with the pins placed while the store was up.
    """
    healthy = [d for d in eligible if d.id not in open_circuits]
    if not healthy:
        raise every_circuit_open(eligible, open_circuits)
    return healthy[0] if directives.providers else rendezvous_choice(key, healthy)


async def place_batch(
    pins: PinStore,
    team_id: str,
    batch_id: str,
    eligible: Sequence[Deployment],
    directives: Directives,
    open_circuits: frozenset[str],
    joined_at: float | None = None,
) -> Placed:
    """The batch's live pin, or a new one placed by `batch_placement` (UpstreamUnavailable when
    every eligible circuit is open). `joined_at`: the arrival time of the request joining the batch
    (None: now, and the read only reads)."""
    key = batch_key(team_id, batch_id)
    try:
        pin = await pins.touch(team_id, batch_id, joined_at=joined_at)
        if pin is None:
            first = batch_placement(key, eligible, directives, open_circuits)
            created = time.time() if joined_at is None else joined_at
            pin = await pins.place(new_pin(team_id, batch_id, first, created))
    except PinStoreUnavailable:
        # Health is not shared without the store either: circuits are ignored so processes agree.
        return Placed(batch_placement(key, eligible, directives, frozenset()).id, None)
    return Placed(pin.deployment, pin)


async def move_batch(
    pins: PinStore,
    pin: BatchPin,
    others: Sequence[Deployment],
    directives: Directives,
    open_circuits: frozenset[str],
) -> BatchPin | None:
    """Move an unconfirmed pin to where its batch goes among `others` (its failed deployment left
    out); the pin now in force, which a concurrent move may have put elsewhere, or None when there
    is nowhere healthy to go or no store to agree through (the pin stays)."""
    try:
        choice = batch_placement(batch_key(pin.team_id, pin.batch_id), others, directives, open_circuits)
        return await pins.move(pin, choice)
    except (UpstreamUnavailable, PinStoreUnavailable):
        return None
