"""The Redis keys of the limiter: every window and month counter of a team and of its API keys
carries the team's hash tag, so each admission or settle script's keys are in one Cluster slot."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.auth.principal import Principal
from gateway.limits.spend import spend_key, team_tag
from gateway.limits.windows import Window


def window_key(team: str, window: Window) -> str:
    """A window of `team` or of one of its keys, under the team's hash tag (see `team_tag`)."""
    return f"{team_tag(team)}:rate:{window.scope}:{window.owner}:{window.kind}"


def window_keys(principal: Principal, windows: Sequence[Window]) -> list[str]:
    return [window_key(principal.team_id, window) for window in windows]


def spend_keys(principal: Principal, month: str) -> tuple[str, str]:
    """The month counters of the principal's key and team, in that order."""
    team = principal.team_id
    return spend_key("key", principal.key_id, month, team), spend_key("team", team, month)


def held_key(counter: str) -> str:
    return f"{counter}:held"


def holds_key(counter: str) -> str:
    return f"{counter}:holds"


def counter_keys(counter: str) -> list[str]:
    return [counter, held_key(counter), holds_key(counter)]
