"""Who the gateway calls: the adapter Protocol every provider kind implements (pure, no I/O), one
folder per kind, and what all of them share: upstream errors, cache hints, the bound on reported counts."""
