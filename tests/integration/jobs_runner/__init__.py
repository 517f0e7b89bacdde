"""The batch job runner against real PostgreSQL."""
