"""A replica's `/metrics` in Prometheus text under vLLM's names, and its `/_sim/stats` ground truth."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from mock_upstream.vllm.engine import Engine

# What vLLM reports of memory it does not simulate: the fraction of GPU memory it was given and
# the KV cache's element type (`auto`: the model's).
GPU_MEMORY_UTILIZATION = 0.9
CACHE_DTYPE = "auto"


def cache_config_labels(engine: Engine) -> dict[str, str]:
    """`vllm:cache_config_info`'s labels: the cache config as strings, as vLLM renders them."""
    config = engine.config
    return {
        "block_size": str(config.block_size),
        "cache_dtype": CACHE_DTYPE,
        "enable_prefix_caching": str(config.share_prefix_blocks),
        "gpu_memory_utilization": str(GPU_MEMORY_UTILIZATION),
        "num_gpu_blocks": str(config.num_gpu_blocks),
    }


class EngineCollector:
    """Reads the engine at each scrape; counters are the engine's stats (reset with them)."""

    def __init__(self, engine: Engine, model: str) -> None:
        self.engine = engine
        self.model = model

    def collect(self) -> Iterator[Any]:
        engine, stats = self.engine, self.engine.stats
        gauges = (
            ("vllm:num_requests_running", "Sequences in the running batch.", len(engine.running)),
            ("vllm:num_requests_waiting", "Sequences waiting to be scheduled.", len(engine.waiting)),
            ("vllm:kv_cache_usage_perc", "KV-cache usage, 1 meaning all blocks used.", engine.kv_cache_usage),
        )
        counters = (
            (
                "vllm:prefix_cache_queries",
                "Prompt tokens looked up in the prefix cache.",
                stats.prefix_cache_queries,
            ),
            ("vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache.", stats.prefix_cache_hits),
            ("vllm:num_preemptions", "Preemptions of running sequences.", stats.preemptions),
            ("vllm:prompt_tokens", "Prompt tokens of the admitted requests.", stats.prompt_tokens),
            ("vllm:generation_tokens", "Generated tokens.", stats.generation_tokens),
        )
        labels = cache_config_labels(engine)
        info = GaugeMetricFamily(
            "vllm:cache_config_info", "Information of the LLMEngine CacheConfig", labels=list(labels)
        )
        info.add_metric(list(labels.values()), 1.0)
        yield info
        for name, documentation, value in gauges:
            gauge = GaugeMetricFamily(name, documentation, labels=["model_name"])
            gauge.add_metric([self.model], value)
            yield gauge
        for name, documentation, value in counters:
            counter = CounterMetricFamily(name, documentation, labels=["model_name"])
            counter.add_metric([self.model], value)
            yield counter


def metrics_registry(engine: Engine, model: str) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EngineCollector(engine, model))
    return registry


def metrics_text(registry: CollectorRegistry) -> bytes:
    return bytes(generate_latest(registry))


def stats_object(engine: Engine) -> dict[str, Any]:
    """The stats with per-second rates over the clock's span from the first request to the last step."""
    stats = engine.stats
    elapsed = 0.0
    if stats.started_at is not None and stats.last_step_at is not None:
        elapsed = max(0.0, stats.last_step_at - stats.started_at)
    return {
        "prefill_tokens": stats.prefill_tokens,
        "generation_tokens": stats.generation_tokens,
        "prompt_tokens": stats.prompt_tokens,
        "prefix_cache_queries": stats.prefix_cache_queries,
        "prefix_cache_hits": stats.prefix_cache_hits,
        "preemptions": stats.preemptions,
        "requests_finished": stats.requests_finished,
        "steps": stats.steps,
        "max_running": stats.max_running,
        "max_waiting": stats.max_waiting,
        "running": len(engine.running),
        "waiting": len(engine.waiting),
        "kv_cache_usage": engine.kv_cache_usage,
        "elapsed_s": elapsed,
        "simulated_s": stats.simulated_seconds,
        "prefill_tokens_per_s": stats.prefill_tokens / elapsed if elapsed else 0.0,
        "generation_tokens_per_s": stats.generation_tokens / elapsed if elapsed else 0.0,
    }
