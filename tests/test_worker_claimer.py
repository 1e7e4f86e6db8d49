"""The reference worker's claimer (one ``claim_many`` for every free slot, jobs handed to the
slots) in a real worker process against a real valkey-server: every claimed job is worked and
completed with its own token, and a SIGTERM stops the claiming but lets the slots finish what
they were handed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from chaos.history.events import iter_stream
from chaos.protocol.client import QueueClient
from chaos.runtime.valkey import ValkeyServer
from tests.procs import wait_until


def start_worker(server: ValkeyServer, queue: QueueClient, handler_ms: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "chaos.reference.worker", "--url", server.url, "--name", "wk",
         "--prefix", queue.keys.prefix, "--queue", queue.keys.queue, "--lease-ms", "10000",
         "--concurrency", "4", "--poll-ms", "10",
         "--handler", json.dumps({"distribution": "fixed", "fixed_ms": handler_ms})],
        env={**os.environ, "ECHOMQ_VALKEY_PASSWORD": server.password},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def stop(worker: subprocess.Popen) -> tuple[int, str]:
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
    try:
        code = worker.wait(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    return code, worker.stderr.read().decode() if worker.stderr else ""


def test_every_claimed_job_is_completed_with_its_own_token(valkey_server: ValkeyServer,
                                                          queue: QueueClient):
    for number in range(30):
        queue.enqueue(f"j{number:02d}", "{}")
    worker = start_worker(valkey_server, queue, handler_ms=5)
    try:
        wait_until(lambda: queue.backlog() == (0, 0), "the worker to finish the queue")
    finally:
        code, stderr = stop(worker)
    assert code == 0, stderr[-2000:]
    events = list(iter_stream(queue.client, queue.keys.events))
    claims = {(e.job_id, e.attempt) for e in events if e.type == "claim"}
    completes = [(e.job_id, e.attempt) for e in events if e.type == "complete"]
    assert sorted(completes) == sorted(claims) == [(f"j{n:02d}", 1) for n in range(30)]
    assert "30 completed, 0 rejected" in stderr


def test_a_sigterm_stops_claiming_and_the_slots_finish_what_they_hold(
        valkey_server: ValkeyServer, queue: QueueClient):
    for number in range(8):
        queue.enqueue(f"j{number}", "{}")
    worker = start_worker(valkey_server, queue, handler_ms=400)
    try:
        wait_until(lambda: queue.backlog() == (4, 4), "the four slots to hold a job each")
        worker.send_signal(signal.SIGTERM)
    finally:
        code, stderr = stop(worker)
    assert code == 0, stderr[-2000:]
    assert queue.backlog() == (4, 0)  # held jobs completed, nothing more claimed
    events = list(iter_stream(queue.client, queue.keys.events))
    claimed = sorted(e.job_id for e in events if e.type == "claim")
    assert sorted(e.job_id for e in events if e.type == "complete") == claimed
    assert len(claimed) == 4
