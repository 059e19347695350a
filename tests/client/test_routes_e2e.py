"""``ROUTES`` end to end: a real router and job manager serving several queues; a
job whose ``@job`` names no queue goes where the first matching glob says, in the
order written, else to ``default``; ``@job(queue=)`` and ``.send(queue=)`` win."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from django_eventmq.errors import ConfigurationError
from django_eventmq.runtime.routes import route
from django_eventmq.runtime.settings import from_mapping
from tests.jobs_fixtures import routed_jobs
from tests.jobs_fixtures.limits_stack import router_and_jobmanager

M = routed_jobs.MODULE
ROUTES = {
    f"{M}.send_*": "email",  # first: send_pinned would match, but it names its queue
    f"{M}.*": "billing",
    f"{M}.tidy": "never",  # after a broader match: never reached
}


@pytest.fixture(scope="module")
def frontend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    journal = tmp_path_factory.mktemp("routes-e2e") / "journal.sqlite3"
    queues = ("--queues", "email:10,billing:10,pinned:10,default:10,never:10")
    with router_and_jobmanager(journal, 2, module=M, extra=queues) as (front, _router):
        yield front


def test_routes_pick_the_queue_of_jobs_that_name_none(eventmq_settings: Any, frontend: str) -> None:
    eventmq_settings(BROKER_ADDR=frontend, ACK_TIMEOUT=5, ROUTES=ROUTES)
    assert routed_jobs.send_welcome.queue == "email"
    ran = {
        "send_welcome": [routed_jobs.send_welcome.delay() for _ in range(3)],
        "charge": [routed_jobs.charge.delay() for _ in range(3)],
        "tidy": [routed_jobs.tidy.delay()],
        "send_pinned": [routed_jobs.send_pinned.delay()],
        "sent to default": [routed_jobs.charge.send(queue="default")],
    }
    assert {name: [h.wait(timeout=60) for h in handles] for name, handles in ran.items()} == {
        "send_welcome": ["email"] * 3,
        "charge": ["billing"] * 3,
        "tidy": ["billing"],
        "send_pinned": ["pinned"],
        "sent to default": ["default"],
    }


def test_without_routes_a_job_goes_to_default(eventmq_settings: Any, frontend: str) -> None:
    eventmq_settings(BROKER_ADDR=frontend, ACK_TIMEOUT=5)
    assert routed_jobs.charge.delay().wait(timeout=60) == "default"
    # The routes are read again when the settings change (override_settings, a test).
    eventmq_settings(BROKER_ADDR=frontend, ACK_TIMEOUT=5, ROUTES={f"{M}.charge": "billing"})
    assert routed_jobs.charge.delay().wait(timeout=60) == "billing"


def test_the_first_matching_glob_wins_in_the_order_written() -> None:
    routes = from_mapping({"ROUTES": ROUTES}, environ={}).routes
    assert route(f"{M}.send_x", routes) == "email"
    assert route(f"{M}.tidy", routes) == "billing"
    assert route("other.jobs.tidy", routes) is None
    assert route("Billing.jobs.x", (("billing.*", "b"),)) is None  # case counts


def test_routes_come_from_the_environment_as_json() -> None:
    env = {"EMQ_ROUTES": '{"billing.jobs.*": "billing", "app.jobs.send_*": "email"}'}
    assert from_mapping({}, environ=env).routes == (
        ("billing.jobs.*", "billing"),
        ("app.jobs.send_*", "email"),
    )


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({"billing.*": "no spaces"}, "is not a queue name"),
        ({"": "billing"}, "is not a job name glob"),
        (["billing.*"], "is not (job name glob, queue name)"),
        ("{not json", "expected a JSON object"),
        (42, "expected a dict of job name globs"),
    ],
)
def test_a_bad_routes_value_says_what_is_wrong(value: object, says: str) -> None:
    with pytest.raises(ConfigurationError, match="ROUTES") as caught:
        from_mapping({"ROUTES": value}, environ={})
    assert says in str(caught.value)
