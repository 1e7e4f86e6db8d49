"""Watch the run's Sentinel for every primary switch, planned or not (docs/faults.md, store faults).

A planned failover is the nemesis's doing and recorded by it. Sentinel may also fail over on its
own: a promoted primary that stalls past ``down-after-milliseconds`` (a busy host, a slow sync)
is failed back. Nothing else would record that, and its effects look like a broken queue: the
new primary has no replica until Sentinel reconfigures the old one on its 10 s INFO round, so
every ``WAIT 1`` waits its full timeout and the reaper sweeps only once per timeout.

The watch subscribes to Sentinel's ``+sdown`` and ``+switch-master`` events. A switch a planned
failover announced (``expect``) is that failover's; any other is unplanned: the watch demotes the
old primary at once, as the planned path does and an operator would, waits until the new primary
has a replica online again (until then WAIT cannot be satisfied) and hands the runner a
``StoreFault`` to record as a fault event with ``planned = false``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis

from chaos.runtime.base import StoreFault
from chaos.runtime.valkey import SENTINEL_DOWN_AFTER_MS, ValkeyServer

log = logging.getLogger("chaos.runtime.sentinel_watch")
SYNC_TIMEOUT_S = 30.0  # an unplanned switch whose replica is not back by then: down until then


def now_ms() -> int:
    """Host clock, ms: the clock Valkey's TIME reads on this host (as ``StoreFault.killed_ts``)."""
    return time.time_ns() // 1_000_000


@dataclass
class Switch:
    """One ``+switch-master`` as Sentinel announced it."""

    old: str
    new: str
    switched_ts: int  # host ms when the announcement arrived
    down_ts: int  # host ms of the old primary's last reply Sentinel saw (its +sdown - down-after)
    planned: bool
    synced_ts: int | None = None  # unplanned: when the new primary had a replica online again


class SentinelWatch:
    """A daemon thread on one Sentinel's pub/sub. ``nodes`` maps a port to a node name;
    ``node`` gives the server of a name (to demote it and to ask the new primary for its
    replicas). ``need_replica``: the clients WAIT for a replica, so an unplanned switch's outage
    lasts until the new primary has one online; else it ends at the switch."""

    def __init__(self, sentinel: ValkeyServer, nodes: Callable[[str], str],
                 node: Callable[[str], ValkeyServer | None], need_replica: bool) -> None:
        self.sentinel = sentinel
        self.need_replica = need_replica
        self.nodes = nodes
        self.node = node
        self.switches: list[Switch] = []  # every switch, in order
        self._expected: list[str] = []  # old primaries of planned failovers not yet seen
        self._handed: int = 0  # unplanned switches already handed to the runner
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sdown: dict[str, int] = {}  # node -> host ms of its latest +sdown
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sentinel-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the Sentinel watch did not subscribe within 10 s")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def expect(self, old: str) -> None:
        """A planned failover away from ``old`` starts: its switch is not unplanned."""
        with self._lock:
            self._expected.append(old)

    def unplanned(self, final: bool = False) -> list[StoreFault]:
        """Unplanned switches not handed over yet, as store faults, once their replica is back
        (``final``: also those still waiting, down until now)."""
        faults = []
        with self._lock:
            unplanned = [switch for switch in self.switches if not switch.planned]
            for switch in unplanned[self._handed:]:
                if switch.synced_ts is None and not final:
                    break  # keep the order: hand over the next one once it is back
                back_ts = switch.synced_ts if switch.synced_ts is not None else now_ms()
                faults.append(StoreFault(
                    switch.old, switch.down_ts, back_ts - switch.down_ts,
                    promoted_ms=switch.switched_ts - switch.down_ts, new_primary=switch.new))
                self._handed += 1
        return faults

    # --- the thread ---------------------------------------------------------------------------
    def _run(self) -> None:
        client = self.sentinel.client(decode_responses=True, socket_timeout=None)
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        try:
            pubsub.subscribe("+sdown", "+switch-master")  # sent and registered on return
            self._ready.set()
            while not self._stop.is_set():
                try:
                    message = pubsub.get_message(timeout=0.2)
                except (redis.exceptions.ConnectionError, OSError):
                    if self._stop.is_set():
                        return
                    raise
                if message is not None:
                    self._take(str(message["channel"]), str(message["data"]))
        except Exception:  # the run goes on without the watch; say so loudly in its log
            log.exception("Sentinel watch failed: unplanned failovers go unrecorded")
        finally:
            self._ready.set()
            pubsub.close()
            client.close()

    def _take(self, channel: str, data: str) -> None:
        words = data.split()
        if channel == "+sdown" and words[:1] == ["master"] and len(words) >= 4:
            self._sdown[self.nodes(words[3])] = now_ms()  # master <name> <ip> <port>
        elif channel == "+switch-master" and len(words) >= 5:  # <name> <ip> <port> <ip> <port>
            switched_ts = now_ms()
            old, new = self.nodes(words[2]), self.nodes(words[4])
            down_ts = self._sdown.pop(old, switched_ts) - SENTINEL_DOWN_AFTER_MS
            with self._lock:
                planned = old in self._expected
                if planned:
                    self._expected.remove(old)
                switch = Switch(old, new, switched_ts, down_ts, planned)
                self.switches.append(switch)
            log.info("Sentinel switched the primary %s -> %s (%s)", old, new,
                     "planned" if planned else "unplanned: the runner records it")
            if not planned:  # apart, so the next announcement is stamped when it comes
                threading.Thread(target=self._restore, args=(switch,), name="sentinel-restore",
                                 daemon=True).start()

    def _restore(self, switch: Switch) -> None:
        """Demote the old primary at once (Sentinel itself would only on its next 10 s INFO
        round, leaving the new primary without a replica and a split brain meanwhile), then
        wait until the new primary has a replica online."""
        old, new = self.node(switch.old), self.node(switch.new)
        if old is None or new is None:
            with self._lock:
                switch.synced_ts = now_ms()
            return
        deadline = time.monotonic() + SYNC_TIMEOUT_S
        while time.monotonic() < deadline and not self._stop.is_set():
            try:  # the old primary may still be stalled (that is why it was failed away from)
                with old.client(socket_timeout=2) as client:
                    client.execute_command("REPLICAOF", "127.0.0.1", str(new.port))
                break
            except (redis.exceptions.RedisError, OSError) as error:
                log.warning("could not demote %s yet: %s", switch.old, error)
                self._stop.wait(0.2)
        if not self.need_replica or wait_for_replica(new, deadline, self._stop):
            with self._lock:
                switch.synced_ts = now_ms()


def wait_for_replica(server: ValkeyServer, deadline: float,
                     stop: threading.Event | None = None) -> bool:
    """Until ``server`` has a replica online (True), or the monotonic ``deadline``."""
    while time.monotonic() < deadline and not (stop is not None and stop.is_set()):
        if replica_online(server):
            return True
        time.sleep(0.05)
    return False


def replica_online(server: ValkeyServer) -> bool:
    """Does ``server`` have a replica in state online (a WAIT 1 can be satisfied)?"""
    try:
        with server.client(socket_timeout=2, decode_responses=True) as client:
            info = client.info("replication")
    except (redis.exceptions.RedisError, OSError):
        return False
    return any(isinstance(value, dict) and value.get("state") == "online"
               for name, value in info.items() if name.startswith("slave"))
