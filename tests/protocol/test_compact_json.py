"""compact_json: the reused C encoder writes what JSONEncoder would, and refuses the same."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from django_eventmq.protocol.payload import compact_json

SLOW = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(), inner, max_size=5)
    ),
    max_leaves=30,
)


@given(json_values)
def test_it_writes_exactly_what_the_standard_encoder_writes(value: Any) -> None:
    assert compact_json(value) == SLOW(value)


def _circular() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


@pytest.mark.parametrize(
    ("value", "error", "says"),
    [
        (float("nan"), ValueError, "Out of range float"),
        ({"x": float("inf")}, ValueError, "Out of range float"),
        ({"x": {1, 2}}, TypeError, "set is not JSON serializable"),
        ({1j: 1}, TypeError, "keys must be"),
        (_circular(), ValueError, "Circular reference"),
    ],
)
def test_it_refuses_what_the_standard_encoder_refuses(
    value: Any, error: type[Exception], says: str
) -> None:
    with pytest.raises(error, match=says):
        SLOW(value)
    with pytest.raises(error, match=says):
        compact_json(value)
    assert compact_json({"after": [1]}) == '{"after":[1]}'  # and it still works
