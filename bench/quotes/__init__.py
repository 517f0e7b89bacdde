"""Quotes against reality on the simulated vLLM: quote a job, run it, set the measured cost and
duration beside the quote's."""
