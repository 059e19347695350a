"""Dramatiq's side of the durable benchmark (``benchmarks/durable_peers.py``).

RabbitMQ at ``EMQ_BENCH_AMQP_URL`` (a vhost the benchmark makes and removes):
Dramatiq declares durable queues and sends persistent messages; with
``confirm_delivery`` each ``.send()`` returns once RabbitMQ has stored the
message, and its workers ack a message after the actor ran. The job says it
ran over UDP (``benchmarks._udp``), as every system's does.
"""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker

from benchmarks._udp import send_done

broker = RabbitmqBroker(
    url=os.environ.get("EMQ_BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"),
    confirm_delivery=True,
)
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="emq-bench-dramatiq", max_retries=0)
def done(port: int) -> None:
    """Do nothing, then say so to the benchmark."""
    send_done(port)


def connect(url: str) -> None:
    """Send to ``url`` from now on (a new vhost: the last broker's connections are closed)."""
    global broker
    broker.close()
    broker = RabbitmqBroker(url=url, confirm_delivery=True)
    dramatiq.set_broker(broker)
    done.broker = broker
    broker.declare_actor(done)
