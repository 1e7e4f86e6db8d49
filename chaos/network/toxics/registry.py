"""Every toxic kind by the name the API knows it under (Toxiproxy's ``toxics.Register``), and
decoding a toxic's attributes the way Go decodes them into the kind's struct."""

from __future__ import annotations

from typing import Any

from chaos.network.gojson import expect_int, object_fields
from chaos.network.toxics import (
    bandwidth,
    latency,
    limit_data,
    reset_peer,
    slicer,
    slow_close,
    timeout,
)
from chaos.network.toxics.toxic import ToxicKind

TOXIC_KINDS: dict[str, ToxicKind] = {module.KIND.name: module.KIND for module in (
    latency, bandwidth, slow_close, timeout, reset_peer, slicer, limit_data)}


def decode_attributes(value: Any, kind: ToxicKind, into: dict[str, int]) -> None:
    """Decode ``attributes`` over ``into`` (absent keys keep their values, unknown ones are
    ignored), like Go decoding into the toxic's struct."""
    fields = object_fields(value, kind.attributes, f"toxics.{kind.go_struct}")
    for name, item in fields.items():
        into[name] = expect_int(item, f"{kind.go_struct}.attributes.{name}")
