"""Celery 5's side of the durable benchmark (``benchmarks/durable_peers.py``).

RabbitMQ at ``EMQ_BENCH_AMQP_URL`` (a vhost the benchmark makes and removes),
durable queue and persistent messages (Celery's defaults), publisher confirms
(each ``.delay()`` returns once RabbitMQ has stored the message) and acks
after the task (``task_acks_late``). No result backend: the job says it ran
over UDP (``benchmarks._udp``), as every system's does.
"""

from __future__ import annotations

import os

from celery import Celery
from kombu import pools

from benchmarks._udp import send_done

app = Celery("emq_bench", broker=os.environ.get("EMQ_BENCH_AMQP_URL", "amqp://"))
app.conf.update(
    task_acks_late=True,
    broker_transport_options={"confirm_publish": True},
    task_ignore_result=True,
    task_default_queue="emq-bench-celery",
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


def connect(url: str) -> None:
    """Send to ``url`` from now on (a new vhost: the pools of the last one are closed)."""
    pools.reset()
    app._pool = None
    app.amqp._producer_pool = None
    app.conf.broker_url = url


@app.task
def done(port: int) -> None:
    """Do nothing, then say so to the benchmark."""
    send_done(port)
