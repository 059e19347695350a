"""Digest e-mails started by the Spark pipeline (example_project/pipeline)."""
