"""One status vocabulary (protocol/status.py): every status the code produces is in it.

The sources of truth are read from the code itself: the statuses the job
manager reports (its ``_report`` calls), what a worker child writes on its
pipe, what the outcome records say (``_record``/``_add_record``), every
``stats.finish`` bucket anywhere in the package, and the results table's
choices in the model and in its migrations. A status written as a new
string (or as anything the check cannot trace to the enum) fails here.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import cast

import pytest

import django_eventmq
from django_eventmq.errors import ProtocolError
from django_eventmq.protocol.codec import decode, encode
from django_eventmq.protocol.extensions import Done
from django_eventmq.protocol.status import (
    CHILD_STATUSES,
    DONE_STATUSES,
    FAILED_OUTCOMES,
    FINISHED,
    NOT_RUN,
    RECORD_STATUSES,
    RESULT_OF,
    RESULT_STATUSES,
    JobStatus,
)

PACKAGE = Path(django_eventmq.__file__).resolve().parent

#: Stands for a value the function got from its caller: checked where it was made.
PASSED_IN = frozenset[str]()


class Untraceable(AssertionError):
    pass


def module_of(path: Path) -> ModuleType:
    dotted = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return importlib.import_module(dotted)


def functions(tree: ast.AST) -> Iterator[ast.FunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            yield node


def own_nodes(function: ast.FunctionDef) -> Iterator[ast.AST]:
    """The nodes of ``function``'s body, not those of functions nested in it."""
    todo: list[ast.AST] = list(function.body)
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            todo.extend(ast.iter_child_nodes(node))


def unpacked_names(function: ast.FunctionDef) -> set[str]:
    """Names bound by unpacking or a loop: values made elsewhere (checked there)."""
    names: set[str] = set()
    for node in own_nodes(function):
        targets: list[ast.expr] = []
        if isinstance(node, ast.For):
            targets = [node.target]
        elif isinstance(node, ast.Assign):
            targets = [t for t in node.targets if isinstance(t, ast.Tuple)]
        for target in targets:
            names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def values_of(node: ast.expr, function: ast.FunctionDef, module: ModuleType) -> frozenset[str]:
    """Every string ``node`` can be, traced to literals or to module-level names."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return frozenset({node.value})
    if isinstance(node, ast.IfExp):
        return values_of(node.body, function, module) | values_of(node.orelse, function, module)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        owner = getattr(module, node.value.id, None)
        if owner is not None and hasattr(owner, node.attr):
            return frozenset({str(getattr(owner, node.attr))})
        return PASSED_IN  # an attribute of a local object (an item it was handed)
    if isinstance(node, ast.Name):
        params = {arg.arg for arg in function.args.args + function.args.kwonlyargs}
        if node.id in params or node.id in unpacked_names(function):
            return PASSED_IN
        assigned = [
            stmt.value
            for stmt in own_nodes(function)
            if isinstance(stmt, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == node.id for t in stmt.targets)
        ]
        if assigned:
            return frozenset().union(*(values_of(v, function, module) for v in assigned))
        if hasattr(module, node.id):
            return frozenset({str(getattr(module, node.id))})
    raise Untraceable(f"{module.__name__}: cannot tell what {ast.unparse(node)!r} is")


def call_name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        owner = ast.unparse(func.value)
        return f"{owner.rsplit('.', 1)[-1]}.{func.attr}"
    return ast.unparse(func)


def status_arguments(
    paths: list[Path], calls: dict[str, int | str]
) -> Iterator[tuple[str, frozenset[str]]]:
    """``(where, values)`` of the status argument of each call named in ``calls``
    (name -> position, or keyword) in the modules at ``paths``."""
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for function in functions(tree):
            for call in own_nodes(function):
                if not isinstance(call, ast.Call) or call_name(call) not in calls:
                    continue
                where = calls[call_name(call)]
                if isinstance(where, int):
                    arg = call.args[where] if len(call.args) > where else None
                else:
                    arg = next((k.value for k in call.keywords if k.arg == where), None)
                if arg is not None:
                    site = f"{path.name}:{call.lineno} {call_name(call)}"
                    # Imported only now: a module with no such call is not loaded.
                    yield site, values_of(arg, function, module_of(path))


def unknown(sites: Iterator[tuple[str, frozenset[str]]], allowed: frozenset[str]) -> list[str]:
    seen = list(sites)
    assert seen, "no call found: the check reads the wrong code"
    return [f"{site}: {sorted(values - allowed)}" for site, values in seen if values - allowed]


def package_modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "migrations" not in p.parts)


# -- the sources of truth --------------------------------------------------------
def test_every_status_the_job_manager_reports_is_a_done_status() -> None:
    paths = sorted((PACKAGE / "jobmanager").glob("*.py"))
    calls: dict[str, int | str] = {"self._report": 1, "report": 1}
    assert unknown(status_arguments(paths, calls), frozenset(map(str, DONE_STATUSES))) == []


def test_every_status_a_worker_child_writes_is_a_child_status() -> None:
    path = PACKAGE / "jobmanager" / "job_runner.py"
    module = module_of(path)
    allowed = frozenset(map(str, CHILD_STATUSES))
    process = PACKAGE / "jobmanager" / "worker_process.py"
    sites = list(status_arguments([process, path], {"encode_result": 1}))
    # JobRunner.run and run_async return a status themselves or what the helpers that
    # prepare, call and settle a job return (_prepare's _Prepared is no status).
    followed = {"run", "_run", "run_async", "_run_async", "_prepare", "_failure", "_success"}
    methods = {
        f.name: f
        for f in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef) and f.name in followed
    }
    assert set(methods) == followed
    callees = {*followed, *(f"self.{name}" for name in followed), "_Prepared"}
    for runner in methods.values():
        returns = [
            n.value.value if isinstance(n.value, ast.Await) else n.value
            for n in ast.walk(runner)
            if isinstance(n, ast.Return) and n.value
        ]
        # A name returned is what _prepare said (its refusal or failure).
        bound = {
            target.id
            for n in ast.walk(runner)
            if isinstance(n, ast.Assign)
            and isinstance(n.value, ast.Call)
            and ast.unparse(n.value.func) in callees
            for target in n.targets
            if isinstance(target, ast.Name)
        }
        delegated = [r for r in returns if not isinstance(r, ast.Tuple)]
        assert returns and all(
            (isinstance(r, ast.Call) and ast.unparse(r.func) in callees)
            or (isinstance(r, ast.Name) and r.id in bound)
            for r in delegated
        ), [ast.unparse(r) for r in delegated]
        sites += [
            (
                f"job_runner.py:{r.lineno} return",
                values_of(r.elts[0], cast(ast.FunctionDef, runner), module),
            )
            for r in returns
            if isinstance(r, ast.Tuple)
        ]
    assert unknown(iter(sites), allowed) == []


def test_every_outcome_record_status_is_a_record_status() -> None:
    paths = sorted((PACKAGE / "jobmanager").glob("*.py"))
    calls: dict[str, int | str] = {
        "self._record": 1,
        "self._add_record": 1,
        "recorder.add": "status",
    }
    assert unknown(status_arguments(paths, calls), frozenset(map(str, RECORD_STATUSES))) == []


def test_every_stats_bucket_anywhere_is_a_done_status() -> None:
    calls: dict[str, int | str] = {"stats.finish": 1}
    sites = status_arguments(package_modules(), calls)
    assert unknown(sites, frozenset(map(str, DONE_STATUSES | {JobStatus.UNKNOWN}))) == []


def test_the_results_table_stores_exactly_the_job_statuses() -> None:
    from django.db.migrations.loader import MigrationLoader

    from django_eventmq.models.results import JobResult

    words = {status.value for status in RESULT_STATUSES}
    choices = JobResult._meta.get_field("status").choices
    assert choices is not None
    assert {value for value, _ in choices} == words
    # What the migrations made: existing rows keep their words and labels.
    state = MigrationLoader(None, ignore_no_migrations=True).project_state()
    migrated = state.models[("django_eventmq", "jobresult")].fields["status"].choices
    assert list(migrated) == list(choices)


def test_records_in_either_vocabulary_map_onto_a_row_status() -> None:
    from django_eventmq import result_recording

    aliases = result_recording._STATUS_ALIASES
    assert set(aliases) == set(map(str, DONE_STATUSES)) | set(map(str, RESULT_STATUSES))
    assert set(aliases.values()) <= set(map(str, RESULT_STATUSES))


# -- the enums and their sets ------------------------------------------------------
def test_the_wire_words_of_done_do_not_change() -> None:
    # Routers already deployed read these words in a DONE: never rename one.
    assert {str(s) for s in DONE_STATUSES} == {
        "ok",
        "failed",
        "timeout",
        "refused",
        "cancelled",
        "died",
        "retry",
    }
    assert JobStatus.UNKNOWN not in DONE_STATUSES  # a stats bucket, never sent


@pytest.mark.parametrize("status", sorted(DONE_STATUSES))
def test_a_done_carries_its_status_as_the_plain_word(status: JobStatus) -> None:
    done = Done(msgid="m", job_msgid="j", status=status, payload="{}")
    frames = encode(done)
    assert frames[-3:] == [b"j", status.value.encode(), b"{}"]
    read = decode(frames)
    assert isinstance(read, Done) and read.status == status
    assert f"{status}" == status.value  # logs and metric labels say the word


def test_a_done_with_a_status_outside_the_enum_is_refused() -> None:
    with pytest.raises(ProtocolError, match="status must be one of"):
        Done(msgid="m", job_msgid="j", status="succeeded", payload="{}")
    with pytest.raises(ProtocolError):
        Done(msgid="m", job_msgid="j", status=JobStatus.UNKNOWN, payload="{}")


def test_the_helper_sets_are_subsets_of_their_enum() -> None:
    assert CHILD_STATUSES <= DONE_STATUSES
    assert NOT_RUN <= CHILD_STATUSES
    assert FAILED_OUTCOMES <= DONE_STATUSES and JobStatus.OK not in FAILED_OUTCOMES
    assert FINISHED <= RECORD_STATUSES and JobStatus.QUEUED not in RECORD_STATUSES
    assert JobStatus.RUNNING not in FINISHED and JobStatus.RETRYING not in FINISHED
    assert set(RESULT_OF) == DONE_STATUSES
    assert {RESULT_OF[s] for s in FAILED_OUTCOMES} == {JobStatus.FAILED, JobStatus.TIMED_OUT}


def test_the_check_cannot_be_fooled_by_an_untraceable_status() -> None:
    source = "def f(job):\n    self._report(job, make_status(), '')\n"
    function = next(functions(ast.parse(source)))
    call = next(n for n in ast.walk(function) if isinstance(n, ast.Call))
    with pytest.raises(Untraceable):
        values_of(call.args[1], function, module_of(PACKAGE / "protocol" / "status.py"))
