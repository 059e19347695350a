"""Coverage-guided fuzz target (atheris) for the eMQP decoder, headers and job bodies.

Run by hand for longer than CI does::

    python tests/system/fuzz/fuzz_decoder.py -runs=2000000 -max_len=1024
    python tests/system/fuzz/fuzz_decoder.py -max_total_time=600 corpus_dir/

Anything but ProtocolError escaping, or a decoded message that does not
survive encode -> decode, is a crash.
"""

from __future__ import annotations

import contextlib
import sys

import atheris

with atheris.instrument_imports():
    from django_eventmq.errors import ProtocolError
    from django_eventmq.protocol import DEFAULT_LIMITS, Request, decode, encode, parse_headers
    from django_eventmq.protocol import constants as C
    from django_eventmq.protocol.messages import MESSAGE_TYPES
    from django_eventmq.protocol.payload import parse_job

#: Commands the fuzzer can choose as frame 2 so it gets past the envelope quickly:
#: every command the decoder knows (extensions included), so new ones are fuzzed too.
COMMANDS = sorted({*C.ADMIN_COMMANDS, *MESSAGE_TYPES, "KBYE"})  # KBYE: the reference's KBAI


def frames_from(data: bytes) -> tuple[list[bytes], bool]:
    fdp = atheris.FuzzedDataProvider(data)
    admin = fdp.ConsumeBool()
    frames: list[bytes] = []
    if fdp.ConsumeBool():  # a valid envelope, so the body parsers get exercised
        frames = [b"", C.PROTOCOL_VERSION_B, fdp.PickValueInList(COMMANDS).encode()]
    for _ in range(fdp.ConsumeIntInRange(0, 8)):
        frames.append(fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 96)))
    return frames, admin


def test_one_input(data: bytes) -> None:
    frames, admin = frames_from(data)
    try:
        message = decode(frames, admin=admin)
    except ProtocolError as exc:
        assert exc.frames == tuple(frames), "ProtocolError lost the raw frames"
        return
    # What we accept we can write back, and it reads the same the second time round.
    again = decode(encode(message), admin=admin)
    assert decode(encode(again), admin=admin) == again, (message, again)
    with contextlib.suppress(ProtocolError):
        DEFAULT_LIMITS.check_message(message)
    if isinstance(message, Request):
        try:
            body = parse_job(message.body_text)
        except ProtocolError:
            return
        assert parse_job(body.encode()) == body
    with contextlib.suppress(ProtocolError):
        parse_headers(data.decode("utf-8", "replace")[:200])


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
