"""Reconciliation with the providers' own bills: each day, per model and service tier, the tokens
and cost a provider's usage and cost reports give (`reports`), beside the gateway's usage records
(`records`), compared (`comparison`), stored, logged past a threshold and shown in the console and
/metrics; run daily by one process at a time and by `gateway usage reconcile` (`daily`)."""
