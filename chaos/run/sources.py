"""Which history a run directory is judged on, and whether its two sources agree
(docs/design.md §5).

``history.source`` in the scenario (saved in ``scenario.json``): ``scripts`` judges
``history.jsonl`` (the events stream), ``monitor`` judges ``history-monitor.jsonl`` (the MONITOR
recorder's), ``both`` judges ``history.jsonl`` and also the recorder's, and reports whether they
agree. A monitor history is only evidence if its recorder kept up and decoded every call
(``monitor.json``); otherwise, and when the two sources disagree, the run is never a ``pass``.
A gap in the recorder's feed it could not verify (writes ran that it did not see, e.g. around a
store restart) is in the monitor history itself as ``blind`` events on the jobs it hid writes of,
so the checker fails only what the gap cannot explain (``chaos.check.evidence``); a ``both`` run
is judged on the scripts' history, which has no such gap, so there the gap and the disagreement
it causes are only noted.

``python -m chaos.run.sources RUN_DIR...`` prints the agreement table of runs recorded with
``source = "both"``: per-invariant verdicts, event counts per type, and the event-by-event
comparison of the transitions (same order, same fields, timestamps within 1 ms).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from chaos.check.checker import CheckConfig, Verdict, check
from chaos.history.events import Event, read_history
from chaos.history.monitor import HEALTH_FILE, MONITOR_HISTORY, RecorderHealth
from chaos.history.schema import TRANSITIONS, Sweep
from chaos.names import HISTORY_SOURCES

SCRIPTS_HISTORY = "history.jsonl"
SOURCES = HISTORY_SOURCES
# The transitions and the reapers' sweeps: what the queue's own calls record, in either source.
_TRANSITION_TYPES = frozenset((*(kind.TYPE for kind in TRANSITIONS), Sweep.TYPE))
# What a transition must carry alike in both sources (ts is compared within a tolerance).
_COMPARED = ("type", "job_id", "attempt", "worker", "deadline", "lease_ms", "current_attempt")
TS_TOLERANCE_MS = 1


def history_source(run_dir: Path) -> str:
    """The run's history source, from its scenario.json (``scripts`` when it names none)."""
    try:
        scenario = json.loads((run_dir / "scenario.json").read_text())
        source = str(scenario.get("history", {}).get("source", "scripts"))
    except (OSError, ValueError, AttributeError):
        return "scripts"
    return source if source in SOURCES else "scripts"


def judged_history(run_dir: Path) -> Path:
    """The history the verdict is judged on."""
    name = MONITOR_HISTORY if history_source(run_dir) == "monitor" else SCRIPTS_HISTORY
    return run_dir / name


class LiveCounts:
    """Events per type of a history file while it is being written (the live panel of a run
    judged on the monitor history, whose events are not in the stream the exporter counts)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""  # a line not yet written whole
        self.counts: Counter[str] = Counter()

    def update(self) -> Counter[str]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read()
        except OSError:
            return self.counts
        self.offset += len(chunk)
        *lines, self.partial = (self.partial + chunk).split(b"\n")
        for line in lines:
            try:
                self.counts[str(json.loads(line)["type"])] += 1
            except (ValueError, KeyError, TypeError):
                continue
        return self.counts


def compare_histories(scripts: list[Event], monitor: list[Event]) -> dict[str, Any]:
    """The two sources' transitions side by side: counts per type, and event by event (in
    order) the first fields that differ and the largest timestamp difference."""
    ours = [e for e in scripts if e.type in _TRANSITION_TYPES]
    theirs = [e for e in monitor if e.type in _TRANSITION_TYPES]
    mismatches: list[str] = []
    max_ts_diff = 0
    for index, (a, b) in enumerate(zip(ours, theirs, strict=False)):
        differing = [name for name in _COMPARED if getattr(a, name) != getattr(b, name)]
        if a.type == "reap" or a.type == "dead":
            differing += [f"extra.{k}" for k in ("stalls",)
                          if a.extra.get(k, "") != b.extra.get(k, "")]
        max_ts_diff = max(max_ts_diff, abs(a.ts - b.ts))
        if differing and len(mismatches) < 5:
            mismatches.append(f"#{index} {a.type} {a.job_id}: " + ", ".join(
                f"{name} {_get(a, name)!r} vs {_get(b, name)!r}" for name in differing))
    counts_scripts = Counter(e.type for e in ours)
    counts_monitor = Counter(e.type for e in theirs)
    return {
        "counts": {kind: [counts_scripts[kind], counts_monitor[kind]]
                   for kind in sorted(counts_scripts | counts_monitor)},
        "same_counts": counts_scripts == counts_monitor,
        "mismatches": mismatches,
        "max_ts_diff_ms": max_ts_diff,
        "agree": (counts_scripts == counts_monitor and not mismatches
                  and len(ours) == len(theirs) and max_ts_diff <= TS_TOLERANCE_MS),
    }


def _get(event: Event, name: str) -> Any:
    return event.extra.get(name[6:]) if name.startswith("extra.") else getattr(event, name)


def judge_both(run_dir: Path, config: CheckConfig | None,
               final: bool | None) -> dict[str, Any]:
    """Both histories judged and compared: per-invariant verdicts and the event comparison
    (``config``: None reads it from the scripts history's run event)."""
    scripts = read_history(run_dir / SCRIPTS_HISTORY)
    monitor = read_history(run_dir / MONITOR_HISTORY)
    if config is None:
        config = CheckConfig.from_history([e for e in scripts if e.type == "run"][:1])
    verdicts: dict[str, Verdict] = {
        "scripts": check(scripts, config, final=final),
        "monitor": check(monitor, config, final=final)}
    invariants = {name: [verdicts["scripts"].invariants[name].ok,
                         verdicts["monitor"].invariants[name].ok]
                  for name in verdicts["scripts"].invariants}
    events = compare_histories(scripts, monitor)
    return {"invariants": invariants, "events": events,
            "agree": events["agree"] and all(a == b for a, b in invariants.values())}


def evidence(run_dir: Path, config: CheckConfig, final: bool | None) -> dict[str, Any] | None:
    """report.json ``history_recorder``: the recorder's health, the sources' agreement (for
    ``both``), and ``problems``: why the evidence cannot make a pass (empty when it can).
    None for a run judged on the scripts alone."""
    source = history_source(run_dir)
    if source == "scripts":
        return None
    health = RecorderHealth.read(run_dir)
    found: dict[str, Any] = {"source": source,
                             "health": health.as_dict() if health is not None else None}
    gapped = health.unverified_gaps() if health is not None else []
    problems = (health.problems(gaps=source == "monitor") if health is not None
                else [f"no {HEALTH_FILE}: the recorder's health is unknown"])
    notes = [f"{len(gapped)} recorder gap(s) hid writes: the monitor history lacks them (the "
             "verdict is the scripts history's)"] if gapped and source == "both" else []
    silent = _enqueued_never_claimed(run_dir / MONITOR_HISTORY)
    if silent:
        problems.append(f"{silent} job(s) were enqueued but no claim was ever decoded: the "
                        "workers speak another key layout or dialect than the scenario's "
                        "(valkey.prefix, valkey.queue, sut.dialect), or never ran")
    if source == "both" and (run_dir / MONITOR_HISTORY).exists():
        found["agreement"] = agreement = judge_both(run_dir, config, final)
        if not agreement["agree"]:
            (notes if gapped else problems).append("the scripts and monitor histories disagree")
    found["problems"] = problems
    found["notes"] = notes
    return found


def _enqueued_never_claimed(path: Path) -> int:
    """How many jobs a monitor history shows enqueued when it shows no claim at all (0 when
    it has a claim, or no such history)."""
    if not path.exists():
        return 0
    counts = Counter(event.type for event in read_history(path))
    return 0 if counts["claim"] else counts["enqueue"]


def main(argv: list[str]) -> int:
    """Print the agreement table of ``source = "both"`` runs."""
    print("run | invariants scripts/monitor | same verdicts | events scripts/monitor | "
          "max ts diff ms | event-by-event")
    disagreements = 0
    for name in argv:
        run_dir = Path(name)
        agreement = judge_both(run_dir, None, True)
        failed = {source: [inv for inv, oks in agreement["invariants"].items()
                           if not oks[index]] for index, source in enumerate(("s", "m"))}
        same = all(a == b for a, b in agreement["invariants"].values())
        events = agreement["events"]
        counts = " ".join(f"{kind} {a}/{b}" for kind, (a, b) in events["counts"].items())
        print(f"{run_dir.name} | {','.join(failed['s']) or 'pass'} / "
              f"{','.join(failed['m']) or 'pass'} | {same} | {counts} | "
              f"{events['max_ts_diff_ms']} | "
              f"{'same' if not events['mismatches'] else events['mismatches']}")
        disagreements += not agreement["agree"]
    return 1 if disagreements else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
