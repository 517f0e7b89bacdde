"""Idempotent retries: a request with an `Idempotency-Key` that its team's gateway already served,
or is serving, gets the first answer again (streams included) and is metered once
(docs/metering.md, "Idempotent retries")."""

from gateway.idempotency.keys import IDEMPOTENCY_HEADER, IdempotentRequest, idempotent_request
from gateway.idempotency.records import Claim, StoredAnswer
from gateway.idempotency.service import IdempotentRequests, open_idempotency
from gateway.idempotency.store import IdempotencyStore, MemoryIdempotencyStore, StoreUnavailable

__all__ = [
    "IDEMPOTENCY_HEADER",
    "Claim",
    "IdempotencyStore",
    "IdempotentRequest",
    "IdempotentRequests",
    "MemoryIdempotencyStore",
    "StoreUnavailable",
    "StoredAnswer",
    "idempotent_request",
    "open_idempotency",
]
