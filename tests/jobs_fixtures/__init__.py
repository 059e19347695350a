"""Job modules and helpers that the job manager tests run in real worker processes."""
