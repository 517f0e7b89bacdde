"""Pure parts of the batch job runner."""
