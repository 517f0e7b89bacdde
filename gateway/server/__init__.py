"""How `gateway serve` runs: uvicorn and its workers, their event loop and garbage collector."""
