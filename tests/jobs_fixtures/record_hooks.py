"""A worker hooks module with ``record_results``: appends each batch to $EMQ_TEST_RECORDS_FILE.

One JSON line per batch, so a test sees both the records and how they were batched.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def record_results(records: list[dict[str, Any]]) -> None:
    path = os.environ.get("EMQ_TEST_RECORDS_FILE")
    if path:
        with Path(path).open("a") as fh:
            fh.write(json.dumps({"pid": os.getpid(), "records": records}) + "\n")


def read_batches(path: Path) -> list[dict[str, Any]]:
    """The batches written so far (each ``{"pid", "records"}``)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def read_records(path: Path) -> list[dict[str, Any]]:
    return [record for batch in read_batches(path) for record in batch["records"]]
