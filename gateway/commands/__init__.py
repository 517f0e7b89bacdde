"""Subcommands of the `gateway` CLI that work directly on the database (teams, keys)."""
