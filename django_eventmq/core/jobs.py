"""``@job``: register a function as a job and give it ``.delay()``.

The decorated object is still callable directly with the function's own
signature (kept for type checkers through ``ParamSpec``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Generic, ParamSpec, TypeVar, overload

from ..errors import ConfigurationError
from ..protocol import Headers, JobBody, new_msgid
from ..protocol import constants as C
from . import registry
from .client import get_client
from .config import get_settings

P = ParamSpec("P")
R = TypeVar("R")


class Job(Generic[P, R]):
    """A function registered as a job. Call it to run it here; ``.delay()`` to queue it."""

    def __init__(
        self,
        func: Callable[P, R],
        *,
        queue: str = C.DEFAULT_QUEUE_NAME,
        reply_requested: bool = False,
        guarantee: bool = False,
        retry_count: int = 0,
        timeout: int = 0,
    ) -> None:
        qualname = getattr(func, "__qualname__", "")
        if "<locals>" in qualname or "." in qualname:
            raise ConfigurationError(
                f"@job needs a module-level function; {qualname!r} is nested or a method"
            )
        if func.__module__ == "__main__":
            raise ConfigurationError(
                f"@job function {func.__name__!r} is defined in __main__, which a job manager "
                "cannot import; move it into a module"
            )
        if not queue:
            raise ConfigurationError("@job queue name is empty")
        self.func = func
        self.queue = queue
        self.path = func.__module__
        self.callable_name = func.__name__
        self.headers = Headers(
            reply_requested=reply_requested,
            guarantee=guarantee,
            retry_count=retry_count,
            timeout=timeout,
        )
        self.name = registry.register(func, self.path, self.callable_name)
        functools.update_wrapper(self, func)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.func(*args, **kwargs)

    def body(self, *args: Any, **kwargs: Any) -> JobBody:
        """The job body that runs this function with these arguments."""
        return JobBody(path=self.path, callable=self.callable_name, args=args, kwargs=kwargs)

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> str:
        """Queue the job; returns its msgid.

        Arguments must be JSON-serialisable: anything else raises
        ``TypeError`` here, before anything is sent. With ``EAGER`` (or no
        ``BROKER_ADDR``) the job runs now, in this process.
        """
        return self.send(args, kwargs)

    def send(
        self,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        *,
        queue: str | None = None,
        headers: Headers | None = None,
        msgid: str | None = None,
    ) -> str:
        """Queue the job with explicit options (queue, headers, msgid)."""
        body_text = self.body(*args, **(kwargs or {})).encode()  # TypeError if not JSON
        msgid = msgid or new_msgid()
        settings = get_settings()
        if settings.run_inline:
            self.func(*args, **(kwargs or {}))
            return msgid
        client = get_client(settings.broker_addr, send_timeout=settings.send_timeout)
        return client.request(queue or self.queue, body_text, headers or self.headers, msgid)

    def __repr__(self) -> str:
        return f"<Job {self.name} queue={self.queue!r}>"


@overload
def job(func: Callable[P, R], /) -> Job[P, R]: ...


@overload
def job(
    *,
    queue: str = ...,
    reply_requested: bool = ...,
    guarantee: bool = ...,
    retry_count: int = ...,
    timeout: int = ...,
) -> Callable[[Callable[P, R]], Job[P, R]]: ...


def job(
    func: Callable[P, R] | None = None,
    /,
    *,
    queue: str = C.DEFAULT_QUEUE_NAME,
    reply_requested: bool = False,
    guarantee: bool = False,
    retry_count: int = 0,
    timeout: int = 0,
) -> Job[P, R] | Callable[[Callable[P, R]], Job[P, R]]:
    """Register a module-level function as a job: ``@job`` or ``@job(queue="email")``."""

    def wrap(f: Callable[P, R]) -> Job[P, R]:
        return Job(
            f,
            queue=queue,
            reply_requested=reply_requested,
            guarantee=guarantee,
            retry_count=retry_count,
            timeout=timeout,
        )

    return wrap(func) if func is not None else wrap
