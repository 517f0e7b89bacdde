"""The gateway's own surface under /v1/gateway: a team's live batches and its usage."""
