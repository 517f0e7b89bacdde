"""`python -m bench.scheduling [scenario...]`: the gateway's scheduling (SPEC section 8) measured
against a simulated vLLM: global caps across processes, a client seeding more work than the KV cache
holds, fairness between teams, priority classes, back-pressure from the server's metrics, prefix
affinity across replicas, and what the scheduler costs per request. Figures are printed, never
asserted: each against the target it is meant to meet."""
