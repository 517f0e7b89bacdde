"""The Batch API: files, jobs, the runner that feeds them through the scheduler."""
