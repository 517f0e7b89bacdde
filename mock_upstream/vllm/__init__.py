"""A simulated vLLM for `gateway mock-upstream --engine vllm`: a continuous-batching engine over a
paged KV cache with a prefix cache, time-scaled and deterministic, served with vLLM's metrics."""
