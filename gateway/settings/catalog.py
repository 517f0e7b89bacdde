"""The YAML catalog: providers, models, deployments, prices and tuning, typed and frozen, and
`load_catalog`, which reads one and says exactly what is wrong with a bad one.
"""

from __future__ import annotations

import re
from decimal import Decimal
from enum import Enum
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Any

import msgspec
import yaml

from gateway.errors import ConfigError
from gateway.settings.work import (
    FILE_STORES,
    Capacity,
    FileSettings,
    JobSettings,
    QueueTimeouts,
    S3Settings,
    SchedulingSettings,
    check_capacity,
    check_files,
    check_jobs,
    check_scheduling,
)

__all__ = [
    "FILE_STORES",
    "Capacity",
    "ConfigError",
    "FileSettings",
    "JobSettings",
    "QueueTimeouts",
    "S3Settings",
    "SchedulingSettings",
]


class ProviderKind(str, Enum):
    OPENAI = "openai"
    AZURE = "azure"
    ANTHROPIC = "anthropic"
    MOCK = "mock"


class Provider(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    kind: ProviderKind
    region: str
    base_url: str | None = None
    base_urls: tuple[str, ...] = ()
    api_key: str | None = None
    # An organization admin key (OpenAI's `sk-admin-...`, Anthropic's `sk-ant-admin...`; openai and
    # anthropic kinds): with it, the provider's own usage and cost reports are read each day and set
    # beside the gateway's records (gateway.reconciliation). Give it as ${VAR}; never logged.
    admin_api_key: str | None = None
    timeout_s: float = 600.0
    connect_timeout_s: float = 10.0
    api_version: str = "2024-10-21"  # azure only
    anthropic_version: str = "2023-06-01"  # anthropic only
    # anthropic only: which of a Messages client's `anthropic-beta` values are forwarded (None:
    # every one; a list: those named, the others dropped; empty: none), after the provider's own
    # `anthropic-beta` from `headers` (gateway.dialects.messages.betas)
    anthropic_betas: tuple[str, ...] | None = None
    # How prompt-cache hints are forwarded: "openai" (prompt_cache_key, cache_control removed),
    # "pass" (forward as sent), "strip" (remove all hints); "auto" = openai for OpenAI and Azure,
    # strip for other OpenAI-compatible servers (vLLM, SGLang...).
    cache_hints: str = "auto"
    # Whether a request's `service_tier` is sent (OpenAI-compatible kinds): "forward", "drop"; "auto"
    # = forward to OpenAI (api.openai.com), Azure and the mock, drop for other servers (vLLM, SGLang:
    # no tiers). "forward" is for a server with OpenAI's tiers at another URL (a proxy in front of it).
    service_tiers: str = "auto"
    headers: dict[str, str] = {}
    capacity: Capacity | None = None  # absent: unlimited, no queue
    # Send non-streaming chat requests to the upstream as streams, to record their time to first
    # token, and answer with the assembled completion (OpenAI-compatible kinds only). Unset: on for
    # providers with `capacity` and for Batch API job lines (`measures_ttft`).
    measure_ttft: bool | None = None
    # Who runs a Batch API job's lines: "gateway" (one by one, through the scheduler) or
    # "provider" (the whole job goes to the provider's own batch API; openai, azure, anthropic)
    batch_execution: str = "gateway"
    # How /v1/responses is served: "native" (forwarded to the upstream's own Responses API),
    # "chat" (translated to its chat completions API); "auto" = native for Azure and
    # api.openai.com, chat for every other provider (gateway.dialects.responses.adapter)
    responses_api: str = "auto"
    # What a request translated to chat does with a built-in Responses tool the client did not mark
    # optional (web_search, file_search, code_interpreter...): "refuse" (a 400 naming the tool) or
    # "drop" (served without it, named in `x-gateway-dropped-tools`; gateway.dialects.responses.tools)
    responses_builtin_tools: str = "refuse"

    def measures_ttft(self, job_line: bool) -> bool:
        """Whether a non-streaming chat request is streamed from this provider to see its first
        token: as set, else by default where throughput is measured (a provider whose queue the
        gateway holds, a Batch API job's line), so that every batch has a prefill/decode split.
        Never for Anthropic, whose answers the gateway does not assemble from a stream."""
        if self.kind is ProviderKind.ANTHROPIC:
            return False
        if self.measure_ttft is not None:
            return self.measure_ttft
        return self.capacity is not None or job_line

    @property
    def urls(self) -> tuple[str, ...]:
        """Replica base URLs, in configured order (one for most providers)."""
        if self.base_urls:
            return tuple(u.rstrip("/") for u in self.base_urls)
        return (self.base_url.rstrip("/"),) if self.base_url else ()


# The service tiers a request may ask for (OpenAI's `service_tier`), and those priced apart from
# the normal price: `auto` and `default` are billed at it (gateway.metering.pricing.Tariff.tier)
SERVICE_TIERS = ("auto", "default", "flex", "priority")
PRICED_TIERS = ("flex", "priority")


class TierMultipliers(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What each rate is multiplied by at a tier whose own rate is not given (0.5: half price)."""

    flex: Decimal | None = None
    priority: Decimal | None = None


class Price(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """USD per million tokens; cached_input and cache_write fall back to input. batch_input and
    batch_output price the lines a provider's own batch API ran; flex_* and priority_* (or
    `tier_multipliers`) the requests served at that service tier (gateway.metering.pricing)."""

    input: Decimal = Decimal(0)
    output: Decimal = Decimal(0)
    cached_input: Decimal | None = None
    cache_write: Decimal | None = None
    batch_input: Decimal | None = None
    batch_output: Decimal | None = None
    flex_input: Decimal | None = None
    flex_output: Decimal | None = None
    flex_cached_input: Decimal | None = None
    priority_input: Decimal | None = None
    priority_output: Decimal | None = None
    priority_cached_input: Decimal | None = None
    tier_multipliers: TierMultipliers | None = None


# the rates a price gives, each a Decimal or None (`tier_multipliers` are checked beside them)
PRICE_RATES = (
    "input",
    "output",
    "cached_input",
    "cache_write",
    "batch_input",
    "batch_output",
    *(f"{tier}_{rate}" for tier in PRICED_TIERS for rate in ("input", "output", "cached_input")),
)


class DeploymentSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    provider: str
    model: str
    price: Price = Price()
    weight: float = 1.0
    # The share taken off every rate for lines run by the provider's batch API (0.5: half price),
    # where price.batch_input / batch_output are not given
    batch_discount: Decimal | None = None
    # How a batch quote counts this deployment's prompts (gateway.jobs.quotes.tokens): an OpenAI BPE
    # (o200k_base, cl100k_base), or chars4 (4 characters a token of a `<|role|>text` rendering, a
    # prefix cache of 16-token blocks: the simulated vLLM's). Unset: the model's own BPE where the
    # upstream model is an OpenAI one, else the gateway's estimate.
    tokenizer: str | None = None


class ModelSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    deployments: tuple[DeploymentSpec, ...]
    # Other names the model answers to (a client's default model name, `claude-sonnet-4-5`, for a
    # self-hosted model): each is listed by /v1/models and routed as the model itself.
    aliases: tuple[str, ...] = ()


class RetrySettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    max_attempts: int = 3
    backoff_base_s: float = 0.2
    backoff_max_s: float = 5.0
    retry_after_cap_s: float = 30.0


class CircuitSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    failure_threshold: int = 5
    cooldown_s: float = 30.0


class BatchSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    idle_ttl_s: int = 3600


BUFFERED_BODIES = 4  # request bodies as large as the cap one process may read at once, by default


class LimitSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    max_body_bytes: int = 32 * 1024 * 1024
    max_messages: int = 10_000
    max_upstream_response_bytes: int = 64 * 1024 * 1024
    # Request-body bytes one serving process reads at once, over all its requests (the proxy front,
    # gateway.api.front.request_body); unset: BUFFERED_BODIES times max_body_bytes.
    max_buffered_body_bytes: int | None = None
    # Output tokens a request that sets neither max_tokens nor max_completion_tokens reserves per
    # choice at admission (tokens per minute and budgets, gateway.limits.reservation)
    default_max_tokens: int = 4096
    # How long an admission's budget hold lasts when its request is never settled (a lost process)
    reservation_ttl_s: float = 1800.0
    # A stream whose client takes none of the bytes sent for this long is closed on both sides, its
    # capacity permit given back and its usage recorded as 499 client_stalled (gateway.api.front.sse_relay)
    stream_write_timeout_s: float = 30.0
    # Streams one key may have in flight at one serving process; past it: 429 too_many_streams
    max_streams_per_key: int = 256

    @property
    def buffered_body_bytes(self) -> int:
        if self.max_buffered_body_bytes is None:
            return BUFFERED_BODIES * self.max_body_bytes
        return self.max_buffered_body_bytes


class ReconciliationSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The daily comparison with the providers' own reports (gateway.reconciliation)."""

    # A difference past this share of a measure (tokens or cost) is logged as a warning and makes
    # `gateway usage reconcile` exit 3
    threshold: Annotated[float, msgspec.Meta(ge=0)] = 0.01
    # Hours after a UTC day ends before it is reconciled: the providers' reports settle late
    delay_h: Annotated[float, msgspec.Meta(ge=0)] = 6.0
    # Days back the daily run looks for a day not yet reconciled
    lookback_days: Annotated[int, msgspec.Meta(ge=1, le=31)] = 3


class Catalog(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    providers: tuple[Provider, ...]
    models: tuple[ModelSpec, ...]
    retry: RetrySettings = RetrySettings()
    circuit: CircuitSettings = CircuitSettings()
    batches: BatchSettings = BatchSettings()
    limits: LimitSettings = LimitSettings()
    scheduling: SchedulingSettings = SchedulingSettings()
    jobs: JobSettings = JobSettings()
    files: FileSettings = FileSettings()
    reconciliation: ReconciliationSettings = ReconciliationSettings()

    def provider(self, name: str) -> Provider:
        return next(p for p in self.providers if p.name == name)


_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_PATH_IN_MESSAGE = re.compile(r" - at `\$(.*)`$")


def load_catalog(path: str | Path, environ: dict[str, str]) -> Catalog:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to be a configuration") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping with providers and models")
    missing: list[str] = []  # every unset variable, named at once rather than one per start
    substituted = _substitute_env(raw, environ, path, "", missing)
    if missing:
        raise ConfigError(f"{path}: " + "; ".join(missing))
    try:
        catalog = msgspec.convert(substituted, Catalog, strict=False)
    except msgspec.ValidationError as exc:
        message = str(exc)
        match = _PATH_IN_MESSAGE.search(message)
        where = match.group(1).lstrip(".") if match else "(top level)"
        problem = _PATH_IN_MESSAGE.sub("", message)
        raise ConfigError(f"{path}: {where}: {problem}") from None
    _check_references(catalog, path)
    return catalog


def _substitute_env(node: Any, environ: dict[str, str], path: Path, where: str, missing: list[str]) -> Any:
    """`node` with its `${VAR}` references replaced; each unset one is added to `missing`."""
    if isinstance(node, dict):
        return {
            k: _substitute_env(v, environ, path, f"{where}.{k}" if where else str(k), missing)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_substitute_env(v, environ, path, f"{where}[{i}]", missing) for i, v in enumerate(node)]
    if isinstance(node, str):

        def replace(match: re.Match[str]) -> str:
            name, default = match.group(1), match.group(2)
            if name in environ:
                return environ[name]
            if default is not None:
                return default
            missing.append(f"{where}: environment variable {name} is not set")
            return ""

        return _ENV_REF.sub(replace, node)
    return node


def _check_references(catalog: Catalog, path: Path) -> None:
    seen: set[str] = set()
    for i, provider in enumerate(catalog.providers):
        where = f"{path}: providers[{i}]"
        if provider.name in seen:
            raise ConfigError(f"{where}.name: duplicate provider name {provider.name!r}")
        seen.add(provider.name)
        if provider.kind is not ProviderKind.MOCK and not provider.urls:
            raise ConfigError(f"{where}.base_url: required for a provider of kind {provider.kind.value}")
        if provider.base_url and provider.base_urls:
            raise ConfigError(f"{where}: give base_url or base_urls, not both")
        if provider.cache_hints not in ("auto", "openai", "pass", "strip"):
            raise ConfigError(f"{where}.cache_hints: must be auto, openai, pass or strip")
        if provider.service_tiers not in ("auto", "forward", "drop"):
            raise ConfigError(f"{where}.service_tiers: must be auto, forward or drop")
        if provider.service_tiers != "auto" and provider.kind is ProviderKind.ANTHROPIC:
            raise ConfigError(f"{where}.service_tiers: for OpenAI-compatible kinds (Anthropic's are mapped)")
        if provider.timeout_s <= 0:
            raise ConfigError(f"{where}.timeout_s: must be positive")
        if provider.connect_timeout_s <= 0:
            raise ConfigError(f"{where}.connect_timeout_s: must be positive")
        if len(set(provider.urls)) != len(provider.urls):
            raise ConfigError(f"{where}.base_urls: a replica is listed twice")
        if provider.measure_ttft and provider.kind is ProviderKind.ANTHROPIC:
            raise ConfigError(f"{where}.measure_ttft: supported for OpenAI-compatible kinds only")
        check_capacity(provider.capacity, where)
        _check_batch_execution(provider, where)
        _check_responses_api(provider, where)
    names: set[str] = set()
    for i, model in enumerate(catalog.models):
        where = f"{path}: models[{i}]"
        if model.name in names:
            raise ConfigError(f"{where}.name: duplicate model name {model.name!r}")
        names.add(model.name)
        if not model.deployments:
            raise ConfigError(f"{where}.deployments: a model needs at least one deployment")
        for j, deployment in enumerate(model.deployments):
            if deployment.provider not in seen:
                raise ConfigError(
                    f"{where}.deployments[{j}].provider: unknown provider {deployment.provider!r} "
                    f"(known: {', '.join(sorted(seen))})"
                )
            if deployment.weight <= 0:
                raise ConfigError(f"{where}.deployments[{j}].weight: must be positive")
            _check_price(deployment.price, f"{where}.deployments[{j}].price")
            if deployment.tokenizer is not None and deployment.tokenizer not in TOKENIZERS:
                raise ConfigError(
                    f"{where}.deployments[{j}].tokenizer: must be one of {', '.join(TOKENIZERS)}"
                )
            discount = deployment.batch_discount
            if discount is not None and not (discount.is_finite() and 0 <= discount <= 1):
                raise ConfigError(f"{where}.deployments[{j}].batch_discount: must be between 0 and 1")
    _check_aliases(catalog, path, names)
    _check_tuning(catalog, path)


def _check_price(price: Price, where: str) -> None:
    """Every rate and tier multiplier finite and not negative."""
    multipliers = price.tier_multipliers or TierMultipliers()
    values = {field: getattr(price, field) for field in PRICE_RATES}
    values.update({f"tier_multipliers.{tier}": getattr(multipliers, tier) for tier in PRICED_TIERS})
    for field, value in values.items():
        if value is not None and not value.is_finite():
            raise ConfigError(f"{where}.{field}: must be a finite number")
        if value is not None and value < 0:
            raise ConfigError(f"{where}.{field}: must not be negative")
    for tier in PRICED_TIERS:
        own_input = getattr(price, f"{tier}_input")
        if own_input is None or not price.input or getattr(multipliers, tier) is not None:
            continue  # the cached rates are scaled by the multiplier, or not at all
        own_cached = getattr(price, f"{tier}_cached_input")
        scaled = price.cache_write is not None or (price.cached_input is not None and own_cached is None)
        if scaled and not _finite_decimal(Fraction(own_input) / Fraction(price.input)):
            raise ConfigError(
                f"{where}.{tier}_input: no exact decimal share of input, so the cached rates cannot "
                f"be scaled by it: give {tier}_cached_input (and no cache_write), or tier_multipliers.{tier}"
            )


def _finite_decimal(share: Fraction) -> bool:
    """Whether `share` (a quotient of two configured rates) has a finite decimal expansion."""
    denominator = share.denominator
    for factor in (2, 5):
        while denominator % factor == 0:
            denominator //= factor
    return denominator == 1


def _check_aliases(catalog: Catalog, path: Path, names: set[str]) -> None:
    """Every alias names one model only: not a model's name, not another alias."""
    taken: dict[str, str] = {}
    for i, model in enumerate(catalog.models):
        for j, alias in enumerate(model.aliases):
            where = f"{path}: models[{i}].aliases[{j}]"
            if not alias.strip():
                raise ConfigError(f"{where}: must not be empty")
            if alias in names:
                raise ConfigError(f"{where}: {alias!r} is the name of a model")
            if alias in taken:
                raise ConfigError(f"{where}: {alias!r} is already an alias of {taken[alias]!r}")
            taken[alias] = model.name


TOKENIZERS = ("o200k_base", "cl100k_base", "chars4")  # gateway.jobs.quotes.tokens
BATCH_EXECUTIONS = ("gateway", "provider")
# The provider kinds whose own batch API the gateway can submit a job to (gateway.jobs.provider_batches)
PROVIDER_BATCH_KINDS = (ProviderKind.OPENAI, ProviderKind.AZURE, ProviderKind.ANTHROPIC)


def _check_batch_execution(provider: Provider, where: str) -> None:
    if provider.batch_execution not in BATCH_EXECUTIONS:
        raise ConfigError(f"{where}.batch_execution: must be gateway or provider")
    if provider.batch_execution == "provider" and provider.kind not in PROVIDER_BATCH_KINDS:
        raise ConfigError(
            f"{where}.batch_execution: provider needs a provider of kind openai, azure or anthropic, "
            f"not {provider.kind.value}"
        )


RESPONSES_APIS = ("auto", "native", "chat")
BUILTIN_TOOL_RULES = ("refuse", "drop")
# The provider kinds that may serve the Responses API themselves
NATIVE_RESPONSES_KINDS = (ProviderKind.OPENAI, ProviderKind.AZURE)


def _check_responses_api(provider: Provider, where: str) -> None:
    if provider.responses_api not in RESPONSES_APIS:
        raise ConfigError(f"{where}.responses_api: must be auto, native or chat")
    if provider.responses_builtin_tools not in BUILTIN_TOOL_RULES:
        raise ConfigError(f"{where}.responses_builtin_tools: must be refuse or drop")
    if provider.responses_api == "native" and provider.kind not in NATIVE_RESPONSES_KINDS:
        raise ConfigError(
            f"{where}.responses_api: native needs a provider of kind openai or azure, not "
            f"{provider.kind.value} (its requests to /v1/responses are translated to chat: use auto or chat)"
        )


def _check_tuning(catalog: Catalog, path: Path) -> None:
    check_scheduling(catalog.scheduling, path)
    check_jobs(catalog.jobs, path)
    check_files(catalog.files, path)
    if catalog.retry.max_attempts < 1:
        raise ConfigError(f"{path}: retry.max_attempts: must be at least 1")
    checks = {
        "retry.backoff_base_s": catalog.retry.backoff_base_s >= 0,
        "retry.backoff_max_s": catalog.retry.backoff_max_s >= 0,
        "retry.retry_after_cap_s": catalog.retry.retry_after_cap_s >= 0,
        "circuit.failure_threshold": catalog.circuit.failure_threshold >= 1,
        "circuit.cooldown_s": catalog.circuit.cooldown_s > 0,
        "batches.idle_ttl_s": catalog.batches.idle_ttl_s >= 1,
        "limits.max_body_bytes": catalog.limits.max_body_bytes >= 1024,
        "limits.max_messages": catalog.limits.max_messages >= 1,
        "limits.max_upstream_response_bytes": catalog.limits.max_upstream_response_bytes >= 1024,
        "limits.default_max_tokens": 0 <= catalog.limits.default_max_tokens <= 2**31 - 1,
        "limits.reservation_ttl_s": catalog.limits.reservation_ttl_s >= 1,
        "limits.stream_write_timeout_s": catalog.limits.stream_write_timeout_s > 0,
        "limits.max_streams_per_key": catalog.limits.max_streams_per_key >= 1,
    }
    for key, ok in checks.items():
        if not ok:
            raise ConfigError(f"{path}: {key}: out of range")
    if catalog.limits.buffered_body_bytes < catalog.limits.max_body_bytes:
        raise ConfigError(
            f"{path}: limits.max_buffered_body_bytes: must be at least limits.max_body_bytes, "
            "or no body as large as the cap could ever be read"
        )


def unpriced_deployments(catalog: Catalog) -> list[str]:
    """The deployments (`<provider>/<upstream model>`, as routing names them) whose every rate is
    zero or unset: their tokens are metered at 0 USD, most often because `price` was left out.
    The `mock` kind is left out, since it costs nothing."""
    kinds = {provider.name: provider.kind for provider in catalog.providers}
    unpriced = (
        f"{spec.provider}/{spec.model}"
        for model in catalog.models
        for spec in model.deployments
        if kinds[spec.provider] is not ProviderKind.MOCK and not any(msgspec.structs.astuple(spec.price))
    )
    return list(dict.fromkeys(unpriced))  # one entry when two aliases share a deployment
