"""How a setting's value is read and checked: the parsers that turn a value (possibly
``EMQ_*`` text) into its type, and the checks :class:`.settings.Settings` runs, each
raising a :class:`ConfigurationError` that says how to fix it.

settings.py imports this module, so it names ``Settings`` for typing only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django_eventmq.errors import ConfigurationError, ProtocolError
from django_eventmq.protocol import constants as C
from django_eventmq.protocol.headers import parse_rate
from django_eventmq.runtime.addresses import parse_groups

if TYPE_CHECKING:
    from django_eventmq.runtime.settings import Settings

QueueList = tuple[tuple[int, str], ...]

_ADDRESS = re.compile(
    r"^(tcp://[^\s:]+:(\d+|\*)|tcp://\[[0-9a-fA-F:.]+\]:(\d+|\*)|ipc://\S+|inproc://\S+)$"
)
_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
_GROUP_NAME = re.compile(r"^[a-z0-9_]{1,40}$")
#: What a JOURNAL_URL starts with (libpq URLs).
JOURNAL_URL_SCHEMES = ("postgresql://", "postgres://")


def check_address(name: str, value: object) -> None:
    """Raise :class:`ConfigurationError` unless ``value`` is a ZeroMQ endpoint."""
    if not isinstance(value, str) or not _ADDRESS.match(value):
        raise ConfigurationError(
            f"{name.upper()}: {value!r} is not a ZeroMQ address; "
            "use e.g. 'tcp://127.0.0.1:47291' or 'ipc:///run/eventmq.sock'"
        )


def check_peer_addresses(name: str, value: object) -> None:
    """One address (:func:`check_address`), or router groups: ``","`` between a
    group's members, ``";"`` between groups (:func:`.addresses.parse_groups`)."""
    if isinstance(value, str) and ("," in value or ";" in value):
        parse_groups(value, name.upper())
    else:
        check_address(name, value)


def _check_status_admin_addrs(value: object) -> None:
    """STATUS_ADMIN_ADDRS: empty, or router groups as peers' router lists are written."""
    if not isinstance(value, str):
        raise ConfigurationError(
            f"STATUS_ADMIN_ADDRS: expected the routers' admin addresses as one string, ',' "
            f"between the members of a router group and ';' between groups, e.g. "
            f"'tcp://a:47293,tcp://b:47293;tcp://c:47293'; got {value!r}"
        )
    if value:
        parse_groups(value, "STATUS_ADMIN_ADDRS")


def _check_group(s: Settings) -> None:
    """JOURNAL_URL, GROUP and LEASE_SECONDS (a router group, docs/ha.md)."""
    if not isinstance(s.journal_url, str) or (
        s.journal_url and not s.journal_url.startswith(JOURNAL_URL_SCHEMES)
    ):
        raise ConfigurationError(
            f"JOURNAL_URL: expected a PostgreSQL URL such as "
            f"'postgresql://eventmq@db.example:5432/eventmq' (under manage.py also the name "
            f"of a PostgreSQL entry of DATABASES), or '' for the SQLite journal; "
            f"got {s.journal_url!r}"
        )
    if not isinstance(s.group, str) or not _GROUP_NAME.match(s.group):
        raise ConfigurationError(
            f"GROUP: {s.group!r} is not a group name: use 1 to 40 lower-case letters, digits "
            "and '_', e.g. 'default' or 'eu_west'"
        )
    _positive("lease_seconds", s.lease_seconds)
    if s.journal_url and s.lease_seconds <= s.heartbeat_interval:
        raise ConfigurationError(
            f"LEASE_SECONDS ({s.lease_seconds:g}) must be longer than HEARTBEAT_INTERVAL "
            f"({s.heartbeat_interval:g}): standbys look for a lapsed lease once a heartbeat, "
            f"so a shorter lease could lapse unseen; set LEASE_SECONDS to at least "
            f"{max(2 * s.heartbeat_interval, 1):g} or lower HEARTBEAT_INTERVAL"
        )


def parse_autoscale(value: object) -> tuple[int, int] | None:
    """``"MIN,MAX"`` (``1 <= MIN <= MAX``) as two whole numbers; ``""``: None (no autoscaling)."""
    if value == "":
        return None
    how = "expected 'MIN,MAX' worker processes with 1 <= MIN <= MAX, e.g. '2,8'"
    if not isinstance(value, str):
        raise ConfigurationError(f"AUTOSCALE: {how}, got {value!r}")
    low, sep, high = value.partition(",")
    try:
        bounds = (int(low), int(high))
    except ValueError:
        raise ConfigurationError(f"AUTOSCALE: {how}, got {value!r}") from None
    if not sep or bounds[0] < 1 or bounds[0] > bounds[1]:
        raise ConfigurationError(f"AUTOSCALE: {how}, got {value!r}")
    return bounds


def _positive(name: str, value: object, *, whole: bool = False, allow_zero: bool = False) -> None:
    ok = (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and (isinstance(value, int) or not whole)
        and (value > 0 or (allow_zero and value == 0))
    )
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        kind = "a whole number" if whole else "a number"
        raise ConfigurationError(f"{name.upper()}: expected {kind} {bound}, got {value!r}")


#: How a queue list is written, for the errors that refuse one.
QUEUES_FORMAT = "write queues as 'name:weight,name:weight', e.g. 'email:30,default:10'"


def _queue_text(item: str) -> tuple[str, str, str]:
    """``name``, ``:``, ``weight`` of one ``name:weight`` entry, refusing the two
    misreadings of a weight: 'email 30' (a space) and 'email,30' (a name of digits)."""
    if any(c.isspace() for c in item):
        raise ConfigurationError(f"QUEUES: {item!r} holds a space: {QUEUES_FORMAT}")
    name, sep, weight = item.partition(":")
    if name.isdigit():
        raise ConfigurationError(f"QUEUES: {name!r} is a number, not a queue name: {QUEUES_FORMAT}")
    return name, sep, weight


def parse_queues(value: object) -> QueueList:
    """Parse a queue list: ``"email:30,default:10"``, ``["email", "default"]`` or
    ``[(30, "email"), ...]`` / ``[["email", 30], ...]``. A name without a weight
    gets the default weight. Spaces only around the commas."""
    items: list[Any]
    if isinstance(value, str):
        items = [part.strip() for part in value.split(",") if part.strip()]
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        raise ConfigurationError(f"QUEUES: expected 'name:weight,...' or a list, got {value!r}")
    queues: list[tuple[int, str]] = []
    for item in items:
        if isinstance(item, str):
            name, sep, weight_text = _queue_text(item)
            try:
                weight = int(weight_text) if sep else C.DEFAULT_QUEUE_WEIGHT
            except ValueError:
                raise ConfigurationError(
                    f"QUEUES: weight of {name!r} must be a whole number, got {weight_text!r}"
                ) from None
        elif isinstance(item, list | tuple) and len(item) == 2:
            a, b = item
            weight, name = (a, b) if isinstance(a, int) else (b, a)
            if not isinstance(weight, int) or not isinstance(name, str):
                raise ConfigurationError(f"QUEUES: entry {item!r} is not (weight, name)")
        else:
            raise ConfigurationError(
                f"QUEUES: entry {item!r} is not 'name:weight' or (weight, name)"
            )
        if weight < 0:
            raise ConfigurationError(f"QUEUES: weight of {name!r} must be >= 0, got {weight}")
        queues.append((weight, name))
    names = [name for _, name in queues]
    if len(set(names)) != len(names):
        raise ConfigurationError(f"QUEUES: a queue is named twice in {names}")
    return tuple(queues)


#: A number setting's type (as annotated: a name or the type) -> how a string
#: becomes one, and what the error says was expected.
_NUMBERS: dict[Any, tuple[Callable[[str], float], str]] = {
    "int": (int, "a whole number"),
    int: (int, "a whole number"),
    "float": (float, "a number"),
    float: (float, "a number"),
}


def parse_expires(key: str, value: object) -> object:
    """Seconds from a number, its text or a timedelta; None, "" or "none" turn it off (0)."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "off")):
        return 0.0
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            raise ConfigurationError(f"{key}: {EXPIRES_EXPECTED}, got {value!r}") from None
    return value  # a number is checked with the others (a negative one is refused)


#: What RESULT_EXPIRES takes, for its errors.
EXPIRES_EXPECTED = "expected seconds, a number >= 0 (0 or None: results never expire)"


def check_expires(value: object) -> None:
    """Refuse a RESULT_EXPIRES that is not a number of seconds >= 0."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigurationError(f"RESULT_EXPIRES: {EXPIRES_EXPECTED}, got {value!r}")


def _coerce(field_name: str, kind: Any, value: Any) -> Any:
    """Turn a setting's value (possibly text from the environment) into its type."""
    key = field_name.upper()
    if field_name in _SECURITY_PARSERS:
        return _SECURITY_PARSERS[field_name](key, value)
    if field_name == "queues":
        return parse_queues(value)
    if field_name == "result_expires":
        return parse_expires(key, value)
    if kind in ("bool", bool):
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off", ""):
            return False
        raise ConfigurationError(f"{key}: expected true or false, got {value!r}")
    number = _NUMBERS.get(kind)
    if number is not None:
        if isinstance(value, str):
            convert, expected = number
            try:
                return convert(value)
            except ValueError:
                raise ConfigurationError(f"{key}: expected {expected}, got {value!r}") from None
        return value
    if kind in ("tuple[str, ...]",):
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise ConfigurationError(f"{key}: expected a list of module names, got {value!r}")
    return value


def _check_security(s: Settings) -> None:
    """Shape checks of the security settings (keys are loaded by runtime/security.py)."""
    for name in ("max_message_bytes", "max_body_bytes", "max_json_depth", "max_timeout"):
        _positive(name, getattr(s, name), whole=True)
    _positive("max_retry_count", s.max_retry_count, whole=True, allow_zero=True)
    if s.cancel_policy not in ("owner", "any"):
        raise ConfigurationError(
            f"CANCEL_POLICY: expected 'owner' or 'any', got {s.cancel_policy!r}"
        )
    if type(s.max_frames) is not int or s.max_frames < 10:
        raise ConfigurationError(
            f"MAX_FRAMES: expected a whole number >= 10 (eMQP needs up to 10), got {s.max_frames!r}"
        )
    if s.max_body_bytes > s.max_message_bytes:
        raise ConfigurationError(
            f"MAX_BODY_BYTES ({s.max_body_bytes}) must not exceed MAX_MESSAGE_BYTES "
            f"({s.max_message_bytes}): a body that big would cost its sender the connection"
        )
    if s.curve_client_public_key and not s.curve_client_secret_key:
        raise ConfigurationError(
            "CURVE_CLIENT_PUBLIC_KEY is set but CURVE_CLIENT_SECRET_KEY is not: "
            "a client needs its secret key too"
        )
    if s.curve_admin_secret_key and not (s.curve_server_public_key or s.curve_server_secret_key):
        raise ConfigurationError(
            "CURVE_ADMIN_SECRET_KEY is set but CURVE_SERVER_PUBLIC_KEY is not: admin tools "
            "need the router's public key too"
        )
    if not isinstance(s.queue_allowed_jobs, tuple):
        raise ConfigurationError(
            "QUEUE_ALLOWED_JOBS: pass it through from_mapping()/replace(), which accept a mapping"
        )
    for queue, jobs in s.queue_allowed_jobs:
        if queue != "*" and not _QUEUE_NAME.match(queue):
            raise ConfigurationError(f"QUEUE_ALLOWED_JOBS: {queue!r} is not a queue name")
        for name in jobs:
            if not isinstance(name, str) or not name:
                raise ConfigurationError(
                    f"QUEUE_ALLOWED_JOBS[{queue!r}]: expected job names, got {name!r}"
                )


def parse_rate_limits(value: object) -> tuple[tuple[str, str], ...]:
    """``RATE_LIMITS``: ``{"queue": "N/unit"}``, ``(queue, rate)`` pairs, ``"queue=rate"``
    items, or text ``"email=100/m,sms=5/s"``; checked, each rate in its canonical form
    (a queue named twice: the last wins)."""
    if isinstance(value, str):
        value = [part for part in value.replace(" ", "").split(",") if part]
    if isinstance(value, Mapping):
        value = list(value.items())
    if not isinstance(value, list | tuple):
        raise ConfigurationError(
            f'RATE_LIMITS: expected a mapping such as {{"email": "100/m"}}, got {value!r}'
        )
    found: dict[str, str] = {}
    for item in value:
        if isinstance(item, str):
            queue, sep, rate = item.partition("=")
            if not sep:
                raise ConfigurationError(
                    f"RATE_LIMITS: {item!r} is not 'queue=rate', e.g. 'email=100/m'"
                )
        elif isinstance(item, list | tuple) and len(item) == 2:
            queue, rate = item
        else:
            raise ConfigurationError(f"RATE_LIMITS: entry {item!r} is not (queue, rate)")
        if not isinstance(queue, str) or not _QUEUE_NAME.match(queue):
            raise ConfigurationError(f"RATE_LIMITS: {queue!r} is not a queue name")
        try:
            found[queue] = parse_rate(rate).text
        except ProtocolError as exc:
            raise ConfigurationError(f"RATE_LIMITS[{queue!r}]: {exc}") from None
    return tuple(found.items())


def _parse_key_list(key: str, value: Any) -> tuple[str, ...]:
    """Keys, key files or directories: a list, or one comma separated string."""
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return tuple(v.strip() for v in value if v.strip())
    raise ConfigurationError(
        f"{key}: expected a list of Z85 public keys, key files or directories, got {value!r}"
    )


def _parse_queue_allowed_jobs(key: str, value: Any) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``{"queue": ["job", ...]}``, as a mapping, pairs, or JSON text (``EMQ_*``)."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except ValueError:
            raise ConfigurationError(
                f'{key}: expected JSON such as {{"email": ["app.jobs.send"]}}, got {value!r}'
            ) from None
    if isinstance(value, Mapping):
        value = list(value.items())
    if not isinstance(value, list | tuple):
        raise ConfigurationError(f"{key}: expected a mapping of queue name to job names")
    pairs: list[tuple[str, tuple[str, ...]]] = []
    for item in value:
        if not (isinstance(item, list | tuple) and len(item) == 2 and isinstance(item[0], str)):
            raise ConfigurationError(f"{key}: entry {item!r} is not (queue, [job names])")
        queue, jobs = item
        if isinstance(jobs, str) or not isinstance(jobs, list | tuple):
            raise ConfigurationError(f"{key}[{queue!r}]: expected a list of job names")
        pairs.append((queue, tuple(jobs)))
    return tuple(pairs)


#: ``((glob, queue), ...)`` in the order they are tried.
Routes = tuple[tuple[str, str], ...]

_ROUTES_EXAMPLE = '{"billing.jobs.*": "billing", "app.jobs.send_*": "email"}'


def parse_routes(key: str, value: Any) -> Routes:
    """``ROUTES`` as ``(glob, queue)`` pairs, order kept: a mapping, pairs, or JSON text
    (``EMQ_ROUTES``); :class:`ConfigurationError` saying what is wrong otherwise."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except ValueError:
            raise ConfigurationError(
                f"{key}: expected a JSON object of job name globs to queue names such as "
                f"{_ROUTES_EXAMPLE}, got {value!r}"
            ) from None
    if isinstance(value, Mapping):
        value = list(value.items())
    if not isinstance(value, list | tuple):
        raise ConfigurationError(
            f"{key}: expected a dict of job name globs to queue names such as {_ROUTES_EXAMPLE}, "
            f"got {type(value).__name__}"
        )
    routes: list[tuple[str, str]] = []
    for item in value:
        if not (isinstance(item, list | tuple) and len(item) == 2):
            raise ConfigurationError(f"{key}: entry {item!r} is not (job name glob, queue name)")
        pattern, queue = item
        if not isinstance(pattern, str) or not pattern.strip():
            raise ConfigurationError(
                f"{key}: {pattern!r} is not a job name glob; write e.g. 'billing.jobs.*'"
            )
        if not isinstance(queue, str) or not _QUEUE_NAME.match(queue):
            raise ConfigurationError(
                f"{key}[{pattern!r}]: {queue!r} is not a queue name (letters, digits, '_', '.' "
                "and '-')"
            )
        routes.append((pattern, queue))
    return tuple(routes)


_SECURITY_PARSERS: dict[str, Any] = {
    "curve_frontend_clients": _parse_key_list,
    "curve_backend_workers": _parse_key_list,
    "curve_admin_clients": _parse_key_list,
    "curve_publisher_clients": _parse_key_list,
    "queue_allowed_jobs": _parse_queue_allowed_jobs,
    "rate_limits": lambda key, value: parse_rate_limits(value),
    "routes": parse_routes,
}
