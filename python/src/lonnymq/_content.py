"""Turning Python values into message content (bytea) and back.

The extension stores opaque bytes; the client only picks an encoding for convenience:
bytes as given, str as UTF-8, dict/list as compact JSON.
"""

from __future__ import annotations

import json
from typing import Any, TypeAlias

Content: TypeAlias = bytes | bytearray | memoryview | str | dict[str, Any] | list[Any]


def encode(value: Content) -> bytes:
    """Encode content or state for the database."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, dict | list):
        # Compact separators keep stored payloads small; key order is the caller's.
        return json.dumps(value, separators=(",", ":")).encode("utf-8")
    raise TypeError(f"content must be bytes, str, dict or list, not {type(value).__name__}")


def encode_optional(value: Content | None) -> bytes | None:
    """Encode an optional value; None stays NULL (e.g. "keep the previous state")."""
    return None if value is None else encode(value)


def decode_json(value: bytes | None) -> Any:
    """Decode JSON content; None when there is no content."""
    return None if value is None else json.loads(value)
