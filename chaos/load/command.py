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

Locust's producer users drive the same command through a ``CommandRelay``: the runner starts
the command as above and relays each user's payload line to it over a 127.0.0.1 socket, one
payload in flight at a time (``CommandQueue``'s lock), answering ``enqueue id=<id>``,
``duplicate id=<id>`` or ``failed <why>``; the relay keeps the acknowledged ids in the
producer's acknowledgement ledger, so the ids are the command's whoever paced them.
"""

from __future__ import annotations

import contextlib
import queue as queues
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import IO, Any, cast

from chaos.errors import InfraError
from chaos.load.sources import LocustLoad, Producer, payload_maker
from chaos.protocol.acks import AckLedger
from chaos.protocol.client import QueueClient, QueueKeys
from chaos.runtime.base import Child, RuntimeBase
from chaos.scenario.model import Load, Scenario

REPLY_TIMEOUT_S = 10.0  # one acknowledged enqueue, at most (a store round trip, or a few)
# The first: the command's own start-up comes before it (a BEAM, a JVM, a Node module loading)
FIRST_REPLY_TIMEOUT_S = 60.0


class CommandQueue:
    """A running ``[sut] producer`` command (``process``: started with stdin and stdout
    pipes); ``log``: where its lines are kept."""

    def __init__(self, name: str, process: subprocess.Popen[bytes], log: IO[bytes]) -> None:
        self.name = name
        self.process = process
        self.log = log
        self._replies: queues.Queue[tuple[str, str] | None] = queues.Queue()
        self._lock = threading.Lock()  # one payload in flight at a time
        self.answered = False  # it has answered a payload: started (chaos.run.startup)
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
                raise self.gone() from None
            timeout = REPLY_TIMEOUT_S if self.answered else FIRST_REPLY_TIMEOUT_S
            try:
                reply = self._replies.get(timeout=timeout)
            except queues.Empty:
                raise InfraError(f"{self.name}: no `enqueue id=...` line within "
                                 f"{timeout:g} s of a{'' if self.answered else ' first'} "
                                 "payload (docs/sut.md's producer protocol); see "
                                 "logs/producer.log") from None
            if reply is None:
                raise self.gone()
            self.answered = True
            word, acknowledged = reply
            return acknowledged if word == "enqueue" else None

    def gone(self) -> InfraError:
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


def start_command(runtime: RuntimeBase, scenario: Scenario) -> tuple[Child, CommandQueue]:
    """``[sut] producer`` started as a child of the runtime (torn down with the others) in
    ``sut.cwd`` with the SUT contract's environment, its stdin and stdout piped to us."""
    argv = list(scenario.sut.producer or [])
    child = runtime.spawn(PRODUCER_NAME, argv, env=runtime.sut_env(PRODUCER_NAME),
                          cwd=scenario.sut.cwd, pipes=True)
    # spawned here, with pipes: a Popen (the Process protocol also covers forked children)
    return child, CommandQueue(PRODUCER_NAME, cast("subprocess.Popen[bytes]", child.process),
                               child.log)


def command_producer(runtime: RuntimeBase, scenario: Scenario, load: Load) -> Producer:
    """The built-in producer driving ``[sut] producer`` at the scenario's rate, its
    acknowledged ids in the acknowledgement ledger like any producer's."""
    child, commands = start_command(runtime, scenario)
    return CommandProducer(child, commands, load,
                           AckLedger(runtime.ack_ledger_path(PRODUCER_NAME)),
                           payload_maker(scenario.topology.handler, load, scenario.seed))


class CommandProducer(Producer):
    """``Producer`` over a ``CommandQueue`` (it has ``enqueue`` with the same signature)."""

    def __init__(self, child: Child, commands: CommandQueue, *args: Any, **kwargs: Any) -> None:
        super().__init__(cast(QueueClient, commands), *args, **kwargs)
        self.child, self.commands = child, commands

    def start(self) -> None:
        """Returns once the command has answered its first payload: it is started when it
        enqueues, not when it was spawned (the run's warmup must see load)."""
        super().start()
        while not self.first_answered.wait(0.05):
            if self.failure:
                raise InfraError(self.failure)
            if not self._thread.is_alive():
                break
        if self.failure:
            raise InfraError(self.failure)

    def stop(self) -> None:
        super().stop()
        self.child.expected_exit = True  # its input ends: it exits, no crash
        self.commands.close()


class CommandRelay:
    """Serves a ``CommandQueue`` to Locust's producer users on 127.0.0.1 (``address``): one
    payload a line in, one reply a line out (the module's docstring). ``failure``: why the
    command's enqueue path broke for good ("" while it works)."""

    def __init__(self, commands: CommandQueue, ledger: AckLedger) -> None:
        self.commands = commands
        self.ledger = ledger
        self.enqueued = 0  # acknowledged so far
        self.failure = ""
        self._server = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._server.getsockname()[1]}"
        self._connections: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, name="producer-relay", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._server.accept()
            except OSError:  # closed
                return
            with self._lock:
                if self._closed:
                    connection.close()
                    return
                self._connections.append(connection)
            threading.Thread(target=self._serve, args=(connection,), daemon=True,
                             name="producer-relay-user").start()

    def _serve(self, connection: socket.socket) -> None:
        with contextlib.suppress(OSError), connection, \
                connection.makefile("rb") as lines, connection.makefile("wb") as replies:
            for line in lines:
                replies.write(self._relay(line.decode("utf-8", "replace").rstrip("\n")))
                replies.flush()

    def _relay(self, payload: str) -> bytes:
        if self.failure:
            return f"failed {self.failure}\n".encode()
        try:
            acknowledged = self.commands.enqueue("", payload)
        except InfraError as failure:
            self.failure = self.failure or str(failure)
            return f"failed {failure}\n".encode()
        if acknowledged is None:
            return b"duplicate\n"
        self.ledger.record("enqueue", acknowledged)
        with self._lock:
            self.enqueued += 1
        return f"enqueue id={acknowledged}\n".encode()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            connections, self._connections = self._connections, []
        with contextlib.suppress(OSError):
            self._server.close()
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()
        self.ledger.close()


class CommandLocustLoad(LocustLoad):
    """Locust whose producer users enqueue through ``[sut] producer`` (``--producer-relay``):
    the command and its relay start before Locust and stop after it."""

    def __init__(self, runtime: RuntimeBase, load: Load, keys: QueueKeys, lease_ms: int,
                 protocol: str, run_dir: Path, name: str = "locust", prefix: str = "locust",
                 ready: QueueClient | None = None, id_style: str = "plain") -> None:
        super().__init__(runtime, load, keys, lease_ms, protocol, run_dir, name, prefix,
                         ready, id_style)
        self.command_child: Child | None = None
        self.relay: CommandRelay | None = None

    @property
    def failure(self) -> str:
        """Why the command's enqueue path broke (the runner stops the run on it)."""
        return self.relay.failure if self.relay is not None else ""

    def start(self) -> None:
        self.command_child, commands = start_command(self.runtime, self.runtime.scenario)
        self.relay = CommandRelay(commands,
                                  AckLedger(self.runtime.ack_ledger_path(PRODUCER_NAME)))
        super().start()

    def locust_options(self) -> list[str]:
        assert self.relay is not None
        return [*super().locust_options(), "--producer-relay", self.relay.address]

    def wait_until_enqueuing(self, queue: QueueClient, timeout: float = 60.0) -> None:
        """Until the command acknowledged Locust's first job (its calls write no events
        stream of ours)."""
        assert self.child is not None and self.relay is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.relay.enqueued:
            if self.relay.failure:
                raise InfraError(self.relay.failure)
            if not self.child.alive:
                raise InfraError(f"locust exited during start-up (code "
                                 f"{self.child.process.returncode}); its log ends:\n"
                                 f"{self.runtime.log_tail(self.name)}")
            if self.command_child is not None and not self.command_child.alive:
                raise self.relay.commands.gone()
            time.sleep(0.05)
        if not self.relay.enqueued:
            raise InfraError(f"the producer command acknowledged nothing Locust sent within "
                             f"{timeout:.0f}s (see logs/{self.name}.log, logs/producer.log)")

    def stop(self) -> None:
        super().stop()  # Locust first: its users send nothing more
        if self.relay is not None:
            self.relay.close()
            if self.command_child is not None:
                self.command_child.expected_exit = True  # its input ends: it exits, no crash
            self.relay.commands.close()
