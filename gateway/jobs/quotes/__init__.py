"""Batch quotes: what a batch would cost and how long it would take on each lane the team may use."""
