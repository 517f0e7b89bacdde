"""`python -m bench.usage_scale`: usage reports at 1,000,000 records in PostgreSQL. Loads records
through the gateway's own writer (so the daily totals are built as production builds them), then
times every report query, the usage endpoints and the console's pages, and the writer's rate with
and without the daily totals. Figures are printed, never asserted: each against its target."""
