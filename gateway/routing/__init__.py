"""Where a request goes: its directives, the pure route choice, the one batch placement, pins and health."""
