"""Message ids: uuid4 strings, as the reference uses."""

from __future__ import annotations

import uuid


def new_msgid() -> str:
    """A fresh, unique message id."""
    return str(uuid.uuid4())
