"""A capacity search's result: its steps, its knee (held or not), the pool's service rate, and
the table and the one-line answer printed from them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from chaos.errors import EXIT_ABORTED, EXIT_FAIL, EXIT_INFRA, EXIT_PASS
from chaos.tools import bottleneck
from chaos.tools.capacity_judge import CapacitySearch, Step

SCHEMA = 2  # 2: holds, the service rate, the slope's standard error


@dataclass
class CapacityResult:
    scenario: str
    search: CapacitySearch
    steps: list[Step] = field(default_factory=list)
    knee_rate: float | None = None
    # over capacity | generator limited | max steps | not held | aborted | error
    stopped_by: str = ""
    error: str | None = None
    workers: int = 0
    slots: int = 0  # workers x concurrency
    bottleneck: str = ""  # pool | store | generator | host | unknown | none (tools.bottleneck)
    bottleneck_why: str = ""
    held: bool = False  # the knee was held for search.hold_ms and stayed within capacity
    service_ms_mean: float | None = None  # claim -> complete of an attempt, over every step
    recorder: bool = False  # a MONITOR recorder ran (history source monitor)

    @property
    def service_rate(self) -> float | None:
        """slots / mean claim-to-complete (Little's law): what the whole pool can serve."""
        if not self.service_ms_mean or not self.slots:
            return None
        return round(self.slots * 1000 / self.service_ms_mean, 1)

    @property
    def over_rate(self) -> float | None:
        """The lowest rate that did not fit (None: every step fit)."""
        over = [step.target_rate for step in self.steps if not step.within]
        return min(over) if over else None

    def holds(self) -> list[Step]:
        return [step for step in self.steps if step.kind == "hold"]

    def name_bottleneck(self) -> None:
        """What set the knee, from the lowest step that did not fit."""
        over = [step for step in self.steps if not step.within]
        first = min(over, key=lambda step: step.target_rate) if over else None
        first_hold = self.steps[0].hold_p50_ms if self.steps else None
        self.bottleneck, self.bottleneck_why = bottleneck.name(
            first.load() if first else None, first_hold)

    def store_ceiling(self) -> float | None:
        """Jobs/s at which the store's main thread would be busy all the time, at the CPU per
        completed job its steps measured (None without a figure)."""
        return ceiling_of(self.steps)

    @property
    def exit_code(self) -> int:
        if self.stopped_by == "aborted":
            return EXIT_ABORTED
        if self.stopped_by == "error":
            return EXIT_INFRA
        return EXIT_PASS if self.knee_rate is not None else EXIT_FAIL

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "scenario": self.scenario, "search": asdict(self.search),
            "knee_rate": self.knee_rate, "held": self.held, "stopped_by": self.stopped_by,
            "workers": self.workers, "slots": self.slots, "bottleneck": self.bottleneck,
            "bottleneck_why": self.bottleneck_why, "store_ceiling": self.store_ceiling(),
            "service_ms_mean": self.service_ms_mean, "service_rate": self.service_rate,
            "steps": [asdict(step) for step in self.steps],
            **({"error": self.error} if self.error else {}),
        }


HEADER = ("step    target  delivered  wait p99ms   backlog  growth/s ± se  cap   why\n"
          "----  --------  ---------  ----------  --------  -------------  ----  ---")


def knee_line(result: CapacityResult) -> str:
    """The search's answer in one statement: the knee and the step that bounded it."""
    over = [step for step in result.steps if not step.within]
    last = (min(over, key=lambda step: step.target_rate) if over
            else result.steps[-1] if result.steps else None)  # refining steps come after it
    why = f" ({last.reason})" if last is not None and last.reason else ""
    if result.stopped_by == "not held":
        tried = ", ".join(f"{step.target_rate:g}" for step in result.holds())
        return (f"knee: none held; holds of {result.search.hold_ms / 1000:g} s at {tried} "
                f"jobs/s each failed{why}")
    if result.stopped_by.startswith("max steps") and last is not None:
        return (f"knee: not reached; every step fit, up to {last.target_rate:g} jobs/s "
                "(more with --steps or --step-rate)")
    if result.stopped_by == "generator limited" and last is not None:
        floor = (f"at least {result.knee_rate:g} jobs/s" if result.knee_rate is not None
                 else "unknown")
        return (f"knee: {floor}; at {last.target_rate:g} jobs/s the load generator, not the "
                f"pool, was the limit{why}")
    if result.stopped_by == "over capacity" and last is not None:
        if result.knee_rate is None:
            return (f"knee: none; the first step, {last.target_rate:g} jobs/s, did not "
                    f"fit{why}")
        return (f"knee: {result.knee_rate:g} jobs/s, the highest rate that fit; "
                f"{last.target_rate:g} jobs/s did not{why}")
    so_far = (f"{result.knee_rate:g} jobs/s fit so far" if result.knee_rate is not None
              else "no step finished")
    return f"knee: not found, the search {result.stopped_by or 'stopped'}; {so_far}"


def hold_line(result: CapacityResult) -> str:
    """Whether the knee was held: for how long, its backlog's slope and claim wait."""
    if result.knee_rate is None:
        return ""
    if not result.search.hold_ms:
        return (f"hold: none (--hold-ms 0): {result.knee_rate:g} jobs/s fit "
                f"{result.search.step_ms / 1000:g} s steps only")
    held = next((step for step in reversed(result.holds())
                 if step.within and step.target_rate == result.knee_rate), None)
    if held is None:
        return f"hold: {result.knee_rate:g} jobs/s was not held"
    failed = [step for step in result.holds() if not step.within]
    before = ("; held lower after " + ", ".join(f"{step.target_rate:g}" for step in failed)
              + " jobs/s failed theirs") if failed else ""
    wait = "-" if held.claim_wait_p99_ms is None else f"{held.claim_wait_p99_ms:g}"
    return (f"hold: {result.knee_rate:g} jobs/s held {held.length_ms / 1000:g} s: backlog "
            f"{held.growth().words()}, claim wait p99 {wait} ms{before}")


def service_line(result: CapacityResult) -> str:
    rate = result.service_rate
    if rate is None:
        return "service rate: not measured (no job completed)"
    line = (f"service rate: {rate:g} jobs/s ({result.slots} slots / {result.service_ms_mean:g} "
            "ms mean claim-to-complete, Little's law)")
    if result.search.fault:
        served = [f"{step.target_rate:g} jobs/s {step.live_slots_mean:g} slots, "
                  f"{step.service_rate:g} jobs/s" for step in result.holds()
                  if step.service_rate is not None and step.live_slots_mean is not None]
        line += ("; that is with every worker alive: under the faults fewer slots were live"
                 + (f" (hold at {served[-1]})" if served else ""))
    if result.knee_rate is not None and result.knee_rate > rate:
        line += (f"; the knee {result.knee_rate:g} is above it: the mean fell as steps were "
                 "added after the knee's own (a knee is judged on the service rate measured "
                 "until then)")
    return line


def ceiling_of(steps: Iterable[Step]) -> float | None:
    """Completed jobs per second of the store's main-thread CPU over ``steps``."""
    measured = [step for step in steps if step.store_cpu_s and step.completed]
    cpu = sum(step.store_cpu_s or 0.0 for step in measured)
    return round(sum(step.completed for step in measured) / cpu, 1) if cpu > 0 else None


def table(result: CapacityResult) -> str:
    search = result.search
    hold = (f"; knee held {search.hold_ms / 1000:g} s" if search.hold_ms else "; knee not held")
    lines = [f"capacity of {result.scenario}: claim wait p99 <= {search.p99_ms:g} ms, backlog "
             f"slope not shown (99%) above {search.backlog_growth:g} x rate /s; steps of "
             f"{search.step_ms / 1000:g} s{hold}"
             + (", faults in every step" if search.fault else ""), HEADER]
    lines += [step.row() for step in sorted(result.steps,
                                            key=lambda step: (step.target_rate, step.index))]
    lines.append(knee_line(result))
    if line := hold_line(result):
        lines.append(line)
    lines.append(service_line(result))
    if result.bottleneck:
        lines.append(f"bottleneck: {result.bottleneck}: {result.bottleneck_why}")
    if result.error:
        lines.append(f"error: {result.error}")
    return "\n".join(lines)
