"""The eMQP header field: comma separated flags and ``name:value`` pairs.

Parsed into an immutable :class:`Headers`. Unknown headers are kept in
``extra`` and written back unchanged, so a message passes through a router of
ours without losing what a newer peer put in it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace

from django_eventmq.errors import ProtocolError

REPLY_REQUESTED = "reply-requested"
GUARANTEE = "guarantee"
NOHASTE = "nohaste"
RETRY_COUNT = "retry-count"
TIMEOUT = "timeout"
RUN_COUNT = "run_count"
# Our extensions (a reference peer keeps them as unknown headers):
PRIORITY = "priority"  # higher is handed out first within a queue; may be negative
DELAY_UNTIL = "delay-until"  # unix time before which the job is not handed out
#: Seconds after which the job manager raises SoftTimeLimitExceeded inside the job
#: (before the hard ``timeout`` kills its process); a whole number > 0, < timeout.
SOFT_TIMEOUT = "soft-timeout"
#: Unix time after which the job is not started (the router drops it at hand-out,
#: a job manager will not start it): ``expires:<seconds since the epoch>``, > 0.
EXPIRES = "expires"
EXPIRES_B = EXPIRES.encode() + b":"
#: At most N hand-outs per period of the jobs sharing a ``rate-key`` (router-wide):
#: ``rate-limit:<N>/<unit>``, unit s, m, h or d, optionally with a count (``10/5m``).
RATE_LIMIT = "rate-limit"
RATE_LIMIT_B = RATE_LIMIT.encode() + b":"
#: What ``rate-limit`` counts under: the dotted job name unless ``@job(rate_key=)`` says.
RATE_KEY = "rate-key"
#: A unique job's key (lowercase hex, 16 to 128 digits, computed by the client):
#: the router refuses another job with the same key while this one is held
#: (queued, delayed or running) and for ``unique-for`` seconds after it accepted it.
UNIQUE_KEY = "unique-key"
#: Whole seconds after acceptance during which the key stays taken even once the job
#: ended (needs unique-key; absent or 0: only while the job is held).
UNIQUE_FOR = "unique-for"

_FLAGS = (REPLY_REQUESTED, GUARANTEE, NOHASTE)
_NUMBERS = (RETRY_COUNT, TIMEOUT, RUN_COUNT)
_UNIQUE = (UNIQUE_KEY, UNIQUE_FOR)


@dataclass(frozen=True, slots=True, kw_only=True)
class Headers:
    """Headers of a REQUEST, SCHEDULE or PUBLISH.

    ``retry_count`` and ``timeout`` are 0 when absent (the spec's defaults);
    ``run_count`` is None when absent (run for ever); ``soft_timeout`` is None
    when absent (no soft limit), else a whole number of seconds > 0 and, when
    ``timeout`` is set, less than it.
    """

    reply_requested: bool = False
    guarantee: bool = False
    nohaste: bool = False
    retry_count: int = 0
    timeout: int = 0
    soft_timeout: int | None = None
    run_count: int | None = None
    priority: int = 0
    delay_until: float | None = None
    expires: float | None = None
    unique_key: str | None = None
    unique_for: int = 0
    extra: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        for name in ("retry_count", "timeout"):
            value = getattr(self, name)
            if type(value) is not int or value < 0:
                raise ProtocolError(f"header {name}: expected a whole number >= 0, got {value!r}")
        if self.soft_timeout is not None:
            _check_soft_timeout(self.soft_timeout, self.timeout)
        if self.run_count is not None and (type(self.run_count) is not int or self.run_count < 0):
            raise ProtocolError(
                f"header run_count: expected a whole number >= 0, got {self.run_count!r}"
            )
        if type(self.priority) is not int:
            raise ProtocolError(f"header priority: expected a whole number, got {self.priority!r}")
        if self.delay_until is not None and not (
            isinstance(self.delay_until, int | float) and math.isfinite(self.delay_until)
        ):
            raise ProtocolError(
                f"header delay-until: expected a unix time, got {self.delay_until!r}"
            )
        if self.expires is not None:
            _check_expires(self.expires)
        if self.unique_key is not None or self.unique_for:
            _check_unique(self.unique_key, self.unique_for)
        for item in self.extra:
            if not item or "," in item:
                raise ProtocolError(f"header {item!r}: empty or contains a comma")

    def encode(self) -> str:
        """The CSV form; headers at their defaults are left out."""
        parts = [flag for flag in _FLAGS if getattr(self, flag.replace("-", "_"))]
        if self.retry_count:
            parts.append(f"{RETRY_COUNT}:{self.retry_count}")
        if self.timeout:
            parts.append(f"{TIMEOUT}:{self.timeout}")
        if self.soft_timeout is not None:
            parts.append(f"{SOFT_TIMEOUT}:{self.soft_timeout}")
        if self.run_count is not None:
            parts.append(f"{RUN_COUNT}:{self.run_count}")
        if self.priority:
            parts.append(f"{PRIORITY}:{self.priority}")
        if self.delay_until is not None:
            parts.append(f"{DELAY_UNTIL}:{self.delay_until!r}")
        if self.expires is not None:
            parts.append(f"{EXPIRES}:{self.expires!r}")
        if self.unique_key is not None:
            parts.append(f"{UNIQUE_KEY}:{self.unique_key}")
        if self.unique_for:
            parts.append(f"{UNIQUE_FOR}:{self.unique_for}")
        parts.extend(self.extra)
        return ",".join(parts)

    def with_(self, **changes: object) -> Headers:
        """A copy with some fields changed."""
        return replace(self, **changes)  # type: ignore[arg-type]


def _check_soft_timeout(soft: object, timeout: int) -> None:
    """Raise :class:`ProtocolError` unless ``soft`` is a whole number > 0 below ``timeout``."""
    if type(soft) is not int or soft <= 0:
        raise ProtocolError(
            f"header soft_timeout: expected a whole number of seconds > 0, got {soft!r}"
        )
    if timeout and soft >= timeout:
        raise ProtocolError(
            f"header soft_timeout: {soft} must be less than timeout ({timeout}), so the job "
            "can clean up before the hard limit kills it; lower soft_timeout or raise timeout"
        )


def _check_expires(value: object) -> None:
    """Raise :class:`ProtocolError` unless ``value`` is a finite unix time > 0."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ProtocolError(f"header expires: expected a unix time > 0, got {value!r}")


def _check_unique(key: object, seconds: object) -> None:
    """Raise :class:`ProtocolError` unless ``key`` is 16 to 128 lowercase hex digits and
    ``seconds`` a whole number >= 0 (> 0 only with a key)."""
    if key is None:
        raise ProtocolError(
            f"header unique-for ({seconds!r}) without unique-key: give the job a unique key too"
        )
    if not isinstance(key, str) or not 16 <= len(key) <= 128 or key.strip("0123456789abcdef"):
        raise ProtocolError(
            f"header unique-key: expected 16 to 128 lowercase hex digits, got {key!r}"
        )
    if type(seconds) is not int or seconds < 0:
        raise ProtocolError(f"header unique-for: expected a whole number >= 0, got {seconds!r}")


EMPTY_HEADERS = Headers()


@functools.lru_cache(maxsize=256)
def parse_headers(text: str) -> Headers:
    """Parse the CSV header field; raises :class:`ProtocolError` on a bad value.

    Cached: a system sends few distinct header strings, and Headers is immutable.
    """
    if not text:
        return EMPTY_HEADERS
    flags: dict[str, bool] = {}
    numbers: dict[str, int] = {}
    extra: list[str] = []
    delay_until: float | None = None
    soft_timeout: int | None = None
    expires: float | None = None
    unique_key: str | None = None
    unique_for = 0
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue  # tolerate "a,,b" and a trailing comma
        name, sep, value = item.partition(":")
        if name in _FLAGS and not sep:
            flags[name.replace("-", "_")] = True
        elif name in _NUMBERS and sep:
            try:
                number = int(value)
            except ValueError:
                raise ProtocolError(
                    f"header {name}: expected a whole number, got {value!r}"
                ) from None
            if number < 0:
                raise ProtocolError(f"header {name}: expected a whole number >= 0, got {number}")
            numbers[name.replace("-", "_")] = number
        elif name == PRIORITY and sep:
            try:
                numbers["priority"] = int(value)
            except ValueError:
                raise ProtocolError(
                    f"header priority: expected a whole number, got {value!r}"
                ) from None
        elif name == DELAY_UNTIL and sep:
            try:
                stamp = float(value)
            except ValueError:
                stamp = math.nan
            if not math.isfinite(stamp):
                raise ProtocolError(f"header delay-until: expected a unix time, got {value!r}")
            delay_until = stamp
        elif name == SOFT_TIMEOUT and sep:
            try:
                soft_timeout = int(value)
            except ValueError:
                raise ProtocolError(
                    f"header soft-timeout: expected a whole number of seconds, got {value!r}"
                ) from None
        elif name in (RATE_LIMIT, RATE_KEY):
            _check_rate_header(name, value if sep else None)
            extra.append(item)  # kept as written: the router reads it, peers pass it on
        elif name == EXPIRES and sep:
            expires = _unix_time(value)  # checked (finite, > 0) by Headers
        elif name == UNIQUE_KEY and sep:
            unique_key = value  # checked by Headers
        elif name == UNIQUE_FOR and sep:
            if not value.isdigit():
                raise ProtocolError(
                    f"header unique-for: expected a whole number of seconds, got {value!r}"
                )
            unique_for = int(value)
        elif name in _FLAGS or name in _NUMBERS or name in (SOFT_TIMEOUT, EXPIRES, *_UNIQUE):
            raise ProtocolError(
                f"header {item!r}: malformed (flags take no value, numbers need one)"
            )
        else:
            extra.append(item)
    return Headers(
        **flags,
        **numbers,  # type: ignore[arg-type]
        delay_until=delay_until,
        soft_timeout=soft_timeout,
        expires=expires,
        unique_key=unique_key,
        unique_for=unique_for,
        extra=tuple(extra),
    )


def _unix_time(value: str) -> float:
    """The ``expires`` header's value as a float (:class:`ProtocolError` if not a number)."""
    try:
        return float(value)
    except ValueError:
        raise ProtocolError(f"header expires: expected a unix time, got {value!r}") from None


@dataclass(frozen=True, slots=True)
class Rate:
    """A rate limit: at most ``count`` per ``period`` seconds (``text`` as parsed)."""

    count: int
    period: float
    text: str


_RATE_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
#: Most starts a limit may count per period (the router keeps one time per start).
MAX_RATE_COUNT = 100_000
_RATE_HELP = (
    "use 'N/unit' with a whole N >= 1 and unit s, m, h or d, e.g. '100/m' or '10/5s' "
    "(10 per 5 seconds), or a whole number of jobs per second"
)


def parse_rate(value: object) -> Rate:
    """``"100/m"``, ``"10/5s"`` or a whole number per second (``5`` is ``"5/s"``) as a
    :class:`Rate`; :class:`ProtocolError` saying what would work otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        text = f"{value}/s"
    elif isinstance(value, str):
        text = value.strip().replace(" ", "")
        text = f"{text}/s" if text.isdigit() else text
    else:
        raise ProtocolError(f"rate limit {value!r}: {_RATE_HELP}")
    head, slash, per = text.partition("/")
    unit = per[-1:]
    mult = per[:-1]
    if (
        not slash
        or not head.isdigit()
        or unit not in _RATE_UNITS
        or not (mult == "" or mult.isdigit())
    ):
        raise ProtocolError(f"rate limit {value!r}: {_RATE_HELP}")
    count, period = int(head), int(mult or 1) * _RATE_UNITS[unit]
    if not 1 <= count <= MAX_RATE_COUNT or period <= 0:
        raise ProtocolError(
            f"rate limit {value!r}: the count must be 1 to {MAX_RATE_COUNT} and the period "
            "more than 0; for a higher rate use a shorter period (e.g. '1000/s')"
        )
    return Rate(count, period, f"{count}/{mult}{unit}")


def _check_rate_header(name: str, value: str | None) -> None:
    if value is None or not value:
        raise ProtocolError(f"header {name}: needs a value, e.g. '{name}:100/m'")
    if name == RATE_LIMIT:
        parse_rate(value)


def rate_of(raw: bytes) -> tuple[str, Rate] | None:
    """``(rate-key, Rate)`` of a raw header frame with ``rate-limit`` (the key is ""
    without ``rate-key``); None without one, or unreadable. One search when absent."""
    if RATE_LIMIT_B not in raw:
        return None
    try:
        extra = parse_headers(raw.decode()).extra
    except (ProtocolError, UnicodeDecodeError):
        return None
    found = dict(item.partition(":")[::2] for item in extra)
    if RATE_LIMIT not in found:
        return None
    return found.get(RATE_KEY, ""), parse_rate(found[RATE_LIMIT])


def expires_of(raw: bytes) -> float | None:
    """The ``expires`` time in a raw header frame (None without one, or unreadable).

    For the router's hand-out path: a frame without ``expires:`` costs one search.
    """
    if EXPIRES_B not in raw:
        return None
    try:
        return parse_headers(raw.decode()).expires
    except (ProtocolError, UnicodeDecodeError):
        return None


#: The header a router of ours adds to a REQUEST it hands out again: ``attempt:K``
#: (a reference peer keeps it as an unknown header).
ATTEMPT = "attempt"
ATTEMPT_B = ATTEMPT.encode()


def with_attempt(headers: bytes, attempt: int) -> bytes:
    """The header frame with ``attempt:K`` in place of any ``attempt:N`` (none for K <= 1).

    Edited as text so every other header reaches the job manager as the client wrote it.
    """
    items = [
        item for item in headers.split(b",") if item and item.split(b":", 1)[0].strip() != ATTEMPT_B
    ]
    if attempt > 1:
        items.append(b"%s:%d" % (ATTEMPT_B, attempt))
    return b",".join(items)


_REPLY_REQUESTED_B = REPLY_REQUESTED.encode()


def with_reply_requested(headers: bytes) -> bytes:
    """The header frame asking for a reply (unchanged if it does already).

    A router of ours hands a reference job manager every job this way: that job
    manager answers a bare READY when a job ends without one, which does not say
    which job ended; its REPLY names it.
    """
    if any(item.strip() == _REPLY_REQUESTED_B for item in headers.split(b",")):
        return headers
    return headers + b"," + _REPLY_REQUESTED_B if headers else _REPLY_REQUESTED_B


def attempt_of(headers: Headers) -> int:
    """The attempt a REQUEST is, from its ``attempt:K`` header (1 without one)."""
    for item in headers.extra:
        name, _, value = item.partition(":")
        if name == ATTEMPT and value.isdigit() and int(value) > 0:
            return int(value)
    return 1
