"""Prometheus instruments: the per-request series, the rare ones, and what a scrape reports across workers."""
