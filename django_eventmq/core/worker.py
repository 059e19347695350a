"""The worker child: a long-lived process that runs jobs the job manager hands it.

It talks to its job manager over one ``multiprocessing`` pipe with small byte
messages (see :func:`encode_job` and friends) instead of manager proxies: a
job costs one write and one read each way. The child imports job modules once
at start-up; a job that names anything not registered with ``@job`` (or in
``ALLOWED_JOB_MODULES``) is refused and never imported or run.

Pipe messages (parent -> child): ``b"<seq>\\n<job body JSON>"`` to run a job,
``b"exit"`` to finish. Child -> parent: ``b"up"`` once ready, ``b"fail\\n<why>"``
when start-up failed (then it exits), and per job
``b"<seq>\\n<status>\\n<payload JSON>"`` where status is ``ok`` (payload is the
reply ``{"value": ...}``), ``failed`` or ``refused`` (payload describes the
error: ``{"job", "type", "message", "traceback"}``).
"""

from __future__ import annotations

import importlib
import logging
import signal
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from types import ModuleType

from ..errors import InvalidJob, JobNotAllowed, SerializationError
from ..protocol import encode_json, parse_job
from . import registry
from .settings import Settings

logger = logging.getLogger("django_eventmq.worker")

UP = b"up"
FAIL = b"fail"
EXIT = b"exit"

OK = "ok"
FAILED = "failed"
REFUSED = "refused"
STATUSES = frozenset({OK, FAILED, REFUSED})


def _noop() -> None:
    return None


@dataclass(frozen=True, slots=True)
class Hooks:
    """The optional functions of a hooks module (missing ones do nothing)."""

    setup: Callable[[], object] = _noop
    before_job: Callable[[], object] = _noop
    after_job: Callable[[], object] = _noop


def load_hooks(path: str | None) -> Hooks:
    """Import the hooks module at ``path`` and pick up its optional functions."""
    if not path:
        return Hooks()
    module: ModuleType = importlib.import_module(path)
    return Hooks(
        setup=getattr(module, "setup", _noop),
        before_job=getattr(module, "before_job", _noop),
        after_job=getattr(module, "after_job", _noop),
    )


# -- pipe message codec (used by both sides) ----------------------------------
def encode_job(seq: int, body_text: str) -> bytes:
    return b"%d\n%s" % (seq, body_text.encode())


def encode_result(seq: bytes, status: str, payload: str) -> bytes:
    return b"%s\n%s\n%s" % (seq, status.encode(), payload.encode())


def decode_result(data: bytes) -> tuple[int, str, str]:
    """``(seq, status, payload)`` from a child's result message."""
    seq, status, payload = data.split(b"\n", 2)
    return int(seq), status.decode(), payload.decode()


# -- running one job ----------------------------------------------------------
class JobRunner:
    """Runs job bodies: parse, check the registry, call, encode the outcome."""

    def __init__(self, allowed_modules: tuple[str, ...] = (), hooks: Hooks | None = None) -> None:
        self.allowed_modules = allowed_modules
        self.hooks = hooks or Hooks()

    def run(self, body: bytes | str) -> tuple[str, str]:
        """Run one job; returns ``(status, payload JSON)``. Never raises."""
        name = "?"
        try:
            job = parse_job(body)
            name = job.name
            func = registry.resolve(job, self.allowed_modules)
        except (InvalidJob, JobNotAllowed) as exc:
            # Not run: the router's port must not be a remote code execution port.
            return REFUSED, _error_payload(name, exc, with_traceback=False)
        except Exception as exc:  # JobNotFound, or a class constructor that raised
            return FAILED, _error_payload(name, exc)
        try:
            self.hooks.before_job()
            try:
                value = func(*job.args, **job.kwargs)
            finally:
                self.hooks.after_job()
        except BaseException as exc:  # a job's SystemExit must not end the child
            if isinstance(exc, KeyboardInterrupt | GeneratorExit):
                raise
            return FAILED, _error_payload(name, exc)
        try:
            return OK, encode_json({"value": value})
        except SerializationError as exc:
            return FAILED, _error_payload(
                name,
                SerializationError(f"return value of {name} is not JSON-serialisable: {exc}"),
                with_traceback=False,
            )


def _error_payload(name: str, exc: BaseException, *, with_traceback: bool = True) -> str:
    text = "".join(traceback.format_exception(exc)) if with_traceback else ""
    return encode_json(
        {"job": name, "type": type(exc).__name__, "message": str(exc), "traceback": text}
    )


# -- the child process --------------------------------------------------------
def child_main(conn: Connection, settings: Settings, hooks: str | None, log_level: int) -> None:
    """Entry point of a worker child (started with the ``spawn`` method)."""
    # Ctrl-C reaches the whole process group; only the job manager decides.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        loaded = load_hooks(hooks)
        loaded.setup()
        if not logging.getLogger().handlers:
            # Spawned children start with no logging set up; the hooks (Django)
            # may have configured it, otherwise mirror the parent's level.
            logging.basicConfig(
                level=log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
            )
        registry.import_job_modules(settings.job_modules)
    except BaseException as exc:
        conn.send_bytes(FAIL + b"\n" + f"{type(exc).__name__}: {exc}".encode())
        conn.close()
        sys.exit(1)
    runner = JobRunner(settings.allowed_job_modules, loaded)
    conn.send_bytes(UP)
    serve(conn, runner)


def serve(conn: Connection, runner: JobRunner) -> None:
    """Run jobs from ``conn`` until it closes or says exit."""
    recv, send = conn.recv_bytes, conn.send_bytes
    while True:
        try:
            data = recv()
        except (EOFError, OSError):
            break  # the job manager went away
        if data == EXIT:
            break
        seq, _, body = data.partition(b"\n")
        status, payload = runner.run(body)
        try:
            send(encode_result(seq, status, payload))
        except (BrokenPipeError, OSError):
            break
    conn.close()
