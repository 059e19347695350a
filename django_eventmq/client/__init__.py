"""Sending jobs: ``@job`` and ``.delay()``, the handles it returns, the per-thread
connection to the router and guaranteed bulk sending."""
