"""``python -m django_eventmq router|jobmanager``: run a process without a Django project.

Settings come from ``EMQ_*`` environment variables; options override them.
Also the ``django-eventmq`` console script (:func:`main`). Never imports
Django (a job manager's ``--hooks`` module may).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from django_eventmq.cli.options import (
    add_jobmanager_arguments,
    add_publisher_arguments,
    add_router_arguments,
    add_status_arguments,
    add_subscriber_arguments,
    configure_logging,
    settings_from_options,
)
from django_eventmq.errors import ConfigurationError, EventMQError
from django_eventmq.runtime.settings import Settings, from_mapping

ROUTER_HELP = (
    "run the router: clients and job managers connect to it; it queues and routes jobs. "
    "With --journal postgresql://... it is one member of a router --group sharing that "
    "journal: one member serves, the others stand by and take over when it fails "
    "(docs/ha.md)"
)
JOBMANAGER_HELP = (
    "run a job manager: connects to a router and runs the jobs of its queues in a pool "
    "of worker processes"
)
PUBSUB_HELP = (
    "run the publisher: takes PUBLISH messages in and fans them out to subscribers by topic prefix"
)
SUBSCRIBE_HELP = "run a subscriber: runs the @subscriber handlers of the events it receives"
KEYS_HELP = (
    "generate CURVE key pairs: NAME.key and NAME.key_secret files with --dir, else "
    "Z85 keys for EMQ_* variables"
)
STATUS_HELP = (
    "show a running router's queues, job managers and schedulers (its admin address); "
    "--watch refreshes until Ctrl-C"
)
EPILOG = (
    "Settings come from EMQ_* environment variables (EMQ_QUEUES, EMQ_CONCURRENCY, ...); "
    "options override them. In a Django project use 'manage.py emq_router' and "
    "'manage.py emq_jobmanager', which also read settings.EVENTMQ."
)


def _prog() -> str:
    if os.path.basename(sys.argv[0]) == "__main__.py":
        return "python -m django_eventmq"
    return os.path.basename(sys.argv[0]) or "django-eventmq"


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m django_eventmq`` with its subcommands."""
    parser = argparse.ArgumentParser(
        prog=_prog(),
        description="Run django-eventmq processes (eMQP/1.0 over ZeroMQ).",
        epilog=EPILOG,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    router = commands.add_parser(
        "router", help=ROUTER_HELP, description=ROUTER_HELP + ".", epilog=EPILOG
    )
    add_router_arguments(router)
    router.set_defaults(subparser=router)
    jobmanager = commands.add_parser(
        "jobmanager", help=JOBMANAGER_HELP, description=JOBMANAGER_HELP + ".", epilog=EPILOG
    )
    add_jobmanager_arguments(jobmanager)
    jobmanager.set_defaults(subparser=jobmanager)
    pubsub = commands.add_parser(
        "pubsub", help=PUBSUB_HELP, description=PUBSUB_HELP + ".", epilog=EPILOG
    )
    add_publisher_arguments(pubsub)
    pubsub.set_defaults(subparser=pubsub)
    subscribe = commands.add_parser(
        "subscribe", help=SUBSCRIBE_HELP, description=SUBSCRIBE_HELP + ".", epilog=EPILOG
    )
    add_subscriber_arguments(subscribe)
    subscribe.set_defaults(subparser=subscribe)
    keys = commands.add_parser("keys", help=KEYS_HELP, description=KEYS_HELP + ".")
    from django_eventmq.runtime.security import add_keys_arguments

    add_keys_arguments(keys)
    keys.set_defaults(subparser=keys)
    status = commands.add_parser("status", help=STATUS_HELP, description=STATUS_HELP + ".")
    add_status_arguments(status)
    status.set_defaults(subparser=status)
    return parser


def run_router(settings: Settings, *, journal_recover: bool = False) -> int:
    """Run a router until SIGTERM/SIGINT (``journal_recover``: see ``--journal-recover``);
    with a PostgreSQL journal (``JOURNAL_URL``), a member of its router group."""
    from django_eventmq.router.process import router_service

    router_service(settings, journal_recover=journal_recover).run()
    return 0


def run_jobmanager(settings: Settings, hooks: str | None) -> int:
    """Run a job manager until SIGTERM/SIGINT."""
    from django_eventmq.jobmanager.manager import JobManager

    manager = JobManager(settings, hooks=hooks)
    manager.run()
    return 0


def run_pubsub(settings: Settings, hwm: int) -> int:
    """Run the publisher until SIGTERM/SIGINT."""
    from django_eventmq.pubsub.publisher import Publisher

    publisher = Publisher(settings, hwm=hwm)
    publisher.run()
    return 0


def run_subscribe(settings: Settings, modules: Sequence[str]) -> int:
    """Import the handler modules, then run a subscriber consumer until SIGTERM/SIGINT."""
    from django_eventmq.pubsub.api import Consumer, import_subscriber_modules

    import_subscriber_modules(modules)
    consumer = Consumer(settings)
    consumer.run()
    return 0


def run_keys(options: argparse.Namespace, subparser: argparse.ArgumentParser) -> int:
    """Generate key pairs and print what was made (needs no settings)."""
    from django_eventmq.runtime.security import make_keys

    try:
        lines = make_keys(options.names, options.dir, force=options.force)
    except ConfigurationError as exc:
        subparser.error(str(exc))
    print("\n".join(lines))
    return 0


def run_status(options: argparse.Namespace, subparser: argparse.ArgumentParser) -> int:
    """Print the router's status (``--admin``, else EMQ_ADMIN_ADDR, else the default)."""
    from django_eventmq.cli.status_command import run_options

    admin = options.admin
    if not admin:
        try:
            admin = from_mapping().admin_addr
        except ConfigurationError as exc:
            subparser.error(_name_env_var(str(exc)))
    return run_options(vars(options), admin, sys.stdout)


def _name_env_var(message: str) -> str:
    """Say which ``EMQ_*`` variable a settings error came from."""
    key, sep, rest = message.partition(": ")
    if sep and f"EMQ_{key}" in os.environ:
        return f"environment variable EMQ_{key}: {rest}"
    return f"EMQ_* environment variables: {message}"


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen process; returns the exit status."""
    parser = build_parser()
    options = parser.parse_args(argv)
    subparser: argparse.ArgumentParser = options.subparser
    if options.command == "keys":
        return run_keys(options, subparser)
    if options.command == "status":
        return run_status(options, subparser)
    try:
        base = from_mapping()
    except ConfigurationError as exc:
        subparser.error(_name_env_var(str(exc)))
    try:
        settings = settings_from_options(base, options)
    except ConfigurationError as exc:
        subparser.error(str(exc))
    configure_logging(options.log_level)
    try:
        if options.command == "router":
            return run_router(settings, journal_recover=bool(options.journal_recover))
        if options.command == "pubsub":
            return run_pubsub(settings, options.hwm)
        if options.command == "subscribe":
            return run_subscribe(settings, options.subscriber_modules)
        return run_jobmanager(settings, options.hooks)
    except EventMQError as exc:
        # Our errors say what is wrong (a job module that does not import,
        # ...): show that, not a traceback.
        print(f"{parser.prog} {options.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
