# The two commands of the README: `make demo` and `make test`.
.PHONY: demo test unit venv bench lint pipeline

# The web server's port: make demo PORT=8017 when 8000 is taken.
PORT ?= 8000

demo:
	scripts/demo.sh --port $(PORT)

test:
	scripts/test.sh

# The fast tests: everything that starts no process (tests/process_marks.py).
# make unit TESTS=tests/router for one folder.
TESTS ?= tests
unit: venv
	.venv/bin/python -m pytest -n 3 --dist loadgroup -m "not process" -q $(TESTS)

# .venv with the test and lint tools (make demo installs only what the site runs).
venv:
	scripts/setup-venv.sh

lint: venv
	.venv/bin/ruff check django_eventmq tests benchmarks example_project
	.venv/bin/mypy

bench: venv
	.venv/bin/python benchmarks/throughput.py

# The example Spark pipeline end to end (events, PySpark digests, send_digest jobs).
pipeline: venv
	.venv/bin/python -m example_project.pipeline.demo
