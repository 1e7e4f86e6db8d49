"""What limited a capacity knee, measured and named: the pool, the store, the load generator or
the host running them all.

Measured over each step (``chaos.tools.capacity``): the pool's slots busy (leased jobs / slots,
from the family's backlog), the store's CPU (``INFO cpu``: its main thread's user + system
seconds, a share of one core, since one thread runs every command), the host's CPU (``/proc/stat``:
busy share of all its cores, whoever uses them) and the hold time (first claim to complete: a
host short of CPU stretches it). ``name`` is pure: figures in, a bottleneck and its reason out.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

STORE_BUSY = 0.8  # of one core: the store's main thread past this is the limit
HOST_BUSY = 0.9  # of all cores
POOL_BUSY = 0.8  # of the pool's slots, over the step's second half
HOLD_STRETCH = 1.25  # hold time this much past the size's first step: the host slowed the work
MIN_DELIVERED = 0.9  # below this share of the target rate the generator is the bottleneck

HOST_WAY_OUT = ("measure from more hosts: Locust's remote workers (load.remote_workers, "
                "docs/load.md), and the queue's workers on hosts of their own, judged with "
                "`run` attached to them (docs/attach.md; capacity starts the pool it sizes)")


def host_cpu_times() -> tuple[float, float] | None:
    """(busy, total) jiffies of all the host's cores since boot; None where /proc/stat is not."""
    try:
        with open("/proc/stat") as handle:
            fields = handle.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    values = [float(value) for value in fields[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0.0)  # idle + iowait
    return sum(values) - idle, sum(values)


def host_busy(before: tuple[float, float] | None, after: tuple[float, float] | None
              ) -> float | None:
    if before is None or after is None or after[1] <= before[1]:
        return None
    return round((after[0] - before[0]) / (after[1] - before[1]), 3)


def store_cpu_s(client: Any) -> float | None:
    """The store's main-thread CPU seconds so far (all its threads where it does not say)."""
    try:
        info = client.info("cpu")
    except Exception:  # a store that refuses INFO (an ACL, a proxy): no figure, not a failure
        return None
    if "used_cpu_user_main_thread" in info:
        return float(info["used_cpu_user_main_thread"]) + float(info["used_cpu_sys_main_thread"])
    if "used_cpu_user" in info:
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    return None


def host_cores() -> int:
    return os.cpu_count() or 1


@dataclass(frozen=True)
class StepLoad:
    """One step's figures, as ``name`` reads them (None: not measured)."""

    target_rate: float
    delivered_rate: float
    slots_busy: float | None
    store_cpu: float | None
    host_cpu: float | None
    hold_p50_ms: float | None
    live_workers_min: int | None = None  # the fewest workers alive (faults killed the rest)


def name(over: StepLoad | None, first_hold_ms: float | None) -> tuple[str, str]:
    """The bottleneck of a knee, from the first step that did not fit (``over``; None: every
    step fit) and the size's first step's hold time, with its reason in figures."""
    if over is None:
        return "none", "every step fit: no limit reached (more with --steps or --step-rate)"
    figures = _figures(over)
    host_full = over.host_cpu is not None and over.host_cpu >= HOST_BUSY
    if over.store_cpu is not None and over.store_cpu >= STORE_BUSY:
        return "store", f"the store's main thread {over.store_cpu:.0%} busy ({figures})"
    if over.delivered_rate < MIN_DELIVERED * over.target_rate:
        if host_full:
            return "host", (f"the load generator fell short of {over.target_rate:g} jobs/s on "
                            f"a host {over.host_cpu:.0%} busy ({figures}); {HOST_WAY_OUT}")
        return "generator", (f"the load generator delivered {over.delivered_rate:g} of "
                             f"{over.target_rate:g} jobs/s ({figures}): more Locust users or "
                             "processes (load.users, load.processes)")
    stretched = (over.hold_p50_ms is not None and first_hold_ms
                 and over.hold_p50_ms > HOLD_STRETCH * first_hold_ms)
    if over.slots_busy is not None and over.slots_busy >= POOL_BUSY:
        if host_full and stretched:
            return "host", (f"the slots were busy because the work slowed on a host "
                            f"{over.host_cpu:.0%} busy (hold p50 {over.hold_p50_ms:g} ms, "
                            f"{first_hold_ms:g} ms in the first step; {figures}); "
                            f"{HOST_WAY_OUT}")
        return "pool", f"the pool's slots {over.slots_busy:.0%} busy ({figures})"
    if host_full:
        return "host", (f"the host {over.host_cpu:.0%} busy while neither the pool nor the "
                        f"store was full ({figures}); {HOST_WAY_OUT}")
    return "unknown", (f"neither the pool, the store, the generator nor the host was full "
                       f"({figures}): the claim path's own latency?")


def _figures(step: StepLoad) -> str:
    def share(value: float | None) -> str:
        return "-" if value is None else f"{value:.0%}"

    live = ("" if step.live_workers_min is None else
            f", as few as {step.live_workers_min} worker(s) alive")
    return (f"slots {share(step.slots_busy)}{live}, store CPU {share(step.store_cpu)}, "
            f"host CPU {share(step.host_cpu)} at {step.target_rate:g} jobs/s")
