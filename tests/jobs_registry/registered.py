"""Job module for registry tests: one @job, one plain function, one class."""

from django_eventmq import job


@job(queue="email")
def greet(name):
    return f"hello {name}"


def not_a_job():
    return "should never run from the wire"
