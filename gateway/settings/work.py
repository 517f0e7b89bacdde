"""The catalog's sections on how work is admitted and run: a replica's capacity, the queue the
gateway holds for it (`scheduling:`), batch jobs (`jobs:`) and where their files live (`files:`).
Part of the catalog (`gateway.settings.catalog`), which runs each section's check here with its own.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import msgspec

from gateway.errors import ConfigError


class Capacity(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What one replica of a provider may have in flight, across every gateway process
    (gateway.scheduling); absent limits are unlimited."""

    max_concurrency: int | None = None  # requests in flight at one replica
    max_tokens_in_flight: int | None = None  # prompt tokens + max_tokens (or a default) in flight
    load_metrics: bool = False  # also hold dispatch while the replica's own /metrics say it is saturated
    metrics_url: str | None = None  # default: the replica's base URL without /v1, plus /metrics

    @property
    def limited(self) -> bool:
        return self.max_concurrency is not None or self.max_tokens_in_flight is not None or self.load_metrics


class QueueTimeouts(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    interactive: float = 30.0
    batch: float = 3600.0


class SchedulingSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How requests wait for a replica's capacity (gateway.scheduling)."""

    queue_timeout_s: QueueTimeouts = QueueTimeouts()
    max_queued: int = 100_000  # waiting requests per provider; beyond: 429 queue_full
    # The share of dispatches batch work keeps while interactive work waits too: never starved
    batch_share: float = 0.1
    # The share of each replica's max_concurrency that batch work leaves free for interactive
    # arrivals (rounded down: none below 20 slots at 0.05), so they do not wait for a batch
    # request to end
    interactive_reserve: float = 0.075
    # The reserve is kept only while interactive work is about: in flight or waiting at the
    # replica, or seen there within this many seconds; otherwise batch work may use it
    reserve_idle_s: float = 1.0
    # While an interactive request sent to a replica has not had its first token, for at most this
    # long, no batch request is sent there: batch prompts prefilled beside it lengthen the step its
    # first token waits for (0: off, the default: on the simulated vLLM it left the TTFT p99 where
    # it was, the step in progress and the batch's decode being most of it)
    interactive_prefill_guard_s: float = 0.0
    # Within a class and team, shorter prompts go first; the head of a longer bucket that this many
    # others went before while it was the head (shorter ones of its team, or ones a gate let past
    # it) goes next, so longer requests go one per this many shorter ones (0: arrival order)
    length_aging_passes: int = 32
    # A cache key's replica is skipped once its load passes this multiple of the mean
    # (consistent hashing with bounded loads)
    affinity_load_bound: float = 1.5
    # A request without a cache key meets the replica that served its prompt's leading part: this
    # many leading tokens (~4 bytes each) are hashed for it (0: off, such requests go to the
    # least-loaded replica)
    prefix_affinity_tokens: int = 8192
    # How long a conversation (a prompt_cache_key, a previous_response_id chain, a Messages API
    # metadata.user_id) keeps preferring the deployment and replica that served it last
    conversation_ttl_s: float = 600.0
    metrics_interval_s: float = 0.1  # how often a `load_metrics` replica's /metrics is read
    metrics_stale_s: float = 2.0  # older than this, the read is ignored and the caps alone hold
    # Held dispatch: the server's waiting queue this gateway aims for (with load_metrics)
    target_waiting: int = 0
    # With load_metrics: the share of the server's KV cache that the requests in flight may fill
    # at their peak (prompt plus max_tokens, each); batch work leaves interactive_reserve of it
    # while interactive work is about. A server that does not publish its size is held at a KV
    # usage 0.18 below this instead (room for its running sequences to grow)
    kv_cache_high: float = 0.98
    permit_lease_s: float = 3.0  # a process's permits in Redis outlive it by at most this


class JobSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How this process runs Batch API jobs (gateway.jobs.runner)."""

    runner: bool = True  # claim and run jobs in this process
    lease_s: float = 10.0  # a claim lasts this long unless renewed; a dead holder's job moves after it
    poll_interval_s: float = 1.0  # how often an idle runner looks for a job to claim
    concurrency: int = 256  # lines of one job in flight at once, per process
    pause_s: float = 5.0  # the wait before trying again after the pinned upstream failed


FILE_STORES = ("database", "s3")


class S3Settings(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """An S3-compatible bucket that holds the Files API's bytes (gateway.jobs.files.store)."""

    endpoint_url: str
    bucket: str
    access_key_id: str
    secret_access_key: str
    prefix: str = "gateway-files/"  # an object's key is this plus the file id
    region: str = "us-east-1"

    def __repr__(self) -> str:  # settings may be printed; the secret never is
        return (
            f"S3Settings(endpoint_url={self.endpoint_url!r}, bucket={self.bucket!r}, "
            f"prefix={self.prefix!r}, region={self.region!r}, access_key_id={self.access_key_id!r}, "
            "secret_access_key='***')"
        )


class FileSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Where the Files API keeps file bytes: the database (every process reads it) or S3."""

    store: str = "database"
    s3: S3Settings | None = None
    # uploads and batch creates one process works on at once (each moves up to a whole file);
    # one past them waits up to busy_wait_s for a slot, then gets 503 server_busy
    max_concurrent: int = 2
    busy_wait_s: float = 10.0


def check_capacity(capacity: Capacity | None, where: str) -> None:
    if capacity is None:
        return
    for key in ("max_concurrency", "max_tokens_in_flight"):
        value = getattr(capacity, key)
        if value is not None and value < 1:
            raise ConfigError(f"{where}.capacity.{key}: must be at least 1")
    if capacity.metrics_url is not None and not capacity.metrics_url.startswith(("http://", "https://")):
        raise ConfigError(f"{where}.capacity.metrics_url: must be an http:// or https:// URL")


def check_scheduling(scheduling: SchedulingSettings, path: Path) -> None:
    checks = {
        "scheduling.queue_timeout_s.interactive": scheduling.queue_timeout_s.interactive > 0,
        "scheduling.queue_timeout_s.batch": scheduling.queue_timeout_s.batch > 0,
        "scheduling.max_queued": scheduling.max_queued >= 0,
        "scheduling.batch_share": 0 < scheduling.batch_share <= 1,
        "scheduling.interactive_reserve": 0 <= scheduling.interactive_reserve < 1,
        "scheduling.reserve_idle_s": scheduling.reserve_idle_s >= 0,
        "scheduling.interactive_prefill_guard_s": scheduling.interactive_prefill_guard_s >= 0,
        "scheduling.length_aging_passes": scheduling.length_aging_passes >= 0,
        "scheduling.affinity_load_bound": scheduling.affinity_load_bound >= 1,
        "scheduling.prefix_affinity_tokens": 0 <= scheduling.prefix_affinity_tokens <= 1_000_000,
        "scheduling.conversation_ttl_s": scheduling.conversation_ttl_s >= 0,
        "scheduling.metrics_interval_s": scheduling.metrics_interval_s > 0,
        "scheduling.metrics_stale_s": scheduling.metrics_stale_s > scheduling.metrics_interval_s,
        "scheduling.target_waiting": scheduling.target_waiting >= 0,
        "scheduling.kv_cache_high": 0 < scheduling.kv_cache_high <= 1,
        "scheduling.permit_lease_s": scheduling.permit_lease_s >= 1,
    }
    for key, ok in checks.items():
        if not ok:
            raise ConfigError(f"{path}: {key}: out of range")


def check_jobs(jobs: JobSettings, path: Path) -> None:
    checks = {
        "jobs.lease_s": jobs.lease_s >= 0.5,
        "jobs.poll_interval_s": jobs.poll_interval_s > 0,
        "jobs.concurrency": jobs.concurrency >= 1,
        "jobs.pause_s": jobs.pause_s >= 0,
    }
    for key, ok in checks.items():
        if not ok:
            raise ConfigError(f"{path}: {key}: out of range")


def check_files(files: FileSettings, path: Path) -> None:
    if files.max_concurrent < 1:
        raise ConfigError(f"{path}: files.max_concurrent: must be at least 1")
    if files.busy_wait_s < 0:
        raise ConfigError(f"{path}: files.busy_wait_s: must not be negative")
    if files.store not in FILE_STORES:
        raise ConfigError(f"{path}: files.store: must be database or s3, not {files.store!r}")
    if files.store != "s3":
        return
    if files.s3 is None:
        raise ConfigError(f"{path}: files.s3: required when files.store is s3")
    s3 = files.s3
    for key in ("endpoint_url", "bucket", "access_key_id", "secret_access_key", "region"):
        if not getattr(s3, key).strip():
            raise ConfigError(f"{path}: files.s3.{key}: must not be empty")
    endpoint = urlsplit(s3.endpoint_url)
    if endpoint.scheme not in ("http", "https") or not endpoint.hostname:
        raise ConfigError(f"{path}: files.s3.endpoint_url: must be an http:// or https:// URL")
    if endpoint.username or endpoint.password:
        raise ConfigError(
            f"{path}: files.s3.endpoint_url: give the credentials as access_key_id and "
            "secret_access_key, not in the URL"
        )
