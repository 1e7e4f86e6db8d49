"""Preflight: is the Valkey server under test fit to hold a lease queue?

Read before the run starts, recorded in ``report.json["preflight"]``:

* ``maxmemory-policy``: anything but ``noeviction`` lets the server evict keys under memory
  pressure. An evicted lease (the active ZSET) or job hash is a job lost without any event: the
  history cannot show it and no invariant can catch it in time. Warned about whatever
  ``maxmemory`` is (0 today may be set tomorrow; the policy is the intent).
* persistence: no RDB ``save`` points and ``appendonly no`` means a restart empties the queue.
  Not warned about for the throwaway server the local runtime starts itself (it lives as long as
  the run), only for a server given by ``valkey.url``.

``run --strict`` turns any warning into an infrastructure error (exit 3): the server, not the
scenario, is unfit. A server that refuses ``CONFIG GET`` (managed services rename it) gets a
warning saying the settings are unknown.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import valkey

SETTINGS = ("maxmemory-policy", "maxmemory", "save", "appendonly", "appendfsync")


@dataclass
class Preflight:
    settings: dict[str, str] = field(default_factory=dict)  # as CONFIG GET returned them
    own_server: bool = False  # the throwaway server the local runtime started
    readable: bool = True  # CONFIG GET answered
    warnings: list[str] = field(default_factory=list)
    strict: bool = False

    @property
    def evicts(self) -> bool:
        return self.settings.get("maxmemory-policy", "noeviction") != "noeviction"

    @property
    def persists(self) -> bool:
        return bool(self.settings.get("save", "").strip()) or \
            self.settings.get("appendonly", "no") == "yes"

    def as_dict(self) -> dict[str, object]:
        return {"settings": self.settings, "own_server": self.own_server,
                "readable": self.readable, "evicts": self.evicts if self.readable else None,
                "persists": self.persists if self.readable else None,
                "warnings": self.warnings, "strict": self.strict}


def judge(settings: dict[str, str], own_server: bool) -> list[str]:
    """The warnings a server's settings earn (pure: unit-testable without a server)."""
    warnings = []
    policy = settings.get("maxmemory-policy", "noeviction")
    if policy != "noeviction":
        limit = settings.get("maxmemory", "0")
        warnings.append(
            f"maxmemory-policy is {policy!r} (maxmemory {limit}): the server may evict a lease "
            "or a job hash under memory pressure, losing the job silently; use noeviction")
    persisted = bool(settings.get("save", "").strip()) or settings.get("appendonly") == "yes"
    if not persisted and not own_server:
        warnings.append(
            "nothing is persisted (save \"\" and appendonly no): a restart empties the queue")
    return warnings


def preflight(client: valkey.Valkey, own_server: bool, strict: bool = False) -> Preflight:
    result = Preflight(own_server=own_server, strict=strict)
    try:
        for name in SETTINGS:
            reply = client.config_get(name)
            if name in reply:
                result.settings[name] = str(reply[name])
    except valkey.exceptions.ResponseError as error:
        result.readable = False
        result.warnings.append(f"CONFIG GET refused ({error}): eviction policy and persistence "
                               "unknown")
        return result
    result.warnings = judge(result.settings, own_server)
    return result
