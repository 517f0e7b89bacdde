"""The `anthropic-beta` header a Messages request carries to an Anthropic provider.

Clients such as Claude Code name the beta features their request relies on (`context-management-...`,
`advanced-tool-use-...`); an Anthropic upstream refuses or ignores a beta-only field without its beta,
so the client's values are forwarded, after the provider's own (an `anthropic-beta` in its catalog
`headers`). A provider's `anthropic_betas` may restrict them to an allow-list (an empty one: none).
The header goes to Anthropic upstreams only: a translated request has no use for it.
"""

from __future__ import annotations

import re

from gateway.settings import Provider

BETA_HEADER = "anthropic-beta"
_BETA_NAME = re.compile(r"[A-Za-z0-9._-]{1,128}")  # what Anthropic's beta names are made of


def beta_names(value: str | None) -> list[str]:
    """The names in a comma-separated `anthropic-beta` value; anything else is left out."""
    names = (name.strip() for name in (value or "").split(","))
    return [name for name in names if _BETA_NAME.fullmatch(name)]


def with_betas(headers: dict[str, str], client_betas: str | None, provider: Provider) -> dict[str, str]:
    """`headers` (the provider's request headers) with the one `anthropic-beta` header that merges
    the provider's own betas with the client's it allows, each named once."""
    own = [value for name, value in headers.items() if name.lower() == BETA_HEADER]
    merged = [name for value in own for name in beta_names(value)]
    allowed = provider.anthropic_betas
    merged += [name for name in beta_names(client_betas) if allowed is None or name in allowed]
    result = {name: value for name, value in headers.items() if name.lower() != BETA_HEADER}
    if merged:
        result[BETA_HEADER] = ",".join(dict.fromkeys(merged))
    return result
