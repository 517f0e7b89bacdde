"""The console's pages: usage, batches and jobs, providers, teams and keys."""
