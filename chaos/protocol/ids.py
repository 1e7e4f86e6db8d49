"""Job ids a queue under test accepts.

``plain``: ``job-0000001`` (the reference queue and BullMQ take any id). ``branded``: EchoMQ's
14-byte ids (docs/echomq.md): a three-capital namespace (``JOB``) and 11 base62 digits
(``0-9A-Za-z``, most significant first, padded with ``0``) of a 63-bit snowflake: milliseconds
since 2024-01-01T00:00:00Z shifted left 22, then a 10-bit node, then a 12-bit sequence. EchoMQ
refuses any other id before it sends an extend, complete or enqueue. Text order is number order,
so ids minted later sort later, as EchoMQ's pending set (every score 0) relies on.

Each minting process takes a node of its own (two processes minting in one millisecond with one
node would make one id twice, and the second enqueue would be refused as a duplicate).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
EPOCH_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
NAMESPACE = "JOB"
DIGITS = 11
NODE_BITS, SEQUENCE_BITS = 10, 12
ID_STYLES = ("plain", "branded")


def base62(number: int, width: int = DIGITS) -> str:
    if number < 0:
        raise ValueError(f"{number}: a branded id is never negative")
    digits = []
    while number:
        number, digit = divmod(number, 62)
        digits.append(BASE62[digit])
    text = "".join(reversed(digits)).rjust(width, "0")
    if len(text) > width:
        raise ValueError(f"{text}: more than {width} base62 digits")
    return text


def snowflake(branded: str) -> tuple[int, int, int]:
    """(unix ms, node, sequence) of a branded id (raises ValueError for any other id)."""
    if len(branded) != len(NAMESPACE) + DIGITS or not branded[:3].isupper() \
            or not branded[:3].isalpha() or any(c not in BASE62 for c in branded[3:]):
        raise ValueError(f"{branded!r}: not a branded id (3 capitals and {DIGITS} base62 "
                         "digits)")
    number = 0
    for char in branded[3:]:
        number = number * 62 + BASE62.index(char)
    if number >= 1 << 63:
        raise ValueError(f"{branded!r}: past the 63-bit snowflake range")
    return ((number >> (NODE_BITS + SEQUENCE_BITS)) + EPOCH_MS,
            (number >> SEQUENCE_BITS) & ((1 << NODE_BITS) - 1),
            number & ((1 << SEQUENCE_BITS) - 1))


class BrandedIds:
    """Mints branded ids for one node: strictly increasing, however fast it is called (the
    sequence carries into the milliseconds), and never backwards if the clock steps back."""

    def __init__(self, node: int, clock_ms: Callable[[], int] | None = None) -> None:
        if not 0 <= node < 1 << NODE_BITS:
            raise ValueError(f"node {node}: expected 0..{(1 << NODE_BITS) - 1}")
        self.node = node
        self.clock_ms = clock_ms or (lambda: time.time_ns() // 1_000_000)
        self.last = -1  # (ms since the epoch) << SEQUENCE_BITS | sequence, last minted

    def __call__(self, _number: int = 0) -> str:
        stamp = max((self.clock_ms() - EPOCH_MS) << SEQUENCE_BITS, self.last + 1)
        self.last = stamp
        ms, sequence = stamp >> SEQUENCE_BITS, stamp & ((1 << SEQUENCE_BITS) - 1)
        number = (ms << (NODE_BITS + SEQUENCE_BITS)) | (self.node << SEQUENCE_BITS) | sequence
        return NAMESPACE + base62(number)


def plain_id(number: int) -> str:
    return f"job-{number:07d}"


_NODES = itertools.count()


def id_maker(style: str, node: int | None = None) -> Callable[[int], str]:
    """The ``style`` of ids as a function of the job's number (1, 2, ...); ``node``: the
    branded ids' node (default: a new one per maker in this process)."""
    if style == "plain":
        return plain_id
    if style == "branded":
        return BrandedIds(next(_NODES) % (1 << NODE_BITS) if node is None else node)
    raise ValueError(f"id style {style!r}: expected one of {', '.join(ID_STYLES)}")
