"""The one error a bad configuration raises, wherever it is checked (`gateway.catalog`,
`gateway.work_settings`, `gateway.settings`)."""

from __future__ import annotations


class ConfigError(Exception):
    """A bad configuration: the message names the file, the key and the problem."""
