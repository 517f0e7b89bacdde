"""The proxy pipeline: one request parsed, routed, admitted, sent, answered and metered."""
