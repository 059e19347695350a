"""Bounds on what a peer may send: frame count and size, body size and nesting, header values.

Decoding stays lenient (a wire-compatible parse); these checks are the policy a
receiving router applies on top. A message outside a bound raises
:class:`OverLimit`, a :class:`ProtocolError` that also names the msgid and the
command, so a router can log one line and answer REJECT to a client that waits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django_eventmq.errors import ProtocolError
from django_eventmq.protocol import codec
from django_eventmq.protocol.headers import Headers, parse_headers
from django_eventmq.protocol.messages import Message, Publish, Request, Schedule, Unschedule
from django_eventmq.protocol.payload import MAX_JSON_BYTES, MAX_JSON_DEPTH

#: Frames in one message, routing identity included. eMQP needs at most 10
#: (identity + a 5-frame SCHEDULE after the 4-frame envelope).
MAX_FRAMES = codec.MAX_FRAMES
#: Bytes in one message, all frames together (ZeroMQ's MAXMSGSIZE is per frame).
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
#: Bytes of a job body (or published message) frame.
MAX_BODY_BYTES = MAX_JSON_BYTES
#: Highest ``retry-count`` header: a job is not run more often than this plus one.
MAX_RETRY_COUNT = 100
#: Highest ``timeout`` header, in seconds (7 days).
MAX_TIMEOUT = 7 * 24 * 3600
#: Highest ``|priority|`` header.
MAX_PRIORITY = 1_000_000

#: Messages whose body and headers are checked (the ones clients originate).
_CHECKED = (Request, Schedule, Unschedule, Publish)


class OverLimit(ProtocolError):
    """A message outside a configured bound; ``msgid``/``command`` say which one."""

    def __init__(
        self,
        reason: str,
        frames: Sequence[bytes] | None = None,
        *,
        msgid: str = "",
        command: str = "",
    ) -> None:
        super().__init__(reason, frames)
        self.msgid = msgid
        self.command = command

    def with_frames(self, frames: Sequence[bytes]) -> OverLimit:
        err = OverLimit(self.reason, frames, msgid=self.msgid, command=self.command)
        err.__cause__ = self.__cause__ or self
        err.identity = self.identity
        return err


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """The bounds one receiving socket applies; the defaults suit a router."""

    max_frames: int = MAX_FRAMES
    max_message_bytes: int = MAX_MESSAGE_BYTES
    max_body_bytes: int = MAX_BODY_BYTES
    #: Passed to :func:`.payload.parse_job` by whoever parses the body.
    max_json_depth: int = MAX_JSON_DEPTH
    max_retry_count: int = MAX_RETRY_COUNT
    max_timeout: int = MAX_TIMEOUT

    def __post_init__(self) -> None:
        for name in (
            "max_frames",
            "max_message_bytes",
            "max_body_bytes",
            "max_json_depth",
            "max_retry_count",
            "max_timeout",
        ):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"Limits.{name}: expected a whole number >= 1, got {value!r}")
        if self.max_frames < 5:
            raise ValueError("Limits.max_frames: eMQP messages need at least 5 frames")

    def check_frames(self, frames: Sequence[bytes]) -> None:
        """Refuse a message with too many frames or too many bytes."""
        if len(frames) > self.max_frames:
            raise OverLimit(
                f"message has more than {self.max_frames} frames (MAX_FRAMES)", frames[:8]
            )
        total = 0
        for frame in frames:
            total += len(frame)
        if total > self.max_message_bytes:
            raise OverLimit(
                f"message is larger than {self.max_message_bytes} bytes (MAX_MESSAGE_BYTES)",
                [f[:64] for f in frames[:8]],
            )

    def check_message(self, message: Message) -> None:
        """Refuse a REQUEST/SCHEDULE/UNSCHEDULE/PUBLISH whose body or headers are out of bounds.

        Cheap: sizes and numbers only. The JSON nesting of a body is checked
        where it is parsed (:func:`.payload.parse_job` with ``max_depth``).
        """
        if not isinstance(message, _CHECKED):
            return
        command = message.command
        if len(message.body_text) > self.max_body_bytes:
            # len() counts characters; a character is at least one byte, so a
            # body within the limit in characters may still be refused by bytes
            # at ZeroMQ's per-frame MAXMSGSIZE, never the other way round.
            raise OverLimit(
                f"{command} body is larger than {self.max_body_bytes} bytes (MAX_BODY_BYTES)",
                msgid=message.msgid,
                command=command,
            )
        headers = message.headers
        if headers is not None:
            self.check_headers(headers, message.msgid, command)

    def check_request_frames(self, msgid: bytes, headers: bytes, body: bytes) -> None:
        """:meth:`check_message` for a REQUEST taken straight from its frames (a
        router's fast path): the body's size in bytes and the header bounds."""
        if len(body) > self.max_body_bytes:
            raise OverLimit(
                f"REQUEST body is larger than {self.max_body_bytes} bytes (MAX_BODY_BYTES)",
                msgid=msgid.decode("utf-8", "replace"),
                command="REQUEST",
            )
        if headers:
            try:
                parsed = parse_headers(headers.decode())
            except (UnicodeDecodeError, ProtocolError):
                return  # malformed, not over a limit: the decoder says so
            self.check_headers(parsed, msgid.decode("utf-8", "replace"), "REQUEST")

    def check_headers(self, headers: Headers, msgid: str = "", command: str = "") -> None:
        """Refuse header values outside their bounds."""
        if headers.retry_count > self.max_retry_count:
            raise OverLimit(
                f"{command} header retry-count is above {self.max_retry_count}",
                msgid=msgid,
                command=command,
            )
        if headers.timeout > self.max_timeout:
            raise OverLimit(
                f"{command} header timeout is above {self.max_timeout} seconds",
                msgid=msgid,
                command=command,
            )
        if abs(headers.priority) > MAX_PRIORITY:
            raise OverLimit(
                f"{command} header priority is outside +-{MAX_PRIORITY}",
                msgid=msgid,
                command=command,
            )
        if headers.run_count is not None and headers.run_count > 10**12:
            raise OverLimit(
                f"{command} header run_count is absurdly large", msgid=msgid, command=command
            )


DEFAULT_LIMITS = Limits()
