"""`python -m bench.scheduling [scenario...]`: the gateway's scheduling (SPEC section 8) measured
against a simulated vLLM: global caps across processes, a client seeding more work than the KV cache
holds, fairness between teams, priority classes, back-pressure from the server's metrics, prefix
affinity across replicas, what the scheduler costs per request, and goodput: a batch's time through
the gateway against the server alone and the best static client-side cap. Figures are printed, never
asserted: each against the target it is meant to meet."""
