"""Stored Responses: what `store: true` keeps for a team, on every provider, and how a
`previous_response_id` continues it (passed through to an upstream that stores it, rebuilt for
any other). See docs/responses.md, "Stored responses"."""
