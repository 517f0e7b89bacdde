"""Real clients (Claude Code, Codex...) run against the gateway, installed from npm by the tests
themselves (tests/support/npm_clients.py)."""
