"""JSON the way Go's ``encoding/json`` reads and writes it, so bodies match Toxiproxy's: compact
output with Go's escapes, case-insensitive field names, Go's type-error wording."""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from typing import Any

from chaos.network.api_errors import ApiError, bad_request_body


def go_json(value: Any) -> bytes:
    """Compact JSON, with Go's HTML-safe escapes (``<``, ``>``, ``&``) and raw UTF-8."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    for char, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                         ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(char, escape)
    return text.encode()


def decode_body(body: bytes) -> Any:
    """The first JSON value of a request body (Go's ``json.Decoder`` ignores what follows it)."""
    text = body.decode("utf-8", errors="replace").lstrip(" \t\r\n")
    if not text:
        raise bad_request_body("EOF")
    try:
        value, _ = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError as error:
        if error.pos >= len(text):
            raise bad_request_body("unexpected EOF") from None
        raise bad_request_body(
            f"invalid character {text[error.pos]!r} looking for beginning of value"
        ) from None
    return value


_GO_KIND = {str: "string", bool: "bool", int: "number", float: "number", list: "array",
            dict: "object"}


def go_kind(value: Any) -> str:
    """What Go's type errors call a JSON value: "string", "number", "object" …"""
    return _GO_KIND.get(type(value), "value")


def type_error(value: Any, where: str, go_type: str) -> ApiError:
    kind = go_kind(value)
    if kind == "number":
        kind = f"number {json.dumps(value)}"
    return bad_request_body(
        f"json: cannot unmarshal {kind} into Go struct field {where} of type {go_type}"
    )


def object_fields(value: Any, names: Sequence[str], where: str) -> dict[str, Any]:
    """The known fields of a JSON object, matched case-insensitively like Go (last one wins).
    A JSON ``null`` leaves a field as it was, so those are left out."""
    if not isinstance(value, dict):
        raise bad_request_body(
            f"json: cannot unmarshal {go_kind(value)} into Go value of "
            f"type {where}"
        )
    by_folded = {name.lower(): name for name in names}
    fields: dict[str, Any] = {}
    for key, item in value.items():
        name = by_folded.get(key.lower())
        if name is not None and item is not None:
            fields[name] = item
    return fields


def expect_str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise type_error(value, where, "string")
    return value


def expect_bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise type_error(value, where, "bool")
    return value


def expect_int(value: Any, where: str) -> int:
    # A JSON number with a fraction or an exponent does not fit Go's int64 (Python: float).
    if type(value) is not int or not -(1 << 63) <= value < (1 << 63):
        raise type_error(value, where, "int64")
    return value


def float32(value: float) -> float:
    """``value`` rounded to the nearest float32, as Toxiproxy stores toxicity."""
    result: float = struct.unpack("f", struct.pack("f", value))[0]
    return result


def expect_float32(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise type_error(value, where, "float32")
    try:
        return float32(float(value))
    except OverflowError:
        raise type_error(value, where, "float32") from None


def go_float32_json(value: float) -> int | float:
    """The number Go's encoder writes for a float32: its shortest round-trip form, ``1`` not
    ``1.0``."""
    text = repr(value)
    for digits in range(1, 10):
        candidate = f"{value:.{digits}g}"
        if float32(float(candidate)) == value:
            text = candidate
            break
    number = float(text)
    return int(number) if number.is_integer() and abs(number) < 1e21 else number

