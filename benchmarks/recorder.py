"""The MONITOR recorder (``chaos.history.monitor``, ``history.source = "monitor"``): what it
costs the server and how fast it decodes, against the scripts source in the same run.

Rounds alternate: ``redis-benchmark`` runs the claim script at the server's ceiling (32
connections x 32 pipelined) on a prefilled queue, once with nothing attached (the scripts
source: each claim XADDs its own event) and once with a ``MonitorRecorder`` attached. Figures:

* the server's claims/s with the recorder attached vs without (what MONITOR costs the server);
* the recorder's ceiling: events it decoded and wrote per second, from the benchmark's start
  until it had read its end marker (so a recorder that falls behind pays its catch-up), vs the
  events/s the server produced without it.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import (
    Row,
    address,
    fill,
    median,
    redis_benchmark,
    redis_benchmark_path,
    valkey_server,
)
from benchmarks.queue_path import CEILING_CLIENTS, CEILING_PIPELINE, claim_command
from chaos.history.dialects import make_dialect
from chaos.history.monitor import MonitorRecorder
from chaos.protocol.client import QueueKeys, connect


def measure(claims: int, rounds: int) -> dict[str, Any]:
    if redis_benchmark_path() is None:
        return {"skipped": "redis-benchmark not installed (apt-get install redis-tools)"}
    plain, monitored, decoded = [], [], []
    healths: list[dict[str, Any]] = []
    with valkey_server("recorder") as server, \
            tempfile.TemporaryDirectory(prefix="bench-recorder-") as tmp:
        admin = connect(server.url, server.password)
        host, port = address(server)
        for number in range(rounds):
            for attached in ((False, True) if number % 2 == 0 else (True, False)):
                admin.flushdb()
                keys = QueueKeys("bench:", f"rec-{number}-{int(attached)}")
                fill(server.url, server.password, keys, claims)
                command = claim_command(server, keys)
                if not attached:
                    plain.append(redis_benchmark(server, command, claims, CEILING_CLIENTS,
                                                 CEILING_PIPELINE))
                    continue
                recorder = MonitorRecorder(make_dialect("echomq", keys.prefix, keys.queue),
                                           Path(tmp) / f"monitor-{number}.jsonl", host, port,
                                           server.password)
                recorder.start()
                started = time.perf_counter()
                monitored.append(redis_benchmark(server, command, claims, CEILING_CLIENTS,
                                                 CEILING_PIPELINE))
                health = recorder.stop()
                elapsed = time.perf_counter() - started
                if not health.trustworthy or health.events < claims:
                    raise RuntimeError(f"the recorder lost evidence: {health.as_dict()}")
                decoded.append(health.events / elapsed)
                healths.append(health.as_dict())
        admin.close()
    rows = [
        Row("recorder", "server claims/s with the MONITOR recorder vs scripts only",
            median(monitored), "claims/s", median(plain),
            f"redis-benchmark claim, -c {CEILING_CLIENTS} -P {CEILING_PIPELINE}, no recorder",
            note="issue 18 sets no target: what the monitor source costs the server"),
        Row("recorder", "recorder ceiling: events/s decoded vs the scripts source's",
            median(decoded), "events/s", median(plain),
            "events/s the server wrote without it (one per claim)",
            note="from the benchmark's start until the recorder read its end marker; "
                 f"max lag {max(h['max_lag_ms'] for h in healths):.0f} ms"),
    ]
    return {"rows": rows, "raw": {"claims": claims, "plain": plain, "monitored": monitored,
                                  "decoded_events_per_s": decoded, "health": healths}}
