"""decode_json scans text without surrounding whitespace once (its fast path) and gives
exactly what JSONDecoder.decode gives, value or error, for anything else."""

from __future__ import annotations

import json
from typing import Any

import pytest

from django_eventmq.errors import InvalidJob
from django_eventmq.protocol import decode_json


def _reference(text: str | bytes) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    decoder = json.JSONDecoder(parse_constant=refuse)
    try:
        value = decoder.decode(text.decode() if isinstance(text, bytes) else text)
    except (ValueError, RecursionError) as exc:
        return ("error", f"message is not valid JSON: {exc}")
    return ("value", value)


CASES = [
    '{"value":1}',
    ' {"value":1}',
    '{"value":1} ',
    "\n[1,2]\t",
    "[1,2]x",
    "[1,2] [3]",
    "",
    "   ",
    "x",
    "NaN",
    "[Infinity]",
    "[-Infinity]",
    '{"a":NaN}',
    '"text"',
    "12",
    "12 ",
    "1.5e3",
    "-",
    "[1,",
    '{"a":1,}',
    '["\\ud800"]',
    b'{"value":"\xc3\xa9"}',
    b'{"value":"\xff"}',
    b" [1] ",
    "null",
    "true false",
]


@pytest.mark.parametrize("text", CASES)
def test_same_value_or_error_as_the_decoder(text: str | bytes) -> None:
    try:
        got = ("value", decode_json(text))
    except InvalidJob as exc:
        got = ("error", str(exc))
    assert got == _reference(text)


def test_depth_and_size_checks_stay() -> None:
    with pytest.raises(InvalidJob, match="nested deeper than 3 levels"):
        decode_json("[[[1]]]", max_depth=3)  # the 1 is the third level's value, at depth 4
    assert decode_json("[[1]]", max_depth=3) == [[1]]
    with pytest.raises(InvalidJob, match="nested deeper than 3 levels"):
        decode_json(b"[[[1]]]", max_depth=3)
    with pytest.raises(InvalidJob, match="larger than 4 bytes"):
        decode_json("[1,2]", max_bytes=4)
