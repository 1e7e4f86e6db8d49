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

import redis

SETTINGS = ("maxmemory-policy", "maxmemory", "save", "appendonly", "appendfsync")


@dataclass
class Preflight:
    settings: dict[str, str] = field(default_factory=dict)  # as CONFIG GET returned them
    own_server: bool = False  # the throwaway server the local runtime started
    readable: bool = True  # CONFIG GET answered
    warnings: list[str] = field(default_factory=list)
    strict: bool = False

    def as_dict(self) -> dict[str, object]:
        readable = self.readable
        return {"settings": self.settings, "own_server": self.own_server,
                "readable": readable, "evicts": evicts(self.settings) if readable else None,
                "persists": persists(self.settings) if readable else None,
                "warnings": self.warnings, "strict": self.strict}


def evicts(settings: dict[str, str]) -> bool:
    return settings.get("maxmemory-policy", "noeviction") != "noeviction"


def persists(settings: dict[str, str]) -> bool:
    return bool(settings.get("save", "").strip()) or settings.get("appendonly") == "yes"


def judge(settings: dict[str, str], own_server: bool) -> list[str]:
    """The warnings a server's settings earn (pure: unit-testable without a server)."""
    warnings = []
    if evicts(settings):
        warnings.append(
            f"maxmemory-policy is {settings['maxmemory-policy']!r} (maxmemory "
            f"{settings.get('maxmemory', '0')}): the server may evict a lease "
            "or a job hash under memory pressure, losing the job silently; use noeviction")
    if not persists(settings) and not own_server:
        warnings.append(
            "nothing is persisted (save \"\" and appendonly no): a restart empties the queue")
    return warnings


def preflight(client: redis.Redis, own_server: bool, strict: bool = False) -> Preflight:
    result = Preflight(own_server=own_server, strict=strict)
    try:
        for name in SETTINGS:
            reply = client.config_get(name)
            if name in reply:
                result.settings[name] = str(reply[name])
    except redis.exceptions.ResponseError as error:
        result.readable = False
        result.warnings.append(f"CONFIG GET refused ({error}): eviction policy and persistence "
                               "unknown")
        return result
    result.warnings = judge(result.settings, own_server)
    return result
