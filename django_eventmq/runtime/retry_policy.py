"""Per-job retry policy: which exceptions retry, how long to wait, and ``raise Retry``.

The policy is declared on ``@job(retry_on=..., retry_backoff=..., retry_jitter=...,
retry_max_delay=...)`` (:func:`policy_from_options`) and kept here by job name
(:func:`register`), in every process that imported the job module: the client,
and each worker child. The job manager's parent never imports job modules, so
the worker child, which knows the policy and the exception, sends its
*advice* with the failure on its pipe (the ``"retry"`` key of a ``failed``
payload, :func:`advice`), and the parent, which knows the attempt and the
``retry-count`` header, decides (:func:`decide`, the one place where a failed
job is retried or given up: retries exhausted, or an exception not in
``retry_on``). The delay goes to our router in the DONE ``retry`` payload
(``"retry_in"``, :func:`delay_in_payload`), which stores the job in its
journal as delayed until then, so a pending retry survives a router restart.

Advice (JSON object):

- ``{"allowed": false}``: the exception is not in ``retry_on``; fail now;
- ``{"in": seconds}``: the job raised :class:`~django_eventmq.errors.Retry` with a time;
- ``{"base": s, "max": s, "jitter": "full"|"equal"}``: back off this way
  (each key optional; missing ones are the ``RETRY_BACKOFF_*`` settings, no jitter);
- absent or ``{}``: today's default, the global back-off.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from django_eventmq.errors import ConfigurationError, Retry
from django_eventmq.runtime.registry import canonical_name

Jitter = Literal["none", "full", "equal"]
JITTERS: tuple[Jitter, ...] = ("none", "full", "equal")

#: The ``@job`` options that make a policy (not headers: they stay in the code).
OPTION_NAMES = ("retry_on", "retry_backoff", "retry_jitter", "retry_max_delay")

#: Key of the advice in a child's ``failed`` payload, and of the delay in a DONE ``retry``.
ADVICE_KEY = "retry"
RETRY_IN = "retry_in"

#: Why :func:`decide` gave up (``Decision.why``).
RETRY = "retry"
EXHAUSTED = "exhausted"
NOT_RETRYABLE = "not_retryable"


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How one job is retried; ``None`` fields fall back to the global behaviour."""

    #: Retry only these exceptions (and :class:`Retry`); None: any exception.
    retry_on: tuple[type[BaseException], ...] | None = None
    #: First back-off in seconds, doubled per attempt (None: ``RETRY_BACKOFF_BASE``).
    backoff: float | None = None
    jitter: Jitter = "none"
    #: Longest back-off in seconds (None: ``RETRY_BACKOFF_CAP``).
    max_delay: float | None = None

    def backoff_advice(self) -> dict[str, Any]:
        found: dict[str, Any] = {}
        if self.backoff is not None:
            found["base"] = self.backoff
        if self.max_delay is not None:
            found["max"] = self.max_delay
        if self.jitter != "none":
            found["jitter"] = self.jitter
        return found


def _seconds(option: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(f"{option}= takes seconds (a number > 0), got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ConfigurationError(f"{option}= must be a finite number of seconds > 0, got {value!r}")
    return float(value)


def _exceptions(value: object) -> tuple[type[BaseException], ...] | None:
    if value is None:
        return None
    items = value if isinstance(value, tuple | list) else (value,)
    for item in items:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise ConfigurationError(
                f"retry_on= takes exception classes (one, or a tuple), got {item!r}; "
                "e.g. retry_on=(ConnectionError, TimeoutError)"
            )
    return tuple(items)


def _jitter(value: object) -> Jitter:
    if value is None or value is False:
        return "none"
    if value is True:
        return "full"
    if value in JITTERS:
        return value
    raise ConfigurationError(
        f"retry_jitter= takes True (full jitter), False, 'full' or 'equal', got {value!r}"
    )


def policy_from_options(options: dict[str, Any], retry_count: object) -> RetryPolicy | None:
    """Pop the :data:`OPTION_NAMES` out of ``options`` and make their policy (None: none given).

    Raises :class:`ConfigurationError` for a bad value, or when ``retry_count`` is 0
    (the options would do nothing).
    """
    given = {name: options.pop(name) for name in OPTION_NAMES if name in options}
    if not given:
        return None
    if isinstance(retry_count, bool) or not isinstance(retry_count, int) or retry_count <= 0:
        raise ConfigurationError(
            f"{', '.join(f'{name}=' for name in given)} need retry_count=N (N > 0): "
            "without it the job is never retried"
        )
    backoff = _seconds("retry_backoff", given.get("retry_backoff"))
    max_delay = _seconds("retry_max_delay", given.get("retry_max_delay"))
    return RetryPolicy(
        retry_on=_exceptions(given.get("retry_on")),
        backoff=backoff,
        jitter=_jitter(given.get("retry_jitter")),
        max_delay=max_delay,
    )


_lock = threading.Lock()
_policies: dict[str, RetryPolicy] = {}


def register(name: str, policy: RetryPolicy | None) -> None:
    """Keep ``policy`` for job ``name`` (None: forget any, the global behaviour)."""
    with _lock:
        if policy is None:
            _policies.pop(name, None)
        else:
            _policies[name] = policy


def policy_for(name: str) -> RetryPolicy | None:
    with _lock:
        return _policies.get(canonical_name(name))


# -- the worker child: advice ---------------------------------------------------------
def advice(name: str, exc: BaseException, now: float) -> dict[str, Any]:
    """What the child that ran job ``name`` and saw ``exc`` says about retrying it.

    :class:`Retry` is always retryable (it still uses up ``retry_count``);
    ``now`` (unix time) turns ``Retry(at=...)`` into seconds.
    """
    policy = policy_for(name)
    if isinstance(exc, Retry):
        seconds = exc.seconds(now)
        if seconds is not None:
            return {"in": seconds}
    elif (
        policy is not None and policy.retry_on is not None and not isinstance(exc, policy.retry_on)
    ):
        return {"allowed": False}
    return policy.backoff_advice() if policy is not None else {}


def advice_of(payload: str) -> Mapping[str, Any]:
    """The advice in a child's ``failed`` payload (empty when it has none)."""
    try:
        found = json.loads(payload).get(ADVICE_KEY)
    except (ValueError, AttributeError):
        return {}
    return found if isinstance(found, dict) else {}


# -- the job manager: the decision ----------------------------------------------------
def jittered(attempt: int, base: float, cap: float, jitter: Jitter, rand: float) -> float:
    """Seconds to wait after failed attempt ``attempt`` (from 1): ``base`` doubled per
    attempt, at most ``cap``; ``rand`` in [0, 1) spreads it (``full``: anywhere in
    [0, that); ``equal``: in [half of it, that)). Never negative, never above ``cap``."""
    exponent = min(max(attempt, 1) - 1, 1023)
    ceiling = min(cap, base * math.ldexp(1.0, exponent)) if base < math.inf else cap
    ceiling = max(0.0, ceiling)
    spread = min(max(rand, 0.0), 1.0)
    if jitter == "full":
        return ceiling * spread
    if jitter == "equal":
        return ceiling / 2 + ceiling / 2 * spread
    return ceiling


class Decision(NamedTuple):
    """Whether a failed attempt runs again (``delay`` seconds later) and why (``why``)."""

    retry: bool
    delay: float
    #: :data:`RETRY`, :data:`EXHAUSTED` (no retries left) or :data:`NOT_RETRYABLE`.
    why: str
    #: The delay comes from the job (its policy, or ``Retry``), not the global back-off
    #: alone: our router is told it (otherwise it applies its own settings).
    custom: bool = False


def given_up(attempt: int, retry_count: int, advice: Mapping[str, Any]) -> str:
    """Why failed attempt ``attempt`` is not retried (:data:`NOT_RETRYABLE`,
    :data:`EXHAUSTED`), or "" when it is (the child knows it too: ``job_retrying``)."""
    if advice.get("allowed") is False:
        return NOT_RETRYABLE
    if attempt > retry_count:
        return EXHAUSTED
    return ""


def decide(
    attempt: int,
    retry_count: int,
    advice: Mapping[str, Any],
    *,
    base: float,
    cap: float,
    rand: Callable[[], float],
) -> Decision:
    """Retry failed attempt ``attempt`` of a job with ``retry-count`` ``retry_count``?

    The single place where "retries exhausted" is decided: a job runs at most
    ``retry_count + 1`` times, whatever it raises (a :class:`Retry` counts too,
    so a job that always asks again stops). ``base``/``cap``: the global
    back-off settings; ``rand``: a draw in [0, 1) for the jitter.
    """
    why = given_up(attempt, retry_count, advice)
    if why:
        return Decision(False, 0.0, why)
    asked = _number(advice.get("in"))
    if asked is not None:
        return Decision(True, max(0.0, asked), RETRY, custom=True)
    base = _positive(advice.get("base")) or base
    cap = _positive(advice.get("max")) or cap
    jitter = advice.get("jitter", "none")
    mode: Jitter = jitter if jitter in JITTERS else "none"
    draw = rand() if mode != "none" else 0.0
    custom = any(key in advice for key in ("base", "max", "jitter"))
    return Decision(True, jittered(attempt, base, cap, mode, draw), RETRY, custom=custom)


def _positive(value: object) -> float | None:
    number = _number(value)
    return number if number is not None and number > 0 else None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def delay_in_payload(payload: str) -> float | None:
    """The ``retry_in`` seconds a job manager put in a DONE ``retry`` (None: none, or bad)."""
    if RETRY_IN not in payload:
        return None
    try:
        value = json.loads(payload).get(RETRY_IN)
    except (ValueError, AttributeError):
        return None
    seconds = _number(value)
    return None if seconds is None or seconds < 0 else seconds
