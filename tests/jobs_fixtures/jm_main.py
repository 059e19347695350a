"""Run a job manager in this process: ``python -m tests.jobs_fixtures.jm_main SETTINGS_JSON``.

Stands in for ``python -m django_eventmq jobmanager`` in the job manager tests.
"""

from __future__ import annotations

import json
import logging
import sys

from django_eventmq.jobmanager.manager import JobManager
from django_eventmq.runtime.settings import from_mapping


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    options = json.loads(argv[0])
    hooks = options.pop("hooks", None)
    JobManager(from_mapping(options, environ={}), hooks=hooks).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
