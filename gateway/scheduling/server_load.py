"""Back-pressure from a replica's own Prometheus `/metrics` (vLLM's names): `ServerLoad` reads them
every `metrics_interval_s` and says whether this process may send the replica one more request now,
on top of the static caps.

When the server says how large its KV cache is (`vllm:cache_config_info`), the learned capacity
(`gateway.scheduling.capacity`) decides: fill toward `kv_cache_high` of it, back off when the
server preempts; and what the server holds (W + R + N) stays below 2 * max(R, 4) +
target_waiting + 1, at most doubling per read (x8 while it keeps up, starting more between two
reads than it has waiting and holding all this process sent it, and its KV cache is used below
half of kv_cache_high), so that a server whose sequence limit is not known yet is not flooded
between two reads. Otherwise the rule, from the last good read (W requests waiting, R running,
KV-cache usage K) and the requests this process sent the replica (`dispatched_since`) and saw end
(`completed_since`) since that read, with H = kv_cache_high - GROWTH_ROOM (a usage measured now
must leave the running sequences room to grow, where the learned capacity predicts their peak):

- Saturated at the read (W > 0, or K >= H): dispatch while
  W + dispatched_since - completed_since < target_waiting, keeping the server's own queue at
  `target_waiting` and no deeper. A high KV cache is held by the same count rather than until a
  later read shows it lower: a request that ended gave its blocks back, so its replacement fits in
  them, and whatever does not fit waits in the server's queue, which `target_waiting` bounds.
  Holding for the next read would leave the freed room idle for up to an interval.
- Not saturated: the server has room, but how much is unknown. Allow a burst per read,
  dispatched_since - completed_since < max(R, 4) + target_waiting + 1, at most doubling the
  load per read like a slow start, so that a flood of arrivals between two reads does not land
  on the server all at once; and no more than the KV cache has room for below H at the running
  requests' mean use (R * (H - K) / K, plus target_waiting): a burst
  that fills the cache past it makes the server preempt as its sequences grow.
- No good read within `metrics_stale_s`, or none yet: always allowed, and the caps alone hold.
  Metrics that cannot be read never hold or fail a request.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Callable
from typing import Any

import httpx
import structlog
from prometheus_client.parser import text_string_to_metric_families

from gateway.scheduling.capacity import LearnedCapacity, LoadReading
from gateway.scheduling.in_flight import InFlight
from gateway.scheduling.ticket import UNSCHEDULED, Ticket
from gateway.settings import SchedulingSettings

log = structlog.get_logger("gateway.scheduling")

READ_TIMEOUT_S = 1.0  # a server too busy to answer its /metrics within this is treated as unreadable
MIN_BURST = 4  # requests a server with nothing running may take between two reads
# How much what a server of known size holds may grow per read: doubling, or x8 while it keeps up
# (it started more since the read before than it has waiting, and holds all this process sent
# it) and its KV cache is used below half of kv_cache_high. Sequences that need little KV of their
# own (a shared prefix held once) fill a server's sequence limit long before its cache, and
# doubling from a few to 256 took six reads (0.6 s) of a 6 s batch. A server that does not keep up
# (held by a sequence limit not learned yet) only doubles, so its own queue stays short.
RAMP, RAMP_ROOMY = 2, 8
# Without the server's size: the KV usage measured now that holds dispatch is this much below
# kv_cache_high (0.98 - 0.18 = 0.8: the benchmark's server preempted at 0.9, not at 0.8)
GROWTH_ROOM = 0.18

WAITING = "vllm:num_requests_waiting"
RUNNING = "vllm:num_requests_running"
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")  # the second: older servers
CACHE_CONFIG = "vllm:cache_config_info"  # its labels carry num_gpu_blocks and block_size
PREEMPTIONS = ("vllm:num_preemptions_total", "vllm:num_preemptions")  # the second: a counter's bare name
# Only these samples are parsed: a real server's /metrics carries hundreds of histogram lines that
# say nothing about load and would make every read cost far more than it needs to.
_LOAD_SAMPLES = re.compile(
    "^(?:"
    + "|".join(re.escape(name) for name in (WAITING, RUNNING, *KV_USAGE, CACHE_CONFIG, *PREEMPTIONS))
    + ")[{ \t].*$",
    re.MULTILINE,
)


def metrics_url_for(base_url: str, capacity_metrics_url: str | None) -> str:
    """The configured metrics URL, else the replica's base URL without a trailing /v1, plus /metrics."""
    if capacity_metrics_url:
        return capacity_metrics_url
    return base_url.rstrip("/").removesuffix("/v1") + "/metrics"


def _label_int(labels: dict[str, str], name: str) -> int | None:
    try:
        value = int(labels.get(name, ""))
    except ValueError:  # absent, or "None" before the engine has sized its cache
        return None
    return value if value > 0 else None


def kv_size(samples: list[tuple[dict[str, str], float]]) -> tuple[int | None, int | None]:
    """(KV-cache tokens, block size) from `vllm:cache_config_info`'s labels, summed over its
    series (one per engine), or (None, None) when no series gives both."""
    tokens, block_size = 0, None
    for labels, _ in samples:
        blocks, size = _label_int(labels, "num_gpu_blocks"), _label_int(labels, "block_size")
        if blocks is not None and size is not None:
            tokens += blocks * size
            block_size = size
    return (tokens or None), block_size


def parse_load(text: str, read_at: float) -> LoadReading | None:
    """The load in a Prometheus text exposition, or None when it has no vLLM waiting and running
    series (or cannot be parsed)."""
    values: dict[str, list[float]] = {}
    config: list[tuple[dict[str, str], float]] = []
    try:
        for family in text_string_to_metric_families("\n".join(_LOAD_SAMPLES.findall(text)) + "\n"):
            if family.name == CACHE_CONFIG:
                config.extend((sample.labels, sample.value) for sample in family.samples)
                continue
            samples = [sample.value for sample in family.samples if math.isfinite(sample.value)]
            values.setdefault(family.name, []).extend(samples)
    except ValueError:
        return None
    if WAITING not in values or RUNNING not in values:
        return None
    usage = [value for name in KV_USAGE for value in values.get(name, [])]
    preempted = next((values[name] for name in PREEMPTIONS if name in values), None)
    kv_tokens, block_size = kv_size(config)
    return LoadReading(
        waiting=sum(values[WAITING]),
        running=sum(values[RUNNING]),
        kv_usage=max(usage, default=None),
        kv_tokens=kv_tokens,
        block_size=block_size,
        preemptions=None if preempted is None else sum(preempted),
        read_at=read_at,
    )


def _loggable(url: str) -> str:
    """The URL without credentials or query (a token may sit in either)."""
    try:
        return str(httpx.URL(url).copy_with(username=None, password=None, query=None))
    except httpx.InvalidURL:
        return "<invalid url>"


class ServerLoad:
    """One replica's load as its /metrics last said, and what this process sent it since."""

    def __init__(
        self,
        metrics_url: str,
        settings: SchedulingSettings,
        client: httpx.AsyncClient,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[], None] = lambda: None,
        in_flight: InFlight | None = None,
    ) -> None:
        self.metrics_url = metrics_url
        self._settings = settings
        self.in_flight = InFlight() if in_flight is None else in_flight  # the gate's, at this replica
        self.capacity = LearnedCapacity(settings.kv_cache_high, settings.target_waiting)
        self._client = client
        self._clock = clock
        self._on_change = on_change
        self.reading: LoadReading | None = None  # the last good read
        self.dispatched_since = 0
        self.completed_since = 0
        self._grew = False  # the last read showed more started since the one before than waiting
        self._unreadable = False  # in an outage: logged at its start only

    async def run(self) -> None:
        """Read the metrics forever; after each read, good or bad, tell `on_change` (a hold may
        have lifted, or the reading gone stale)."""
        while True:
            await self.read()
            self._on_change()
            await asyncio.sleep(self._settings.metrics_interval_s)

    async def read(self) -> LoadReading | None:
        """Read the metrics once; the new reading, or None when they could not be read."""
        outcome = await self._fetch()
        if isinstance(outcome, str):
            if not self._unreadable:
                log.warning("server_metrics_unreadable", url=_loggable(self.metrics_url), error=outcome)
            self._unreadable = True
            return None
        if self._unreadable:
            log.info("server_metrics_readable", url=_loggable(self.metrics_url))
        self._unreadable = False
        # It keeps up: it started more since the last read than it has waiting now, and it holds
        # all this process sent it since then (a burst still on its way there, or queued, says
        # nothing about room: read then, a server held at four sequences looked as if it had
        # started all it was sent, and was sent eight times as many)
        previous = self.reading
        sent = self.dispatched_since - self.completed_since
        self._grew = (
            previous is not None
            and outcome.running - previous.running >= max(outcome.waiting, 1)
            and outcome.running + outcome.waiting - previous.running - previous.waiting >= sent
        )
        self.reading = outcome
        self.dispatched_since = self.completed_since = 0
        self.capacity.observe(outcome, self.in_flight)
        return outcome

    async def _fetch(self) -> LoadReading | str:
        """The reading, or why there is none (no bodies: they are the server's, not ours to log)."""
        try:
            response = await self._client.get(self.metrics_url, timeout=READ_TIMEOUT_S)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            return type(exc).__name__
        if response.status_code != 200:
            return f"status {response.status_code}"
        reading = parse_load(response.text, self._clock())
        return "no vllm load series" if reading is None else reading

    def fresh_reading(self) -> LoadReading | None:
        """The last good read, unless it is older than `metrics_stale_s`."""
        reading = self.reading
        if reading is None or self._clock() - reading.read_at > self._settings.metrics_stale_s:
            return None
        return reading

    def may_dispatch(self, ticket: Ticket | None = None, share: float = 1.0) -> bool:
        """Whether `ticket` may go now (None: a request that adds nothing but itself); `share`: the
        part of the learned capacity its class may fill."""
        reading = self.fresh_reading()
        if reading is None:
            return True
        settings = self._settings
        net = self.dispatched_since - self.completed_since
        if self.capacity.kv_tokens is not None:
            # The server's size bounds what it may hold, not how fast it takes it: what it holds
            # (running and waiting) at most doubles per read, so a server held by a max_num_seqs
            # not known yet is not flooded between two reads
            at_server = reading.running + reading.waiting + net
            roomy = (
                self._grew and reading.kv_usage is not None and reading.kv_usage < settings.kv_cache_high / 2
            )
            growth = RAMP_ROOMY if roomy else RAMP
            ramp = growth * max(reading.running, MIN_BURST) + settings.target_waiting + 1
            return at_server < ramp and self.capacity.admits(ticket or UNSCHEDULED, self.in_flight, share)
        kv_high = reading.kv_usage is not None and reading.kv_usage >= settings.kv_cache_high - GROWTH_ROOM
        if reading.waiting > 0 or kv_high:
            return reading.waiting + net < settings.target_waiting
        return net < self._burst(reading)

    def _burst(self, reading: LoadReading) -> int:
        """How many more requests than have ended this process may send before the next read."""
        burst = max(int(reading.running), MIN_BURST) + self._settings.target_waiting + 1
        if reading.kv_usage and reading.running >= 1:  # no more than the KV cache has room for
            per_request = reading.kv_usage / reading.running
            room = int((self._settings.kv_cache_high - GROWTH_ROOM - reading.kv_usage) / per_request)
            burst = min(burst, max(room, 0) + self._settings.target_waiting)
        return burst

    def dispatched(self) -> None:
        """This process sent the replica one request."""
        self.dispatched_since += 1

    def completed(self) -> None:
        """One of the requests this process sent the replica ended."""
        self.completed_since += 1

    def withdrawn(self) -> None:
        """A dispatch counted ahead (while its permit was asked for) did not happen after all."""
        self.dispatched_since = max(0, self.dispatched_since - 1)

    def snapshot(self) -> dict[str, Any]:
        """The last reading and whether dispatch is held now, for /admin/providers."""
        reading = self.reading
        return {
            "waiting": None if reading is None else reading.waiting,
            "running": None if reading is None else reading.running,
            "kv_usage": None if reading is None else reading.kv_usage,
            "age_s": None if reading is None else max(0.0, self._clock() - reading.read_at),
            "stale": self.fresh_reading() is None,
            "held": not self.may_dispatch(),
            "capacity": self._capacity_snapshot(),
        }

    def _capacity_snapshot(self) -> dict[str, Any] | None:
        capacity = self.capacity
        if capacity.kv_tokens is None:
            return None
        return {
            "kv_tokens": capacity.kv_tokens,
            "budget_tokens": round(capacity.budget),
            "peak_tokens": round(capacity.peak(self.in_flight)),
            "shares_prefix": capacity.shares_prefix,
            "prompt_ratio": round(capacity.prompt_ratio, 3),
            "fill": round(capacity.fill, 3),
            "slot_limit": capacity.slot_limit,
        }
