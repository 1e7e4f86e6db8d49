"""The recorder's hot path reads exactly what the plain reading did: ``parse_line`` (indices,
arguments split at '" "', escapes undone only where there are some) against the straightforward
reader it replaced (partitions, a regex over the quoted arguments, every argument unescaped),
on tricky lines and on every kind of byte an argument can hold as the server writes it; and the
history's JSON lines, by orjson where that gives the same bytes, against ``json.dumps``."""

from __future__ import annotations

import json
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from chaos.history.monitor import _json_line, parse_line

# --- the reference: the reader parse_line replaced, as it was -------------------------------
_ESCAPE = re.compile(r'\\(x[0-9a-fA-F]{2}|.)')
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "a": "\a", "b": "\b"}


def _unescape(match: re.Match[str]) -> str:
    code = match.group(1)
    if code[0] == "x" and len(code) == 3:
        return chr(int(code[1:], 16))
    return _ESCAPES.get(code, code)


def reference_parse_line(line: str) -> tuple[int, str, list[str]] | None:
    if not line.startswith("+") or " [" not in line:
        return None
    stamp, _, rest = line[1:].partition(" [")
    client, _, quoted = rest.partition("] ")
    seconds, _, micros = stamp.partition(".")
    if not (seconds.isdigit() and micros.isdigit() and quoted.startswith('"')):
        return None
    if "\\" in quoted:
        args = [_ESCAPE.sub(_unescape, arg).encode("latin-1").decode("utf-8", "replace")
                for arg in _QUOTED.findall(quoted)]
    else:
        args = quoted[1:-1].split('" "')
    return int(seconds) * 1_000_000 + int(micros), client.partition(" ")[2], args


# --- what the server writes: sdscatrepr of each argument's bytes ----------------------------
_REPR = {ord("\\"): "\\\\", ord('"'): '\\"', ord("\n"): "\\n", ord("\r"): "\\r",
         ord("\t"): "\\t", 7: "\\a", 8: "\\b"}


def sdscatrepr(data: bytes) -> str:
    return '"' + "".join(_REPR.get(byte) or (chr(byte) if 0x20 <= byte <= 0x7E
                                              else f"\\x{byte:02x}") for byte in data) + '"'


def monitor_line(args: list[bytes], client: str = "127.0.0.1:50312",
                 stamp: str = "1796321320.893710") -> str:
    return f"+{stamp} [0 {client}] " + " ".join(sdscatrepr(arg) for arg in args)


def outcome(parse, line: str) -> object:
    """What a reader makes of ``line``: its result, or the kind of error it raised."""
    try:
        return parse(line)
    except Exception as error:  # both must fail alike on a line no server writes
        return type(error)


TRICKY = [
    "+OK", "", "+", "+1.2", "+1.2 [", "+1.2 [0 lua]", '+1.2 [0 lua] "', '+1.2 [0 lua] ""',
    '+1796321320.893761 [0 lua] "TIME"',
    '+1796321320.893761 [3 lua] "HSET" "k" "payload" "say \\"hi\\"\\n\\t\\xc3\\xa9"',
    '+1796321320.893761 [0 [::1]:6379] "PING"',  # IPv6: a "]" inside the client
    '+1796321320.893761 [0 unix:/tmp/valkey.sock] "GET" "a b"',
    '+1796321320.893761 [0 127.0.0.1:1] "SET" "k" "\\\\"',  # an argument that is one backslash
    '+1796321320.893761 [0 127.0.0.1:1] "SET" "k\\\\" "v"',  # ... ending in one
    '+1796321320.893761 [0 127.0.0.1:1] "SET" "\\" \\"" "v"',  # '" "' escaped inside an arg
    '+1796321320.893761 [0 127.0.0.1:1] "SET" "" "" ""',
    '+1796321320.893761 [0 127.0.0.1:1] "SET" "\\x00\\xff\\xFF\\x7f" "\\xe2\\x82"',  # bad UTF-8
    # Never the server's, read alike all the same: unknown and broken escapes, stray quotes,
    # no closing quote, text after it, odd stamps, a backslash before a newline.
    '+1796321320.893761 [0 lua] "A" "\\q\\x4" "\\xZZ"',
    '+1796321320.893761 [0 lua] "A" "b"c" "d"', '+1.2 [0 lua] "A" "b"c" "\\n"',
    '+1796321320.893761 [0 lua] "A" "b\\"',
    '+1796321320.893761 [0 lua] "A" "b\\" tail', '+1796321320.893761 [0 lua] "A\\" "b" x',
    '+1.2 [0 lua] "\\', '+1.2 [0 lua] "a\\\nb"', '+1.2.3 [0 lua] "A"', '+a.2 [0 lua] "A"',
    '+1.2 [0 lua]  "A"', '+1.2 [lua] "A"', '+1.2  [0 lua] "A"', "+1.2 [0 lua] 'A'",
    '+1.2 [0 lua] "é" "\\x41"', '+1.2 [0 lua] "é"', '+1.2 [0 lua] "€" "\\n"',
    '+²3.4 [0 lua] "A"', '+²3.123456 [0 lua] "A"', '+٣.١٢٣٤٥٦ [0 lua] "A"',
    '+1.2 [0 a] b] "A"', '+1.2 [0 a]] "A" "\\\\"', '+1.2 x] "a" [0 lua] "b"',
    '+1.2 [0 lua] "A" "b\\" "', '+1.2 [0 lua]] "A"', '+1.2 [[0 lua] "A"',
]


def test_parse_line_reads_tricky_lines_as_the_plain_reading_did():
    for line in TRICKY:
        assert outcome(parse_line, line) == outcome(reference_parse_line, line), line


@settings(max_examples=400, deadline=None)
@given(st.lists(st.binary(max_size=40), min_size=1, max_size=8),
       st.sampled_from(["lua", "127.0.0.1:50312", "[::1]:6379", "unix:/tmp/v.sock"]))
def test_any_arguments_the_server_writes_read_back_as_their_bytes(args: list[bytes],
                                                                   client: str):
    line = monitor_line(args, client)
    parsed = parse_line(line)
    assert parsed == reference_parse_line(line)
    assert parsed == (1796321320893710, client,
                      [arg.decode("utf-8", "replace") for arg in args])


@settings(max_examples=600, deadline=None)
@given(st.text(alphabet='+0123456789. []"\\xaAfFnrtbq:lué€\x00\n', max_size=40))
def test_any_line_reads_as_the_plain_reading_did(tail: str):
    for line in (tail, "+1796321320.893761 [0 lua] " + tail, '+1.2 [0 lua] "' + tail,
                 '+1.2 [0 lua] "A" "' + tail + '"'):
        assert outcome(parse_line, line) == outcome(reference_parse_line, line), line


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=8), st.text(max_size=12), max_size=6))
def test_a_history_line_is_what_json_dumps_writes(record: dict[str, str]):
    assert _json_line(record) == json.dumps(record, separators=(",", ":")) + "\n"


def test_a_history_line_with_what_orjson_writes_otherwise_falls_back():
    for value in ("é", "\x7f", "€", "\ud800", 'q"\\\n\t\x00\x1f', ""):
        record = {"seq": "1-0", "type": "enqueue", "id": value}
        assert _json_line(record) == json.dumps(record, separators=(",", ":")) + "\n"
