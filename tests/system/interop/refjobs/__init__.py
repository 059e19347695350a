"""Job modules that both our job manager and the reference one import in interop tests."""
