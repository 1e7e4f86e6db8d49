"""The streamed check (``replay_history``: one pass over the file, flat memory) judges exactly as
the in-memory one (``read_history`` + ``check``), on random histories of the protocol model,
mutated so that failing verdicts are compared too, in and out of stream order."""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Callable
from pathlib import Path

import pytest
from histories import resequence, to_events
from hypothesis import given
from hypothesis import strategies as st
from test_checker import PROPERTY, ProtocolModel, protocol_runs

import chaos.history.events as history_module
from chaos.check.checker import check, run_completed
from chaos.history import schema
from chaos.history.events import HistoryOrderError, iter_history, read_history, replay_history


def write(path: Path, records: list[dict[str, str]]) -> Path:
    with open(path, "w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, separators=(",", ":")) + "\n")
    return path


def in_memory_verdict(path: Path) -> dict[str, object]:
    events = read_history(path)
    return check(events, final=run_completed(events)).as_dict()


def streamed_verdict(path: Path) -> dict[str, object]:
    return replay_history(path, lambda events: check(events, final=None)).as_dict()


MUTATIONS = ("none", "drop", "duplicate", "end", "aborted")


def mutate(records: list[dict[str, str]], how: str, rng: random.Random) -> list[dict[str, str]]:
    """Break the history in a way that makes some verdict fail, or end it (normally or not)."""
    records = [dict(record) for record in records]
    if how == "drop" and len(records) > 2:
        del records[rng.randrange(1, len(records))]
    elif how == "duplicate":
        index = rng.randrange(1, len(records))
        records.insert(rng.randrange(index, len(records) + 1), dict(records[index]))
    elif how in ("end", "aborted"):
        records.append({"type": "phase", "phase": "end", "drained": "1",
                        "aborted": "1" if how == "aborted" else "0",
                        "ts": records[-1]["ts"]})
    return resequence(records)


@PROPERTY
@given(protocol_runs(), st.sampled_from(MUTATIONS), st.randoms(use_true_random=False))
def test_the_streamed_check_gives_the_in_memory_verdict(
    tmp_path_factory: pytest.TempPathFactory, model: ProtocolModel, how: str,
    rng: random.Random,
):
    records = mutate(model.h.records(), how, rng)
    path = write(tmp_path_factory.mktemp("replay") / "history.jsonl", records)
    expected = in_memory_verdict(path)
    assert streamed_verdict(path) == expected
    # and out of stream order in the file: the fallback sorts, the verdict is the same
    shuffled = records[:]
    rng.shuffle(shuffled)
    if shuffled != records:
        unordered = write(path.with_name("shuffled.jsonl"), shuffled)
        assert streamed_verdict(unordered) == expected


def test_a_file_out_of_stream_order_is_detected_while_streaming(tmp_path: Path):
    path = write(tmp_path / "history.jsonl", [
        {"seq": "10-0", "type": "enqueue", "id": "a", "ts": "10"},
        {"seq": "9-5", "type": "enqueue", "id": "b", "ts": "9"},
    ])
    with pytest.raises(HistoryOrderError, match=r"history.jsonl:2: stream id 9-5"):
        list(iter_history(path))
    assert [event.seq for event in read_history(path)] == ["9-5", "10-0"]


@pytest.mark.parametrize("ids", [["9-0", "10-0"], ["5-9", "5-10"], ["99-10", "100-1"],
                                 ["1700000000002-998", "1700000000002-999"]])
def test_ids_in_numeric_order_stream_whatever_their_length(tmp_path: Path, ids: list[str]):
    path = write(tmp_path / "history.jsonl", [
        {"seq": seq, "type": "enqueue", "id": seq, "ts": seq.split("-")[0]} for seq in ids])
    assert [event.seq for event in iter_history(path)] == ids
    reversed_path = write(tmp_path / "reversed.jsonl", [
        {"seq": seq, "type": "enqueue", "id": seq, "ts": seq.split("-")[0]}
        for seq in reversed(ids)])
    with pytest.raises(HistoryOrderError):
        list(iter_history(reversed_path))


def test_streaming_skips_a_torn_last_line_and_names_a_broken_one(tmp_path: Path):
    good = '{"seq":"1-0","type":"enqueue","id":"a","ts":"1"}\n'
    torn = tmp_path / "torn.jsonl"
    torn.write_text(good + '{"seq":"2-0","type":"enq')
    assert [event.job_id for event in iter_history(torn)] == ["a"]
    broken = tmp_path / "broken.jsonl"
    broken.write_text(good + '{"seq":"2-0","type"\n' + good)
    with pytest.raises(ValueError, match=r"broken.jsonl:2: not a JSON object"):
        list(iter_history(broken))
    not_object = tmp_path / "list.jsonl"
    not_object.write_text(good + "[1, 2]\n")
    with pytest.raises(ValueError, match=r"list.jsonl:2: not a JSON object"):
        list(iter_history(not_object))


LINE_VALUES = st.one_of(st.text(max_size=6), st.integers(-5, 10**6), st.booleans(), st.none(),
                        st.floats(allow_nan=False, allow_infinity=False),
                        st.lists(st.integers(), max_size=2),
                        st.sampled_from(['a":"b', '":', "1-0", "17-", "-1", "x-1", "claim"]))
LINE_RECORDS = st.dictionaries(
    st.sampled_from(["seq", "type", "ts", "id", "attempt", "worker", "deadline", "lease_ms",
                     "current_attempt", "kind", 'we"ird":', "phase"]),
    LINE_VALUES, max_size=9)


def _outcome(make: Callable[[], object]) -> object:
    try:
        return make()
    except ValueError as error:
        return str(error)


@PROPERTY
@given(LINE_RECORDS | st.lists(st.integers(), max_size=2) | st.text(max_size=4),
       st.sampled_from([(",", ":"), (", ", ": ")]))
def test_the_fast_line_check_accepts_and_rejects_exactly_as_the_precise_one(record, separators):
    line = (json.dumps(record, separators=separators) + "\n").encode()
    parsed = json.loads(line)
    fast = _outcome(lambda: history_module._event(parsed, line, "h.jsonl", 7))
    precise = _outcome(lambda: history_module._checked_event(parsed, "h.jsonl:7"))
    assert fast == precise


@pytest.mark.parametrize("line", [
    b'{"seq":"1-0","type":"enqueue","id":"a","id":5}\n',  # JSON keeps the last duplicate
    b'{"seq":"1-0","type":"enqueue","id":"a\\":","ts":true}\n',  # an escaped quote before ":
    b'{"seq":"1-0","type":"claim","attempt":"1","attempt":1.5}\n',
])
def test_tricky_lines_get_the_precise_check(line: bytes):
    parsed = json.loads(line)
    fast = _outcome(lambda: history_module._event(parsed, line, "h.jsonl", 7))
    precise = _outcome(lambda: history_module._checked_event(parsed, "h.jsonl:7"))
    assert fast == precise


# --- the typed events: every encoder's fields decode back to the same event ----------------
TYPED_EXAMPLES = [
    schema.Enqueue("j1"), schema.Enqueue("j2", kind="poison"),
    schema.Claim("j1", 1, "w1", lease_ms=1000, deadline=2010),
    schema.Claim("j1", 1, "w1", lease_ms=1000, deadline=2010,
                 token="0b6c1e5e-6d1c-4a7e-9d0e-3f1a2b3c4d5e:7"),
    schema.Extend("j1", 1, "w1", lease_ms=1000, deadline=2500, rtt_ms=3),
    schema.Extend("j1", 1, "w1", lease_ms=1000, deadline=2600),
    schema.ExtendRejected("j1", 1, "w1", current_attempt=2, rtt_ms=4),
    schema.Complete("j1", 2, "w2"), schema.CompleteRejected("j1", 1, "w1", current_attempt=2),
    schema.Complete("j1", 3, "w2", target="failed"),
    schema.CompleteRejected("j1", 1, "w1", current_attempt=2, target="delayed"),
    schema.Retry("j1", 1, "w1", to="delayed"), schema.Sweep("w2"), schema.Sweep("w1", ran=False),
    schema.Sweep("w1", client="127.0.0.1:40123"),
    schema.Park("w1", "127.0.0.1:40123", timeout_ms=250), schema.Park("w2"),
    schema.GroupLimit("g1", 3), schema.GroupPause("g2", "admin"), schema.GroupResume("g2"),
    schema.Retry("j1", 1, "w1", to="schedule", due=2200), schema.Enqueue("j3", due=1800),
    schema.Promote("j1", "w3", due=2200), schema.Promote("j1"),
    schema.Enqueue("p1", children=2), schema.Enqueue("c1", parent="p1"),
    schema.Release("p1", "w2"), schema.Release("p2", "w3", to="dead"),
    schema.Remove("j1", "admin", attempt=1), schema.Remove("j2"),
    schema.Reprocess("j1", "admin"), schema.LockMarker("j1", "w1", token="2"),
    schema.LockMarker("j1", "w1", held=False), schema.Reassign("j1", "g2", "admin"),
    schema.Reap("j1", 1, "w1", deadline=2010, stalls=1),
    schema.Dead("j1", 3, "w2", deadline=5010, stalls=3),
    schema.HandlerHog("j1", 1, "w1", duration_ms=4000),
    schema.Run(scenario="s", seed=7, lease_ms=1000, reap_interval_ms=250, reap_limit=100,
               heartbeat_ms=333, tolerance_ms=100, workers=("w1", "w2"), concurrency=4,
               protocol="sound", reapers=1, report_only=("no_loss", "exclusive_lease"),
               wait_replicas=0, max_stalls=3, heartbeat="process"),
    schema.Run(scenario="s", lease_ms=1000, reap_interval_ms=250, sweepers=("w1",),
               reap_rhythm="loop"),
    schema.Phase("chaos"), schema.Phase("end", drained=True, aborted=True, cause="infra"),
    schema.Phase("end", drained=True, held=("JOB1", "JOB2")),
    schema.Phase("capacity-step-2", rate=250.5),
    schema.Fault("f1", "latency", "w1", target="random 1", duration_ms=2000, cuts_off=False,
                 parameters={"latency_ms": "300", "stream": "both"}),
    schema.Fault("f2", "failover", "valkey-1", target="primary", cuts_off=True, killed_ts=90,
                 down_ms=1500, promoted_ms=1200, new_primary="valkey-2"),
    schema.Fault("unplanned-1", "failover", "valkey-2", target="sentinel", killed_ts=2900,
                 down_ms=1300, promoted_ms=1100, new_primary="valkey-1", planned=False),
    schema.Heal("f1", "latency", "w1"), schema.FaultSkipped("kill", "random 1"),
    schema.Blind("transition", "undecoded call", "j1"), schema.Blind("holder", "unattributed"),
]


@pytest.mark.parametrize("typed", TYPED_EXAMPLES, ids=lambda typed: typed.TYPE)
def test_every_typed_event_round_trips_through_a_history_line(tmp_path: Path, typed):
    """As the stream holds it (strings) and history.jsonl keeps it, then decoded again."""
    fields = {name: str(value) for name, value in typed.fields().items()}
    path = write(tmp_path / "history.jsonl", [{"seq": "1500-3", **fields, "ts": "1500"}])
    (event,) = read_history(path)
    assert schema.decode(event) == dataclasses.replace(typed, ts=1500, seq="1500-3")
    assert set(schema.EVENT_TYPES) >= {type(typed).TYPE}


def test_every_event_type_has_an_example_above():
    assert {type(typed) for typed in TYPED_EXAMPLES} == set(schema.EVENT_TYPES.values())


def test_old_histories_decode_with_their_defaults():
    """Lines as older runners wrote them: a fault without ``cuts_off`` (a cut-off fault), an
    empty ``duration_ms``, an end phase without ``aborted``, a type this version does not know."""
    (fault, end, unknown) = to_events(resequence([
        {"type": "fault", "kind": "pause", "worker": "w1", "fault_id": "f1", "duration_ms": "",
         "ts": "5"},
        {"type": "phase", "phase": "end", "drained": "1", "ts": "9"},
        {"type": "note", "text": "hi", "ts": "9"},
    ]))
    decoded = schema.Fault.decode(fault)
    assert decoded.cuts_off and decoded.duration_ms is None and not decoded.is_store
    assert schema.Phase.decode(end).ended_normally
    assert schema.decode(unknown) is None


def _long_history(rng: random.Random, lines: int) -> list[dict[str, str]]:
    """Many blocks' worth of lines (the reader decodes ~64 KB at a time): counters of every
    length in one millisecond, and unusual lines among the usual ones (an extend's rtt_ms, a
    poison enqueue's kind, a reap's stalls, runner events, a worker of "")."""
    records: list[dict[str, str]] = []
    ms, counter = 1_700_000_000_000, 0
    for index in range(lines):
        if rng.random() < 0.3:
            ms, counter = ms + rng.choice((1, 1, 7, 1000)), 0
        seq = f"{ms}-{counter}"
        counter += rng.choice((1, 1, 1, 9, 90))
        roll = rng.random()
        record = {"seq": seq, "type": "claim", "id": f"job-{index}", "attempt": "1",
                  "worker": "w1", "lease_ms": "1000", "deadline": str(ms + 1000), "ts": str(ms)}
        if roll < 0.02:
            record = {"seq": seq, "type": "fault", "kind": "kill", "worker": "w2",
                      "fault_id": f"f{index}", "ts": str(ms)}
        elif roll < 0.1:
            record = {**record, "type": "extend", "rtt_ms": rng.choice(("", "3"))}
        elif roll < 0.12:
            record = {"seq": seq, "type": "enqueue", "id": f"job-{index}", "kind": "poison",
                      "ts": str(ms)}
        elif roll < 0.14:
            record = {"seq": seq, "type": "reap", "id": f"job-{index}", "attempt": "1",
                      "worker": "", "stalls": "2", "ts": str(ms)}
        records.append(record)
    return records


@pytest.mark.parametrize("seed", range(3))
def test_the_block_reader_reads_exactly_what_the_line_reader_reads(tmp_path: Path, seed: int):
    """Blocks decoded in C and vetted in bulk give the very events, fields in the same places,
    that a line at a time gives; a broken order or a bad id deep in a later block is named by
    its own line."""
    rng = random.Random(seed)
    records = _long_history(rng, 6000)
    path = write(tmp_path / "history.jsonl", records)
    assert path.stat().st_size > 8 * 2**16  # many blocks
    streamed = list(iter_history(path))
    assert streamed == read_history(path) and len(streamed) == len(records)
    assert all(event.moved_rtt_ms is event.moved_kind is event.moved_stalls is None
               for event in streamed)
    assert [event.extra.get("rtt_ms") for event in streamed] == [
        record.get("rtt_ms") for record in records]
    assert {event.worker for event in streamed if event.type == "reap"} == {None}
    # every line unusual (a monitor history names each call's connection): line by line
    monitored = write(tmp_path / "monitored.jsonl", [{**r, "conn": "c1"} for r in records])
    assert list(iter_history(monitored)) == read_history(monitored)
    assert {event.extra.get("conn") for event in iter_history(monitored)} == {"c1"}
    victim = rng.randrange(4000, 5990)
    swapped = [*records]
    swapped[victim], swapped[victim + 1] = swapped[victim + 1], swapped[victim]
    if swapped[victim]["seq"] != swapped[victim + 1]["seq"]:
        with pytest.raises(HistoryOrderError, match=rf"swapped.jsonl:{victim + 2}: "):
            list(iter_history(write(tmp_path / "swapped.jsonl", swapped)))
    bad = [*records]
    bad[victim] = {**bad[victim], "seq": bad[victim]["seq"].replace("-", "x")}
    with pytest.raises(ValueError, match=rf"bad.jsonl:{victim + 1}: seq = "):
        list(iter_history(write(tmp_path / "bad.jsonl", bad)))
