"""The lease-queue protocol under test (DESIGN §2): keys, scripts, and a thin client.

Every transition is one Lua script in ``chaos/lua/``. Each script reads ``TIME`` itself and appends
its event to the events stream in the same call, so the history holds an event exactly when the
transition happened, stamped by the clock that scores the leases.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources
from typing import Any

import valkey
from valkey.exceptions import NoScriptError

SCRIPT_NAMES = ("enqueue", "claim", "extend", "complete", "reap", "record")


@dataclass(frozen=True)
class QueueKeys:
    """Key names of one queue. All share the ``{queue}`` hash tag (one cluster slot)."""

    prefix: str = "emq:"
    queue: str = "jobs"

    @property
    def base(self) -> str:
        return f"{self.prefix}{{{self.queue}}}:"

    @property
    def pending(self) -> str:
        return self.base + "pending"

    @property
    def active(self) -> str:
        return self.base + "active"

    @property
    def events(self) -> str:
        return self.base + "events"

    @property
    def job_prefix(self) -> str:
        return self.base + "job:"

    def job(self, job_id: str) -> str:
        return self.job_prefix + job_id


@dataclass(frozen=True)
class Claimed:
    """A lease the caller now holds: ``attempt`` is its fencing token."""

    job_id: str
    payload: str
    attempt: int
    deadline_ms: int


def load_script_source(name: str) -> str:
    return resources.files("chaos").joinpath("lua", f"{name}.lua").read_text()


def connect(url: str, password: str | None = None, **kwargs: Any) -> valkey.Valkey:
    """A client for ``url``; the password is given, in the URL, or in ``ECHOMQ_VALKEY_PASSWORD``
    (how a run hands it to its children: the environment, never a command line)."""
    password = password or os.environ.get("ECHOMQ_VALKEY_PASSWORD") or None
    kwargs.setdefault("socket_timeout", 10)
    kwargs.setdefault("socket_connect_timeout", 5)
    client: valkey.Valkey = valkey.Valkey.from_url(
        url, decode_responses=True, password=password, **kwargs
    )
    return client


class QueueClient:
    """Calls the protocol scripts by SHA; loads each once and reloads after a server restart."""

    def __init__(self, client: valkey.Valkey, keys: QueueKeys) -> None:
        self.client = client
        self.keys = keys
        self._sources = {name: load_script_source(name) for name in SCRIPT_NAMES}
        self._shas: dict[str, str] = {}
        self.load_scripts()

    def load_scripts(self) -> None:
        for name, source in self._sources.items():
            self._shas[name] = self.client.script_load(source)

    def _call(self, name: str, keys: list[str], args: list[Any]) -> Any:
        try:
            return self.client.evalsha(self._shas[name], len(keys), *keys, *args)
        except NoScriptError:
            # The server lost its script cache (restart, SCRIPT FLUSH): load again, retry once.
            self.load_scripts()
            return self.client.evalsha(self._shas[name], len(keys), *keys, *args)

    def enqueue(self, job_id: str, payload: str = "") -> bool:
        k = self.keys
        return bool(self._call("enqueue", [k.pending, k.events], [k.job_prefix, job_id, payload]))

    def claim(self, lease_ms: int, worker: str) -> Claimed | None:
        k = self.keys
        reply = self._call(
            "claim", [k.pending, k.active, k.events], [k.job_prefix, lease_ms, worker]
        )
        if not reply:
            return None
        job_id, payload, attempt, deadline = reply
        return Claimed(str(job_id), payload or "", int(attempt), int(deadline))

    def extend(self, job_id: str, attempt: int, lease_ms: int, worker: str) -> int | None:
        """The new deadline, or None when the lease is no longer ours."""
        k = self.keys
        reply = self._call(
            "extend", [k.active, k.events], [k.job_prefix, job_id, attempt, lease_ms, worker]
        )
        return int(reply) if reply else None

    def complete(self, job_id: str, attempt: int, worker: str) -> bool:
        k = self.keys
        reply = self._call(
            "complete", [k.active, k.events], [k.job_prefix, job_id, attempt, worker]
        )
        return bool(reply)

    def reap(self, limit: int) -> int:
        k = self.keys
        return int(
            self._call("reap", [k.active, k.pending, k.events], [k.job_prefix, limit])
        )

    def record(self, **fields: Any) -> int:
        """Append a runner event (fault, heal, phase …) to the history; returns its server time."""
        args: list[Any] = []
        for field, value in fields.items():
            args += [field, "" if value is None else value]
        return int(self._call("record", [self.keys.events], args))

    def server_time_ms(self) -> int:
        seconds, micros = self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    def backlog(self) -> tuple[int, int]:
        """(pending, active) sizes."""
        pipe = self.client.pipeline(transaction=False)
        pipe.zcard(self.keys.pending)
        pipe.zcard(self.keys.active)
        pending, active = pipe.execute()
        return int(pending), int(active)

    def lease_holders_oldest_first(self, limit: int = 100) -> list[str]:
        """Workers holding the ``limit`` earliest-deadline leases, oldest first (repeats kept)."""
        oldest = self.client.zrange(self.keys.active, 0, limit - 1)
        if not oldest:
            return []
        pipe = self.client.pipeline(transaction=False)
        for job_id in oldest:
            pipe.hget(self.keys.job(job_id), "worker")
        return [str(holder) for holder in pipe.execute() if holder]

    def queue_exists(self) -> bool:
        k = self.keys
        return bool(self.client.exists(k.pending, k.active, k.events))
