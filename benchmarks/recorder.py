"""The MONITOR recorder (``chaos.history.monitor``, ``history.source = "monitor"``): how fast it
decodes, and what it costs the server, against baselines from the same run.

Offline decode (the decoder's own speed, nothing else on the line): one MONITOR capture of a
short run on a throwaway valkey-server (``jobs`` enqueues with the load's JSON payloads, so the
quotes come escaped as in a real feed, then ``jobs`` claim + extend + complete by one named
worker, every call through ``QueueClient``), decoded by ``chaos.history.monitor.decode_lines``
into a ``HistoryWriter``, as the recorder does, in alternating rounds by both paths of the
``echomq`` dialect: decode by effect (``EchoMQ(fast_path=False)``, how a foreign SUT's calls are
read) and the SHA1 fast path (our own scripts known by their SHA1). Figure: the effect path's
decoded events per CPU second of the decoding thread over the fast path's, medians of the
rounds (robust to the shared machine's other processes taking the core; the wall-clock rates
are in the note); issue 27 asks for >= 1 and 40,000 events/s (a fixed rate: in the note,
beside the absolute figures).

Grouped capture (issue 36: >= 40,000 events/s on a grouped capture): the same decode by effect
of a capture of EchoMQ's group lanes, through the example SUT's scripts
(``sut/node-echomq-real/lua``: ``genqueue`` into three groups' lanes, ``gclaim`` turning the
ring, ``extend_locks``, ``complete``: each job settled through its lane), against the flat
capture's rate by effect in the same rounds.

Live, rounds alternating: ``redis-benchmark`` runs the claim script at the server's ceiling (32
connections x 32 pipelined) on a prefilled queue, with nothing attached (the scripts source:
each claim XADDs its own event), with a ``MonitorRecorder`` decoding by the fast path and with
one decoding by effect. Figures:

* the server's claims/s with a recorder attached vs without (what MONITOR costs the server);
* the recorder's ceiling: events it decoded and wrote per second, from the benchmark's start
  until it had read its end marker (so a recorder that falls behind pays its catch-up), vs the
  events/s the server produced without it.
"""

from __future__ import annotations

import io
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import (
    Row,
    address,
    fill,
    median,
    redis_benchmark,
    redis_benchmark_missing,
    valkey_server,
)
from benchmarks.queue_path import CEILING_CLIENTS, CEILING_PIPELINE, LEASE_MS, claim_command
from chaos.history.dialects.echomq import EchoMQ
from chaos.history.monitor import (
    HistoryWriter,
    MonitorRecorder,
    RecorderHealth,
    decode_lines,
    parse_line,
    resp_command,
)
from chaos.protocol.client import QueueClient, QueueKeys, connect
from chaos.reference.payload import HandlerDistribution, PayloadMaker
from chaos.runtime.valkey import ValkeyServer

ISSUE_TARGET_EVENTS_PER_S = 40_000  # issue 27, point 8: a fixed rate, this machine's to meet
_CAPTURE_END = "benchmarks:capture-end"
_WORKER = "worker-1"
PATHS = ("fast", "effect")  # the echomq dialect's SHA1 fast path; decode by effect


def monitored(server: ValkeyServer, drive: Callable[[Any], None]) -> list[str]:
    """The MONITOR lines (CRLF split off, as the recorder splits them) of what ``drive`` does
    with a client named ``worker-1``, up to an end marker it is followed by."""
    host, port = address(server)
    feed = socket.create_connection((host, port), timeout=30)
    feed.sendall(resp_command("AUTH", server.password) + resp_command("MONITOR"))
    data = bytearray()
    marker = _CAPTURE_END.encode()

    def read() -> None:  # MONITOR's buffer has no limit: read along anyway, as a recorder does
        while True:
            chunk = feed.recv(1 << 20)
            if not chunk:
                return
            data.extend(chunk)
            if marker in data[-(len(chunk) + len(marker)):]:
                return

    reader = threading.Thread(target=read, name="capture", daemon=True)
    reader.start()
    client = connect(server.url, server.password)
    try:
        client.client_setname(_WORKER)
        drive(client)
        client.echo(_CAPTURE_END)
        reader.join(timeout=60)
    finally:
        client.close()
        feed.close()
    reader.join(timeout=5)
    lines = bytes(data).decode("utf-8", "replace").split("\r\n")
    end = next((i for i, line in enumerate(lines) if _CAPTURE_END in line), None)
    if end is None:
        raise RuntimeError("capture: the end marker never came through MONITOR")
    return lines[:end]


def capture(server: ValkeyServer, keys: QueueKeys, jobs: int) -> list[str]:
    """``jobs`` enqueues and ``jobs`` claim + extend + complete, through ``QueueClient``: what
    both paths decode."""

    def drive(client: Any) -> None:
        queue = QueueClient(client, keys)
        payloads = PayloadMaker(HandlerDistribution(), 16, seed=1)
        for number in range(jobs):
            queue.enqueue(f"j{number}", payloads.make())
        for _ in range(jobs):
            claimed = queue.claim(LEASE_MS, _WORKER)
            if claimed is None:
                raise RuntimeError("capture: the queue ran dry before every job was claimed")
            queue.extend(claimed.job_id, claimed.attempt, LEASE_MS, _WORKER)
            queue.complete(claimed.job_id, claimed.attempt, _WORKER)

    return monitored(server, drive)


SUT_LUA = Path(__file__).resolve().parent.parent / "sut" / "node-echomq-real" / "lua"
GROUPS = ("g1", "g2", "g3")


def capture_grouped(server: ValkeyServer, keys: QueueKeys, jobs: int) -> list[str]:
    """``jobs`` grouped admissions (round the groups) and ``jobs`` grouped claim + extend +
    complete, by the example SUT's own scripts."""
    base = keys.base

    def drive(client: Any) -> None:
        shas = {name: client.script_load((SUT_LUA / f"{name}.lua").read_text())
                for name in ("genqueue", "gclaim", "extend_locks", "complete")}
        payloads = PayloadMaker(HandlerDistribution(), 16, seed=1)
        for number in range(jobs):
            group = GROUPS[number % len(GROUPS)]
            client.evalsha(shas["genqueue"], 7, f"{base}job:JOB{number}",
                           f"{base}g:{group}:pending", f"{base}ring", f"{base}paused",
                           f"{base}glimit", f"{base}gactive", f"{base}wake",
                           f"JOB{number}", payloads.make(), group)
        for _ in range(jobs):
            reply = client.evalsha(shas["gclaim"], 2, f"{base}ring", keys.active, base,
                                   str(LEASE_MS))
            if not reply:
                raise RuntimeError("capture: the lanes ran dry before every job was claimed")
            job_id, token = str(reply[0]), str(reply[2])  # (the client decodes replies)
            client.evalsha(shas["extend_locks"], 1, keys.active, base, str(LEASE_MS), job_id,
                           token)
            client.evalsha(shas["complete"], 2, keys.active, f"{base}job:{job_id}", job_id,
                           token, base)

    return monitored(server, drive)


def decode_rate(lines: list[str], keys: QueueKeys, path: str) -> tuple[float, float,
                                                                      RecorderHealth]:
    """Events per CPU second of this thread and per wall second that ``decode_lines`` gets
    from ``lines`` by one path of the echomq dialect, written to memory (the recorder writes
    to a file)."""
    health = RecorderHealth("echomq")
    dialect = EchoMQ(keys.prefix, keys.queue, LEASE_MS, fast_path=path == "fast")
    writer = HistoryWriter(dialect, io.StringIO(), health)
    cpu, wall = time.thread_time(), time.perf_counter()
    decode_lines(lines, writer)
    cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    return health.events / cpu, health.events / wall, health


def parse_cpu_seconds(lines: list[str]) -> float:
    started = time.thread_time()
    for line in lines:
        parse_line(line)
    return time.thread_time() - started


def measure_decode(server: ValkeyServer, jobs: int, rounds: int) -> dict[str, Any]:
    """The two paths on one capture, rounds alternating. The figure is per CPU second of the
    decoding thread: the decoder is one thread on one core, and another developer's process
    taking that core for a while (this machine is shared) stops its clock, where a wall
    clock would charge the round whose turn it was; the wall-clock rates are in the note."""
    keys = QueueKeys("bench:", "decode")
    lines = capture(server, keys, jobs)
    rates: dict[str, list[float]] = {path: [] for path in PATHS}  # per CPU second
    walls: dict[str, list[float]] = {path: [] for path in PATHS}  # per wall second
    parse_share: list[float] = []  # parse_line alone, as a share of the effect path's CPU
    for number in range(rounds):
        for path in PATHS if number % 2 == 0 else PATHS[::-1]:
            rate, wall, health = decode_rate(lines, keys, path)
            if (health.events != 4 * jobs or health.undecoded_calls or health.unreadable_lines
                    or health.calls_not_run):
                raise RuntimeError(f"the {path} path did not decode the capture: "
                                   f"{health.as_dict()}")
            rates[path].append(rate)
            walls[path].append(wall)
            if path == "effect":
                parse_share.append(parse_cpu_seconds(lines) / (health.events / rate))
    effect, fast = median(rates["effect"]), median(rates["fast"])
    effect_wall, fast_wall = median(walls["effect"]), median(walls["fast"])
    met = "met" if effect >= ISSUE_TARGET_EVENTS_PER_S else "NOT met"
    row = Row("recorder", "offline decode events/s: by effect vs the SHA1 fast path",
              effect, "events/s", fast,
              f"the SHA1 fast path's, the same {len(lines):,} captured lines ({4 * jobs:,} "
              "events), rounds alternating, per CPU second of the decoding thread",
              target=(">=", 1.0),
              note=f"issue 27's {ISSUE_TARGET_EVENTS_PER_S:,} events/s (a fixed rate, not a "
                   f"same-run ratio): {met} by effect, {effect:,.0f} per CPU second "
                   f"({effect_wall:,.0f} per wall second; fast path {fast_wall:,.0f}); "
                   f"parse_line alone {median(parse_share):.0%} of the effect path's CPU")
    grouped = measure_grouped_decode(server, jobs, rounds, lines, keys)
    return {"rows": [row, grouped["row"]],
            "raw": {"jobs": jobs, "lines": len(lines), "events": 4 * jobs,
                    "events_per_cpu_s": rates, "events_per_wall_s": walls,
                    "parse_share": parse_share, "grouped": grouped["raw"]}}


def measure_grouped_decode(server: ValkeyServer, jobs: int, rounds: int, flat_lines: list[str],
                           flat_keys: QueueKeys) -> dict[str, Any]:
    """Decode by effect of a grouped capture vs the flat capture's, rounds alternating."""
    keys = QueueKeys("emq:", "grouped")
    lines = capture_grouped(server, keys, jobs)
    rates: dict[str, list[float]] = {"grouped": [], "flat": []}
    for number in range(rounds):
        order = (("grouped", lines, keys), ("flat", flat_lines, flat_keys))
        for name, capture_lines, capture_keys in order if number % 2 == 0 else order[::-1]:
            rate, _, health = decode_rate(capture_lines, capture_keys, "effect")
            if health.events != 4 * jobs or health.undecoded_calls or health.calls_not_run:
                raise RuntimeError(f"the {name} capture did not decode: {health.as_dict()}")
            rates[name].append(rate)
    grouped, flat = median(rates["grouped"]), median(rates["flat"])
    met = "met" if grouped >= ISSUE_TARGET_EVENTS_PER_S else "NOT met"
    row = Row("recorder", "offline decode events/s by effect: grouped vs flat capture",
              grouped, "events/s", flat,
              f"the flat capture's by effect, {jobs:,} jobs each (group lanes: genqueue, gclaim, "
              "extend_locks, complete through the example SUT's scripts), rounds alternating, "
              "per CPU second of the decoding thread",
              target=(">=", 0.5),
              note=f"issue 36's {ISSUE_TARGET_EVENTS_PER_S:,} events/s on a grouped capture (a "
                   f"fixed rate): {met}, {grouped:,.0f} per CPU second")
    return {"row": row, "raw": {"lines": len(lines), "events_per_cpu_s": rates}}


def measure_live(server: ValkeyServer, claims: int, rounds: int) -> dict[str, Any]:
    plain: list[float] = []
    monitored: dict[str, list[float]] = {path: [] for path in PATHS}
    decoded: dict[str, list[float]] = {path: [] for path in PATHS}
    healths: list[dict[str, Any]] = []
    modes = ("plain", *PATHS)
    with tempfile.TemporaryDirectory(prefix="bench-recorder-") as tmp:
        admin = connect(server.url, server.password)
        host, port = address(server)
        for number in range(rounds):
            for mode in modes[number % 3:] + modes[:number % 3]:  # each mode first in turn
                admin.flushdb()
                keys = QueueKeys("bench:", f"rec-{number}-{mode}")
                fill(server.url, server.password, keys, claims)
                command = claim_command(server, keys)
                if mode == "plain":
                    plain.append(redis_benchmark(server, command, claims, CEILING_CLIENTS,
                                                 CEILING_PIPELINE))
                    continue
                dialect = EchoMQ(keys.prefix, keys.queue, LEASE_MS, fast_path=mode == "fast")
                recorder = MonitorRecorder(dialect, Path(tmp) / f"monitor-{number}-{mode}.jsonl",
                                           host, port, server.password)
                recorder.start()
                started = time.perf_counter()
                monitored[mode].append(redis_benchmark(server, command, claims,
                                                       CEILING_CLIENTS, CEILING_PIPELINE))
                health = recorder.stop()
                elapsed = time.perf_counter() - started
                if not health.trustworthy or health.events < claims:
                    raise RuntimeError(f"the recorder lost evidence: {health.as_dict()}")
                decoded[mode].append(health.events / elapsed)
                healths.append({"path": mode, **health.as_dict()})
        admin.close()
    baseline = f"redis-benchmark claim, -c {CEILING_CLIENTS} -P {CEILING_PIPELINE}, no recorder"
    rows = []
    for path, name in (("fast", "fast path"), ("effect", "by effect")):
        lag = max(h["max_lag_ms"] for h in healths if h["path"] == path)
        rows += [
            Row("recorder", f"server claims/s, recorder on ({name}) vs scripts only",
                median(monitored[path]), "claims/s", median(plain), baseline,
                note="issue 27 sets no target for what the monitor source costs the server "
                     "(it measured 0.36-0.56)"),
            Row("recorder", "recorder ceiling: events/s decoded vs the scripts source's"
                if path == "fast" else "recorder ceiling by effect: events/s vs the scripts'",
                median(decoded[path]), "events/s", median(plain),
                "events/s the server wrote without it (one per claim)",
                note=f"{name}; from the benchmark's start until the recorder read its end "
                     f"marker; max lag {lag:.0f} ms"),
        ]
    return {"rows": rows, "raw": {"claims": claims, "plain": plain, "monitored": monitored,
                                  "decoded_events_per_s": decoded, "health": healths}}


def measure(claims: int, rounds: int, decode_jobs: int, decode_rounds: int) -> dict[str, Any]:
    with valkey_server("recorder") as server:
        offline = measure_decode(server, decode_jobs, decode_rounds)
        if missing := redis_benchmark_missing("the live rows (the server's cost with a "
                                              "recorder, the live ceiling)"):
            return {"rows": offline["rows"], "skipped": missing,
                    "raw": {"decode": offline["raw"]}}
        live = measure_live(server, claims, rounds)
    return {"rows": offline["rows"] + live["rows"],
            "raw": {"decode": offline["raw"], **live["raw"]}}
