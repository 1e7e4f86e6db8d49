"""How long a capacity hold must be: the backlog's slope test on a recorded run, offline.

Reads a run directory's ``history.jsonl`` (a ``capacity`` search of one long step, or a ``run``
of the scenario), rebuilds the fresh backlog (jobs enqueued and not yet claimed) every 250 ms
over the step (``capacity-step-1`` to ``capacity-settle-1``) or the run's chaos phase, and:

* ``windows``: slides windows of each length over it (1 s apart) and applies the hold's test to
  each (``chaos.tools.capacity_judge.growth_of``, the hold's skip, tolerance 0): how often it
  says "grows", and the slopes' spread against their median standard error. On a sustainable
  rate every "grows" is a false alarm; on a rate over the service rate every miss is one;
* ``hold``: the whole window read as one hold (a separate check of a knee), with the claim wait
  p50/p99 of the jobs enqueued in it.

    .venv/bin/python -m benchmarks.capacity_hold windows RUN_DIR [--lengths 5,10,20,30]
    .venv/bin/python -m benchmarks.capacity_hold hold RUN_DIR
"""

from __future__ import annotations

import argparse
import bisect
import json
import statistics
from pathlib import Path

from chaos.tools.capacity_judge import HOLD_SKIP, SAMPLE_PERIOD_S, Growth, growth_of, percentile


def read(run_dir: Path) -> tuple[list[tuple[float, int]], list[float]]:
    """The fresh backlog's samples over the step or the chaos phase, and the claim waits (ms)
    of the jobs enqueued in it."""
    events = [json.loads(line) for line in (run_dir / "history.jsonl").open()]
    phases = {e["phase"]: int(e["ts"]) for e in events if e.get("type") == "phase"}
    first, last = (("chaos", "heal") if "chaos" in phases
                   else ("capacity-step-1", "capacity-settle-1"))
    start, end = phases[first], phases[last]
    enqueued: dict[str, int] = {}
    claimed: dict[str, int] = {}
    for event in events:
        kind, job = event.get("type"), event.get("id")
        if kind == "enqueue":
            enqueued[job] = int(event["ts"])
        elif kind == "claim" and job in enqueued and job not in claimed:
            claimed[job] = int(event["ts"])
    enqueue_ts, claim_ts = sorted(enqueued.values()), sorted(claimed.values())
    samples: list[tuple[float, int]] = []
    step_ms = int(SAMPLE_PERIOD_S * 1000)
    for ts in range(start, end + 1, step_ms):
        waiting = bisect.bisect_right(enqueue_ts, ts) - bisect.bisect_right(claim_ts, ts)
        samples.append(((ts - start) / 1000, waiting))
    waits = [float(claimed.get(job, end) - ts) for job, ts in enqueued.items()
             if start <= ts <= end]
    return samples, waits


def windows(samples: list[tuple[float, int]], lengths: list[int]) -> list[str]:
    per_s = round(1 / SAMPLE_PERIOD_S)
    lines = []
    for length in lengths:
        size = length * per_s
        if size > len(samples):
            break
        tests: list[Growth] = [growth_of(samples[at:at + size], HOLD_SKIP)
                               for at in range(0, len(samples) - size + 1, per_s)]
        slopes = [test.slope for test in tests]
        grows = sum(test.grows(0.0) for test in tests)
        lines.append(f"{length:>4} s  {len(tests):>7}  {grows:>5}  "
                     f"{statistics.mean(slopes):+9.3f}  {statistics.pstdev(slopes):8.3f}  "
                     f"{statistics.median(test.se for test in tests):9.3f}  {max(slopes):+8.2f}")
    return ["hold  windows  grows  mean slope  slope sd  median se  max slope",
            *lines]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.capacity_hold",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("windows", "hold"))
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--lengths", default="5,10,20,30,45,60")
    args = parser.parse_args(argv)
    samples, waits = read(args.run_dir)
    span = samples[-1][0] if samples else 0.0
    backlog = [count for _, count in samples]
    print(f"{args.run_dir}: {len(waits)} jobs over {span:.1f} s ({len(waits) / max(span, 1e-9):.1f}"
          f"/s); backlog mean {statistics.mean(backlog):.2f}, max {max(backlog)}")
    if args.mode == "windows":
        print("\n".join(windows(samples, [int(n) for n in args.lengths.split(",")])))
    else:
        growth = growth_of(samples, HOLD_SKIP)
        print(f"as a hold: backlog {growth.words()} ({'grows' if growth.grows(0.0) else 'holds'}"
              f"), {samples[-1][1]} waiting at the end; claim wait p50 "
              f"{percentile(waits, 0.5):.0f} ms, p99 {percentile(waits, 0.99):.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
