"""What ``trend`` tests, kind by kind: the samples a run store keeps (RunStore.samples) and the
figures a run gives one of, each with its unit, which way is worse, and the least shift that
may alarm (docs/store.md, "trend").

Two families of figures:

- **fault- and deadline-relative** (``recovery``, ``prompt``, ``reclaim``, ``recomplete``):
  what the reaper does after a fault or a deadline; they carry where the fault falls against
  the reaper's grid, so a longer period can even land some reaps earlier;
- **the pace** (``sweep_period``, ``claim_wait``, ``throughput``, ``drain``, ``redeliveries``):
  what a code change moves whatever that phase: each sweeper's gaps, each job's enqueue to first
  claim, completes in each second of the chaos phase on, and per run the drain and the
  redeliveries.
"""

from __future__ import annotations

from dataclasses import dataclass

from chaos.store.record import SAMPLE_FIGURES

# floors (the least shift an alarm needs besides NOISE_FACTOR x the run-to-run noise):
FLOOR_BOUND = "bound"  # --min-shift-ms and --min-shift-of-bound of the recovery bound
FLOOR_MS = "ms"  # --min-shift-ms
FLOOR_SHARE = "share"  # SHARE_FLOOR of the baseline's median (pooled p50)
FLOOR_COUNT = "count"  # one (a count: a redelivery more)
SHARE_FLOOR = 0.05
UNTESTED_SUMS = ("reclaim", "recomplete")  # shown beside the figures they add up (Kind.tested)


@dataclass(frozen=True)
class Kind:
    kind: str  # the sample kind in the store, or a per-run figure's own name
    figure: str  # its name in the table
    unit: str  # "ms", "/s" or "" (a count)
    worse: int  # +1: larger is worse (a latency); -1: smaller is worse (a throughput)
    floor: str  # FLOOR_*
    plot: str  # the report figure drawn with it on the page
    per_run: tuple[str, ...] = ()  # one value a run: the sum of these figures of it
    # False: shown, never an alarm. Fault to re-claim and to re-complete are sums of figures
    # tested on their own (recovery, then claim wait, then the handler's time) whose spreads
    # add up: over re-sampled windows of sound runs they alone false-alarmed (docs/store.md).
    tested: bool = True

    @property
    def label(self) -> str:
        return f" {self.unit}" if self.unit else ""


KINDS: tuple[Kind, ...] = (
    *(Kind(kind, figure, "ms", 1, FLOOR_BOUND, f"{figure}_p99_ms",
           tested=kind not in UNTESTED_SUMS)
      for kind, figure in SAMPLE_FIGURES.items()),
    Kind("sweep_gap", "sweep_period", "ms", 1, FLOOR_MS, "sweep_gap_p50_ms"),
    Kind("claim_wait", "claim_wait", "ms", 1, FLOOR_SHARE, "claim_wait_p50_ms"),
    Kind("completes_per_s", "throughput", "/s", -1, FLOOR_SHARE, "completes_per_s"),
    Kind("drain", "drain", "ms", 1, FLOOR_MS, "drain_ms", per_run=("drain_ms",)),
    Kind("redeliveries", "redeliveries", "", 1, FLOOR_COUNT, "needed_redeliveries",
         per_run=("needed_redeliveries", "needless_redeliveries")),
)
BY_KIND = {kind.kind: kind for kind in KINDS}
