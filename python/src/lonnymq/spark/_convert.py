"""Turning Spark columns into message fields: which columns map to what, and content bytes.

Content may be binary (taken as is), string (UTF-8) or anything else (JSON: structs become
objects, maps objects, arrays lists). The mapping is resolved once on the driver against the
DataFrame's schema, so a misspelt column fails before any task starts.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._options import OptionError, Options

# How content is encoded: bytes as they are, text as UTF-8, anything else as JSON.
BINARY, STRING, JSON = "binary", "string", "json"


@dataclass(frozen=True)
class ColumnMapping:
    channel: str | None
    content: str
    content_kind: str
    dequeue_at: str | None
    dedup_key: str | None


def _field(schema: Any, name: str) -> Any:
    # Spark column names are case-insensitive by default; match exactly first.
    for f in schema.fields:
        if f.name == name:
            return f
    for f in schema.fields:
        if f.name.lower() == name.lower():
            return f
    return None


def resolve_columns(schema: Any, opts: Options) -> ColumnMapping:
    """Checks the DataFrame schema against the column options."""
    from pyspark.sql.types import BinaryType, StringType, TimestampNTZType, TimestampType

    names = ", ".join(f.name for f in schema.fields)
    content = _field(schema, opts.content_column)
    if content is None:
        raise OptionError(
            f"content column {opts.content_column!r} not found (columns: {names}); "
            "set option content_column"
        )
    if isinstance(content.dataType, BinaryType):
        kind = BINARY
    elif isinstance(content.dataType, StringType):
        kind = STRING
    else:
        kind = JSON

    def optional(name: str, explicit: bool, what: str) -> str | None:
        f = _field(schema, name)
        if f is None and explicit:
            raise OptionError(f"{what} column {name!r} not found (columns: {names})")
        return None if f is None else str(f.name)

    channel = optional(opts.channel_column, opts.channel_explicit, "channel")
    dequeue_at = optional(opts.dequeue_at_column, opts.dequeue_at_explicit, "dequeue_at")
    if dequeue_at is not None:
        t = _field(schema, dequeue_at).dataType
        if not isinstance(t, (TimestampType, TimestampNTZType)):
            raise OptionError(f"dequeue_at column {dequeue_at!r} must be a timestamp, not {t}")
    dedup_key = optional(opts.dedup_key_column, opts.dedup_key_explicit, "dedup_key")
    return ColumnMapping(channel, str(content.name), kind, dequeue_at, dedup_key)


def _jsonable(value: Any) -> Any:
    """Plain JSON values from what Arrow's to_pylist() or Spark Rows give."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if hasattr(value, "asDict"):  # pyspark Row
        return {k: _jsonable(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        # Arrow gives maps as lists of (key, value) pairs.
        if value and all(isinstance(p, tuple) and len(p) == 2 for p in value):
            return {str(k): _jsonable(v) for k, v in value}
        return [_jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    return str(value)


def to_json_bytes(value: Any) -> bytes | None:
    if value is None:
        return None
    return json.dumps(_jsonable(value), separators=(",", ":"), ensure_ascii=False).encode()


def content_encoder(kind: str) -> Callable[[Any], bytes | None]:
    """Encoder for single values (the Row path)."""
    if kind == BINARY:
        return lambda v: None if v is None else bytes(v)
    if kind == STRING:
        return lambda v: None if v is None else str(v).encode()
    return to_json_bytes


def arrow_contents(column: Any, kind: str) -> list[bytes | None]:
    """A whole Arrow column of content as bytes (the Arrow path)."""
    import pyarrow as pa

    if kind == STRING:
        # string -> binary is a zero-copy cast in Arrow.
        target = pa.large_binary() if pa.types.is_large_string(column.type) else pa.binary()
        return list(column.cast(target).to_pylist())
    if kind == BINARY:
        return list(column.to_pylist())
    return [to_json_bytes(v) for v in column.to_pylist()]
