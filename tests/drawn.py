"""What report.html says it drew (the sentence under its timeline), read back, and held equal to
the verdict in report.json: the page must draw the history the verdict judged."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

DRAWN = re.compile(r"<p class='drawn'>Drawn from <code>(?P<source>[^<]*)</code>, the history "
                   r"the verdict judged: (?P<events>\d+) events; (?P<counts>[^;]*); at its end "
                   r"(?P<pending>\d+) pending, (?P<active>\d+) active\.")


def drawn(page: str) -> dict[str, Any]:
    """The page's own account of its timeline: the history file, the events, the transitions
    per type the rates plot, and the backlog where the plot ends."""
    found = DRAWN.search(page)
    assert found is not None, "report.html states no drawn totals"
    counts = {kind: int(count) for kind, count
              in re.findall(r"([a-z_]+) (\d+)", found["counts"])}
    return {"source": html.unescape(found["source"]), "events": int(found["events"]),
            "counts": counts, "backlog": (int(found["pending"]), int(found["active"]))}


def assert_draws_what_was_judged(run_dir: Path, report: dict[str, Any], history: str) -> None:
    """report.html's timeline adds up to the verdict's counts (a run with no double completion
    and no premature reap, as a passing one): the same events, every job enqueued and
    completed, every lease granted (claim or extend), every reap and rejected call; its backlog
    ends where the drain left the queue."""
    figures = drawn((run_dir / "report.html").read_text())
    counts = figures["counts"]
    jobs, invariants = report["jobs"], report["invariants"]
    assert jobs["double_completed"] == 0 and invariants["no_premature_reap"]["ok"]
    assert figures["source"] == history
    assert figures["events"] == report["events"]
    assert counts.get("enqueue", 0) == jobs["enqueued"] > 0
    assert counts.get("complete", 0) == jobs["completed"]
    assert (counts.get("claim", 0) + counts.get("extend", 0)
            == invariants["lease_length"]["granted"])
    assert counts.get("reap", 0) == invariants["reap_prompt"]["count"]
    assert {kind: counts[kind] for kind in counts if kind.endswith("_rejected")} == \
        (report["rejected"] or {})
    undrained = jobs.get("undrained", 0)
    assert sum(figures["backlog"]) == undrained
    if (report.get("run") or {}).get("drained"):
        assert figures["backlog"] == (0, 0)
