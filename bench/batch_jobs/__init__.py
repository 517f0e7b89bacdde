"""`python -m bench.batch_jobs [scenario...]`: the Batch API's jobs (SPEC section 9) run by gateway
processes against a simulated vLLM: exactness through SIGKILLs of the process holding a job,
throughput against the simulator's saturated throughput, and the prefix cache hits of lines that
share a system prompt. Figures are printed, never asserted: each against the target it is meant to
meet."""
