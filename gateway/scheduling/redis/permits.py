"""RedisPermits: a replica's capacity permits held in Redis, so that caps hold across every process.

Each process counts its own permits in one replica's hashes (permit_scripts.py) under a lease it
keeps renewing; a process that dies stops renewing, and the next script to touch the replica drops
what it held. The lease runs on Redis's clock (TIME), so hosts never disagree about it.

Every acquire is its own script call (EVALSHA), sent through the group commit so that the acquires
of the same moment share a round trip. They are not merged into one call per replica: each carries
its own caller's waiting count and gets its own answer, and a gate asks for one replica at a time
anyway. Releases never block: those of one replica made before the next round trip goes out are one
decrement, sent in the background by one task.

A permit freed by another process wakes this process's gates at once: the scripts that give room
back publish on the replica's channel when another process waits there (scripts.py), and one
subscription per process (`_listen`) calls the gates registered with `watch`. A gate's poll
(`poll_s`) is then only a safety bound, for a message lost or a lease that ran out unnoticed; while
the subscription is down (Redis away, not yet subscribed) it is short again. Once the subscription
is back every gate is woken, since what was published meanwhile is lost.

This process keeps an exact count of what it holds at each replica. Every `lease_s / 3` it writes
those counts to Redis as absolute values, which renews its lease and undoes any drift (a release
lost in a Redis outage, a permit granted to a caller that gave up before hearing of it). It writes
them only while no command of its own to that replica is on its way, so that they never overtake
one: otherwise as soon as the last such command is answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import structlog
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError
from redis.typing import EncodableT

from gateway.redis.client import RedisClient
from gateway.redis.group_commit import PipelineBatcher
from gateway.scheduling.permits import Caps, PermitTotals
from gateway.scheduling.redis.scripts import ACQUIRE, RELEASE, RESTATE, TOTALS

log = structlog.get_logger("gateway.scheduling")

LEASE_S = 3.0  # how long a process's permits outlive it
UNHEARD_POLL_S = 0.005  # a gate's poll while releases elsewhere cannot wake it (not subscribed)
RESUBSCRIBE_S = 1.0  # the wait before subscribing again after the subscription failed


def _tag(replica: str) -> str:
    return hashlib.blake2b(replica.encode(), digest_size=8).hexdigest()


def replica_keys(replica: str) -> list[str]:
    """The replica's held, tokens, want and lease keys; one hash tag, so one Cluster slot."""
    tag = _tag(replica)
    return [f"gw:cap:{{{tag}}}:{part}" for part in ("held", "tokens", "want", "lease")]


def replica_channel(replica: str) -> str:
    """Where a release at the replica is published while another process waits there (with the
    keys' hash tag, so that it could become a sharded channel of their slot)."""
    return f"gw:cap:{{{_tag(replica)}}}:freed"


class ProcessId:
    """This process's name in the permit hashes: host, pid and random hex, unique across hosts and
    reused pids. A forked child draws anew (it would otherwise count its permits as its parent's)."""

    def __init__(self) -> None:
        self.draw()

    def draw(self) -> None:
        self.value = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(4).hex()}"


this_process = ProcessId()
os.register_at_fork(after_in_child=this_process.draw)


@dataclass(slots=True)
class _Holding:
    """What this process holds and wants at one replica, and its commands there not yet answered."""

    permits: int = 0
    tokens: int = 0
    want: int = 0  # waiting, as the last acquire stated it
    asked: bool = False  # an acquire since the last renewal: the want still stands
    outstanding: int = 0
    due: bool = False  # a restatement waits for the outstanding commands

    @property
    def idle(self) -> bool:
        return not (self.permits or self.want)


class RedisPermits:
    """`PermitBank` shared through Redis. `lease_s`: how long a killed process's permits outlive it.
    `process`: this process's name in Redis (default: drawn per process). `poll_s`: how long a
    gate sleeps unwoken while this process hears of releases (default: a sixth of the lease, so a
    waiting gate asks again before its want lapses at the next renewal)."""

    def __init__(
        self,
        redis: RedisClient,
        batcher: PipelineBatcher,
        *,
        lease_s: float = LEASE_S,
        process: str | None = None,
        poll_s: float | None = None,
    ) -> None:
        self._redis = redis
        self._batcher = batcher
        self._lease_s = lease_s
        self._heard_poll_s = lease_s / 6 if poll_s is None else poll_s
        self._lease_ms = round(lease_s * 1000)
        self._process = process
        self._acquire = redis.register_script(ACQUIRE)
        self._release = redis.register_script(RELEASE)
        self._restate_script = redis.register_script(RESTATE)
        self._totals = redis.register_script(TOTALS)
        self._keys: dict[str, list[bytes]] = {}
        self._channels: dict[str, bytes] = {}  # by replica, encoded once as the keys are
        self._wakes: dict[str, list[Callable[[], None]]] = {}  # the gates to wake, by replica
        self._listener: asyncio.Task[None] | None = None
        self.listening = asyncio.Event()  # set while subscribed to every watched replica's channel
        self._process_encoded = ("", b"")  # the process name and its bytes (it changes in a fork)
        # Per replica, the tokens of the releases the next decrement carries (one command and one
        # background task for all the releases of a round trip, not one each)
        self._releasing: dict[str, list[int]] = {}
        self._holdings: dict[str, _Holding] = {}
        self._writes: set[asyncio.Task[None]] = set()  # kept until done: a task nobody holds may be collected
        self._renewal: asyncio.Task[None] | None = None
        self._failing = False
        self._deaf = False  # the subscription failed, and that was logged

    @property
    def process(self) -> str:
        return self._process or this_process.value

    async def acquire(self, replica: str, tokens: int, caps: Caps, waiting: int) -> bool:
        """Raises the redis-py error (RedisError, OSError) when Redis cannot answer: the caller
        counts locally meanwhile."""
        holding = self._holding(replica)
        args = (
            self._process_bytes(),
            tokens,
            caps.max_concurrency or 0,
            caps.max_tokens_in_flight or 0,
            waiting,
            self._lease_ms,
            self._channel_of(replica),
        )
        holding.outstanding += 1
        holding.asked = True
        try:
            granted = bool(await self._call(self._acquire, replica, args))
            if granted:  # counted before the restatement that may be waiting for this reply
                holding.permits += 1
                holding.tokens += tokens
            holding.want = max(0, waiting - granted)
        finally:
            self._settled(replica, holding)
        self._working()
        return granted

    def release(self, replica: str, tokens: int) -> None:
        """Nothing is sent for a replica where this process holds nothing (its permit came from
        elsewhere): the count in Redis follows this process's own."""
        holding = self._holdings.get(replica)
        if holding is None or not holding.permits:
            return
        self._wake(replica)  # another gate of this process at the replica may be waiting for it
        holding.permits -= 1
        holding.tokens = max(0, holding.tokens - tokens)
        batch = self._releasing.get(replica)
        if batch is not None:  # a decrement for this replica is queued: it carries this one too
            batch.append(tokens)
            return
        batch = self._releasing[replica] = [tokens]

        def decrement(_: list[None]) -> tuple[Sequence[EncodableT], tuple[EncodableT, ...]]:
            self._releasing.pop(replica, None)  # going out: later releases start the next one
            args = (self._process_bytes(), len(batch), sum(batch), self._lease_ms, self._channel_of(replica))
            return self._keys_of(replica), args

        self._write(replica, holding, self._batcher.merge_script(self._release, replica, None, decrement))

    async def totals(self, replica: str) -> PermitTotals:
        in_flight, tokens, processes = await self._call(self._totals, replica, ())
        return PermitTotals(in_flight, tokens, processes)

    def watch(self, replica: str, wake: Callable[[], None]) -> None:
        self._wakes.setdefault(replica, []).append(wake)
        if self._listener is not None:  # subscribed to the others: subscribe again, with this one
            self._listener.cancel()
            self._listener = None
            self.listening.clear()
        self._start_listener()

    @property
    def poll_s(self) -> float:
        return self._heard_poll_s if self.listening.is_set() else UNHEARD_POLL_S

    def start(self) -> None:
        if self._renewal is None:
            self._renewal = asyncio.create_task(self._renew_leases(), name=f"permit-leases:{self.process}")
        self._start_listener()

    async def aclose(self) -> None:
        """Stop renewing and give back at once all this process holds (a graceful stop)."""
        for task in (self._renewal, self._listener):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._renewal = self._listener = None
        self.listening.clear()
        leaving = [self._restate_args(replica, _Holding()) for replica in self._holdings]
        self._holdings.clear()
        outcomes = await asyncio.gather(
            *self._writes,
            *(self._call(self._restate_script, *args) for args in leaving),
            return_exceptions=True,
        )
        failed = [o for o in outcomes if isinstance(o, (RedisError, OSError))]
        if failed:
            log.warning(
                "capacity_permits_left", error=type(failed[0]).__name__, detail="they expire with the lease"
            )

    async def _renew_leases(self) -> None:
        while True:
            await asyncio.sleep(self._lease_s / 3)
            self._renew()

    def _renew(self) -> None:
        for replica, holding in list(self._holdings.items()):
            if not holding.asked:  # nobody asked since the last renewal: nothing waits any more
                holding.want = 0
            holding.asked = False
            if holding.outstanding:
                holding.due = True
                continue
            self._restate(replica, holding)
            if holding.idle:  # its fields are gone once the restatement lands
                del self._holdings[replica]

    def _restate(self, replica: str, holding: _Holding) -> None:
        self._write(replica, holding, self._call(self._restate_script, *self._restate_args(replica, holding)))

    def _restate_args(self, replica: str, holding: _Holding) -> tuple[str, tuple[EncodableT, ...]]:
        args = (
            self.process,
            holding.permits,
            holding.tokens,
            holding.want,
            self._lease_ms,
            self._channel_of(replica),
        )
        return replica, args

    def _call(self, script: AsyncScript, replica: str, args: Sequence[EncodableT]) -> Awaitable[Any]:
        """One script call of its own (merged with nothing) through the group commit."""
        keys = self._keys_of(replica)
        return self._batcher.merge_script(script, object(), args, lambda _: (keys, args))

    def _write(self, replica: str, holding: _Holding, reply: Awaitable[Any]) -> None:
        holding.outstanding += 1
        task = asyncio.ensure_future(self._background(replica, holding, reply))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _background(self, replica: str, holding: _Holding, reply: Awaitable[Any]) -> None:
        try:
            await reply
        except (RedisError, OSError) as exc:  # the next restatement makes up for it
            self._failed(exc)
        else:
            self._working()
        finally:
            self._settled(replica, holding)

    def _settled(self, replica: str, holding: _Holding) -> None:
        holding.outstanding -= 1
        if holding.due and not holding.outstanding and self._holdings.get(replica) is holding:
            holding.due = False
            self._restate(replica, holding)

    def _holding(self, replica: str) -> _Holding:
        holding = self._holdings.get(replica)
        if holding is None:
            holding = self._holdings[replica] = _Holding()
        return holding

    def _keys_of(self, replica: str) -> list[bytes]:
        # Encoded once: redis-py encodes every str argument of every command it packs, and these
        # go out with every acquire and release.
        keys = self._keys.get(replica)
        if keys is None:
            keys = self._keys[replica] = [key.encode() for key in replica_keys(replica)]
        return keys

    def _channel_of(self, replica: str) -> bytes:
        channel = self._channels.get(replica)
        if channel is None:
            channel = self._channels[replica] = replica_channel(replica).encode()
        return channel

    def _start_listener(self) -> None:
        if self._wakes and self._renewal is not None and self._listener is None:
            self._listener = asyncio.create_task(self._listen(), name=f"permit-releases:{self.process}")

    async def _listen(self) -> None:
        """Wake the watching gates of a replica whenever another process publishes a release there;
        runs until cancelled, subscribing again after Redis failed."""
        replicas = {self._channel_of(replica): replica for replica in self._wakes}
        while True:
            try:
                # A Cluster client learns the slot map on its first command, and its pub/sub (on
                # the node of the channel's slot) needs the map: a ping first.
                await self._redis.ping()
                async with self._redis.pubsub() as pubsub:
                    await pubsub.subscribe(*replicas)
                    async for message in pubsub.listen():
                        self._heard(message, replicas)
            except (RedisError, OSError) as exc:
                self._unheard(exc)
                await asyncio.sleep(RESUBSCRIBE_S)

    def _heard(self, message: dict[str, Any], replicas: dict[bytes, str]) -> None:
        kind = message.get("type")
        if kind == "message":
            channel = message["channel"]
            if isinstance(channel, str):  # a client that decodes replies
                channel = channel.encode()
            if message.get("data") != self._process_bytes():  # its own gates woke as it released
                self._wake(replicas.get(channel, ""))
        elif kind == "subscribe" and message.get("data") == len(replicas):
            # Subscribed to every channel (again, after redis-py reconnected): what was published
            # meanwhile is lost, so every gate asks once more, then the long poll holds.
            self.listening.set()
            if self._deaf:
                log.info("capacity_release_signals_restored")
                self._deaf = False
            for replica in replicas.values():
                self._wake(replica)

    def _unheard(self, exc: BaseException) -> None:
        self.listening.clear()
        for replica in self._wakes:  # sleeping gates go back to the short poll
            self._wake(replica)
        if not self._deaf:
            log.warning(
                "capacity_release_signals_lost",
                error=type(exc).__name__,
                detail="Redis unreachable: gates waiting on shared permits poll until it answers again",
            )
        self._deaf = True

    def _wake(self, replica: str) -> None:
        for wake in self._wakes.get(replica, ()):
            wake()

    def _process_bytes(self) -> bytes:
        name = self.process
        if self._process_encoded[0] != name:
            self._process_encoded = (name, name.encode())
        return self._process_encoded[1]

    def _failed(self, exc: BaseException) -> None:
        if not self._failing:
            log.warning(
                "capacity_permit_writes_failing",
                error=type(exc).__name__,
                detail="Redis unreachable: permits are restated once it answers again",
            )
        self._failing = True

    def _working(self) -> None:
        if self._failing:
            log.info("capacity_permit_writes_restored")
        self._failing = False
