"""The fork server: one process that imports the reference worker and reaper once and forks
each of a run's reference processes on request (local runtime only).

Why: each reference process started as ``python -m chaos.reference.worker`` is an interpreter
importing redis-py and the toolkit, about 250 ms of CPU; a run of 8 workers and a reaper on 2
cores spent over a second on that before its first claim. A fork of an interpreter that has
already imported them takes a few milliseconds.

Each member is still a process of its own, as a spawned one was: its own pid, its own session
and process group (kill, pause and resume signal the group: the worker's heartbeat process with
it), stdout and stderr to ``logs/<name>.log``, its pid file, ``die_with_parent``. Its parent is
the fork server, whose parent is the runner; each dies with its parent (PR_SET_PDEATHSIG), so a
SIGKILLed runner still leaves nothing behind. The fork server reaps its children and tells the
runner each exit status, which ``ForkedProcess`` (the runner's handle on a member, shaped like
``subprocess.Popen``) reports as ``returncode`` (negative: killed by that signal).

Fork safety: the server has no thread, no connection and no open file but its pipes when it
forks; each member opens its own connections, and ``random`` reseeds itself in every child
(``os.register_at_fork``); the worker draws its handler times from its own ``--seed``.

Protocol: JSON lines. The runner writes ``{"name", "module", "args", "env", "cwd", "log"}``; the
server answers ``{"pid": N}`` or ``{"error": "..."}``, and writes ``{"exit": pid, "code": c}``
whenever a member ends. End of input: the server exits.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from chaos.lifeline import die_with_parent, name_process, toolkit_env, toolkit_python

WORKER, REAPER = "chaos.reference.worker", "chaos.reference.reaper"
MODULES = (WORKER, REAPER)  # what it forks: the reference implementation, nothing else


@dataclass(frozen=True)
class Member:
    """What the server forks: ``module``'s ``main(args)`` as process ``name``, with ``env``,
    in ``cwd``, its output appended to ``log``."""

    name: str
    module: str
    args: list[str]
    env: dict[str, str]
    log: str
    cwd: str | None = None


class ForkServerError(Exception):
    """The fork server is gone or refused a member (the runtime makes it an InfraError)."""


# --- the runner's side ----------------------------------------------------------------------


class ForkedProcess:
    """A member forked by the fork server, as the runner handles it: ``pid``, ``returncode``,
    ``poll``, ``wait``, ``send_signal``, ``kill`` behave as ``subprocess.Popen``'s."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server = server
        self.pid = pid

    @property
    def returncode(self) -> int | None:
        return self.server.exit_code(self.pid)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        code = self.server.wait_exit(self.pid, timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
        return code

    def send_signal(self, signum: int) -> None:
        # Only while not known to be reaped, as Popen does. Unlike Popen, the server reaps it a
        # moment before the runner hears so; the kernel hands pids out in increasing order, so
        # that moment is never long enough for the pid to be someone else's.
        if self.returncode is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkServer:
    """The runner's handle on a fork server process: ``fork`` a member, hear of its exit.
    ``log_path``: where the server's own errors go (None: the runner's stderr)."""

    def __init__(self, log_path: Path | None) -> None:
        self.log_name = str(log_path or "the runner's stderr")
        self.log = open(log_path, "ab") if log_path else None  # noqa: SIM115 - see close()
        self.process = subprocess.Popen(
            toolkit_python("-m", "chaos.runtime.forkserver", "--parent", str(os.getpid())),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
            env=toolkit_env(os.environ), start_new_session=True)
        assert self.process.stdin is not None and self.process.stdout is not None
        self._requests: IO[bytes] = self.process.stdin
        self._replies: IO[bytes] = self.process.stdout
        self._lock = threading.Lock()  # one fork request at a time
        self._changed = threading.Condition()
        self._exits: dict[int, int] = {}
        self._answers: list[dict[str, Any]] = []
        self._gone = False  # the server's output ended: it and so every member is gone
        self._reader = threading.Thread(target=self._read, name="forkserver-reader",
                                        daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def _read(self) -> None:
        for line in self._replies:
            message = json.loads(line)
            with self._changed:
                if "exit" in message:
                    self._exits[int(message["exit"])] = int(message["code"])
                else:
                    self._answers.append(message)
                self._changed.notify_all()
        with self._changed:
            self._gone = True
            self._changed.notify_all()

    def fork(self, members: list[Member], timeout: float = 60.0) -> list[ForkedProcess]:
        """Fork each member; returns once they all exist. All requests go out at once: the
        server forks one after another without waiting for the runner in between."""
        with self._lock:
            try:
                self._requests.write(b"".join(json.dumps(vars(member)).encode() + b"\n"
                                              for member in members))
                self._requests.flush()
            except (BrokenPipeError, ValueError):
                raise ForkServerError(f"the fork server is gone; see {self.log_name}") from None
            deadline = time.monotonic() + timeout  # the first fork waits for its imports
            with self._changed:
                while len(self._answers) < len(members):
                    if self._gone or not self._changed.wait(deadline - time.monotonic()):
                        raise ForkServerError("the fork server did not fork "
                                              f"{', '.join(m.name for m in members)}; see "
                                              f"{self.log_name}")
                answers, self._answers = self._answers, []
        processes = []
        for member, answer in zip(members, answers, strict=True):
            if "error" in answer:
                raise ForkServerError(f"{member.name}: {answer['error']}")
            processes.append(ForkedProcess(self, int(answer["pid"])))
        return processes

    def exit_code(self, pid: int) -> int | None:
        with self._changed:
            if pid in self._exits:
                return self._exits[pid]
            # Gone with the server (PDEATHSIG from it): the kernel's word is SIGKILL.
            return -signal.SIGKILL if self._gone else None

    def wait_exit(self, pid: int, timeout: float | None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while (code := self.exit_code(pid)) is None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._changed.wait(left)
            return code

    def close(self) -> None:
        """End the server (its input closed: it exits once its members are reaped), else kill
        it; idempotent. The runtime stops the members first."""
        with contextlib.suppress(OSError, ValueError):
            self._requests.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill_now()
            self.process.wait()
        self._reader.join(timeout=5)
        if self.log is not None:
            self.log.close()

    def kill_now(self) -> None:
        """SIGKILL the server (its members then die with it), without waiting."""
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)


# A fork server started before the run knows its scenario (``prestart``), so it imports while
# the runner does; the run's local runtime adopts it (``adopt_spare``).
_spare: list[ForkServer] = []


def prestart() -> None:
    """Start a spare fork server now (``echomq-chaos run``, before loading the scenario)."""
    if not _spare:
        _spare.append(ForkServer(None))


def adopt_spare() -> ForkServer | None:
    """The spare, if one is running; the caller owns it from now on."""
    while _spare:
        server = _spare.pop()
        if server.process.poll() is None:
            return server
        server.close()
    return None


def discard_spare() -> None:
    """No run needed it (a Docker run, a foreign SUT, a usage error): end it."""
    while _spare:
        _spare.pop().close()


# --- the server's side ----------------------------------------------------------------------


def _entry_points() -> dict[str, Callable[[list[str]], int]]:
    """Imported once, here, before any fork: the whole point of the server."""
    import multiprocessing.popen_fork  # noqa: F401 - how a worker forks its heartbeat process

    from chaos.protocol.client import load_script_source
    from chaos.reference import reaper, worker

    # What each member would otherwise do for itself first: build its argument parser, and
    # import what reading the protocol's scripts imports.
    worker.parser()
    reaper.parser()
    load_script_source("claim")
    return {WORKER: worker.main, REAPER: reaper.main}


def _member(request: dict[str, Any], main: Callable[[list[str]], int],
            server_fds: list[int]) -> None:
    """In the forked child: become the member (its own session, log, environment), run it, and
    never return into the server's loop."""
    code = 1
    try:
        os.setsid()
        name_process(str(request.get("name") or request["module"]))
        signal.set_wakeup_fd(-1)
        for fd in server_fds:  # the server's wakeup pipe and selector: not the member's
            os.close(fd)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(null)
        os.close(log)
        # as a fresh interpreter has them
        for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGUSR1):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.environ.clear()
        os.environ.update(request["env"])
        if request.get("cwd"):
            os.chdir(request["cwd"])
        sys.argv = [request["module"], *request["args"]]
        code = main(request["args"])
    except SystemExit as done:  # argparse's usage errors, parser.exit
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def serve(requests: IO[bytes], replies: IO[bytes]) -> None:
    entry_points = _entry_points()
    wakeup_read, wakeup_write = os.pipe()
    os.set_blocking(wakeup_write, False)
    signal.set_wakeup_fd(wakeup_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # the wakeup fd does the work
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the runner ends it, by closing its input
    members: set[int] = set()

    def reply(message: dict[str, Any]) -> None:
        replies.write(json.dumps(message).encode() + b"\n")
        replies.flush()

    def reap() -> None:
        for pid in list(members):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                members.discard(pid)
                reply({"exit": pid, "code": os.waitstatus_to_exitcode(status)})

    selector = selectors.DefaultSelector()
    selector.register(requests, selectors.EVENT_READ)
    selector.register(wakeup_read, selectors.EVENT_READ)
    unread = b""  # requests read but not yet whole lines
    open_input = True
    while open_input or members:
        for key, _ in selector.select():
            if key.fileobj == wakeup_read:
                with contextlib.suppress(BlockingIOError):
                    os.read(wakeup_read, 512)
                continue
            chunk = os.read(requests.fileno(), 1 << 16)
            if not chunk:
                selector.unregister(requests)
                open_input = False
                continue
            *lines, unread = (unread + chunk).split(b"\n")
            for line in lines:
                pid = _fork(json.loads(line), entry_points, reply,
                            [wakeup_read, wakeup_write, selector.fileno()])
                if pid:
                    members.add(pid)
        reap()


def _fork(request: dict[str, Any], entry_points: dict[str, Callable[[list[str]], int]],
          reply: Callable[[dict[str, Any]], None], server_fds: list[int]) -> int | None:
    """Fork one member; its pid (None: refused, and said so)."""
    main = entry_points.get(request["module"])
    if main is None:
        reply({"error": f"the fork server runs only {', '.join(MODULES)}"})
        return None
    if threading.active_count() != 1:  # never fork a process with threads
        reply({"error": "the fork server has a thread; it cannot fork safely"})
        return None
    pid = os.fork()
    if pid == 0:
        _member(request, main, server_fds)
    reply({"pid": pid})
    return pid


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    parent = int(args[args.index("--parent") + 1]) if "--parent" in args else None
    die_with_parent(parent)
    # Unbuffered: nothing written but not yet flushed when a member is forked
    requests = os.fdopen(sys.stdin.fileno(), "rb", buffering=0, closefd=False)
    replies = os.fdopen(sys.stdout.fileno(), "wb", buffering=0, closefd=False)
    serve(requests, replies)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
