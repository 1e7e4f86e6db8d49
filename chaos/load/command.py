"""The user's own enqueue path (``[sut] producer``, docs/sut.md): a long-running command of
theirs that enqueues as their code does, fed by the built-in producer at the scenario's rate.

The line protocol: one payload a line on the command's stdin; for each, one line on its stdout,
``<unix ms> enqueue id=<id> [key=value ...]`` once the store acknowledged the job (the id is the
command's own: it mints ids as the queue wants them), or ``<unix ms> duplicate id=<id>`` for
one the queue refused as already there. Every other line (a ready line, a warning) goes to
``logs/producer.log`` with the rest. The command runs beside the runner, with the SUT contract's
environment and its own ACL user (or the default user with ``login = "default"``), and is torn
down with the run's other children.

``CommandQueue.enqueue`` has the built-in producer's signature
(``chaos.load.sources.Producer``): it returns the id the command acknowledged, or None.
"""

from __future__ import annotations

import contextlib
import queue as queues
import subprocess
import threading
from typing import IO, Any, cast

from chaos.errors import InfraError
from chaos.load.sources import Producer, payload_maker
from chaos.protocol.acks import AckLedger
from chaos.protocol.client import QueueClient
from chaos.runtime.base import Child, RuntimeBase
from chaos.scenario.model import Load, Scenario

REPLY_TIMEOUT_S = 10.0  # one acknowledged enqueue, at most (a store round trip, or a few)


class CommandQueue:
    """A running ``[sut] producer`` command (``process``: started with stdin and stdout
    pipes); ``log``: where its lines are kept."""

    def __init__(self, name: str, process: subprocess.Popen[bytes], log: IO[bytes]) -> None:
        self.name = name
        self.process = process
        self.log = log
        self._replies: queues.Queue[tuple[str, str] | None] = queues.Queue()
        self._lock = threading.Lock()  # one payload in flight at a time
        self._reader = threading.Thread(target=self._read, name=f"{name}-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            self.log.write(raw)
            self.log.flush()
            parts = raw.decode("utf-8", "replace").split()
            if len(parts) >= 3 and parts[1] in ("enqueue", "duplicate") \
                    and parts[2].startswith("id="):
                self._replies.put((parts[1], parts[2][3:]))
        self._replies.put(None)  # the command's stdout closed: it exited

    def enqueue(self, job_id: str, payload: str, kind: str = "") -> str | None:
        """Send one payload; the id the command acknowledged, None for a duplicate. ``job_id``
        and ``kind`` are the built-in producer's (the payload says whether it is poison; the
        command mints its own ids)."""
        line = payload.replace("\n", " ") + "\n"  # one payload a line
        with self._lock:
            try:
                assert self.process.stdin is not None
                self.process.stdin.write(line.encode())
                self.process.stdin.flush()
            except (BrokenPipeError, ValueError):
                raise self._gone() from None
            try:
                reply = self._replies.get(timeout=REPLY_TIMEOUT_S)
            except queues.Empty:
                raise InfraError(f"{self.name}: no `enqueue id=...` line within "
                                 f"{REPLY_TIMEOUT_S:g} s of a payload (docs/sut.md's producer "
                                 "protocol); see logs/producer.log") from None
            if reply is None:
                raise self._gone()
            word, acknowledged = reply
            return acknowledged if word == "enqueue" else None

    def _gone(self) -> InfraError:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=2)
        return InfraError(f"{self.name}: the producer command exited (code "
                          f"{self.process.returncode}); see logs/producer.log")

    def close(self) -> None:
        """End its input: a producer that reads to the end exits by itself."""
        with contextlib.suppress(OSError, ValueError):
            if self.process.stdin is not None:
                self.process.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)


PRODUCER_NAME = "producer"  # its log, its ACL user, its connection's name


def command_producer(runtime: RuntimeBase, scenario: Scenario, load: Load) -> Producer:
    """The built-in producer driving ``[sut] producer`` at the scenario's rate: the command
    started in ``sut.cwd`` with the SUT contract's environment, its acknowledged ids in the
    acknowledgement ledger like any producer's."""
    argv = list(scenario.sut.producer or [])
    child = runtime.spawn(PRODUCER_NAME, argv, env=runtime.sut_env(PRODUCER_NAME),
                          cwd=scenario.sut.cwd, pipes=True)
    # spawned here, with pipes: a Popen (the Process protocol also covers forked children)
    commands = CommandQueue(PRODUCER_NAME, cast("subprocess.Popen[bytes]", child.process),
                            child.log)
    return CommandProducer(child, commands, load,
                           AckLedger(runtime.ack_ledger_path(PRODUCER_NAME)),
                           payload_maker(scenario.topology.handler, load, scenario.seed))


class CommandProducer(Producer):
    """``Producer`` over a ``CommandQueue`` (it has ``enqueue`` with the same signature)."""

    def __init__(self, child: Child, commands: CommandQueue, *args: Any, **kwargs: Any) -> None:
        super().__init__(cast(QueueClient, commands), *args, **kwargs)
        self.child, self.commands = child, commands

    def stop(self) -> None:
        super().stop()
        self.child.expected_exit = True  # its input ends: it exits, no crash
        self.commands.close()
