"""EchoMQ's shipped EchoMQ.Consumer under chaos (docs/echomq.md, "The shipped consumer"): the
elixir-groups scenarios run over sut/echomq-elixir on an EchoMQ build, each verdict held to the
consumers' own logs: the jobs the verdict counts completed and double-completed are the ids the
logs show with one and with two `complete ... result=ok` lines, and every call is decoded.
The consumers reap once a loop (``reap_rhythm = "loop"``): kill-worker passes, its loops'
parks read and judged; with a beat three times the promised interval
(scenarios/echomq/broken/elixir-long-beat.toml) reap_cadence alone fails, on those parks.
Needs ``ECHOMQ_BUILD`` (default /opt/echomq-build/echo/_build/prod/lib) and ``elixir`` on
PATH; without them these tests skip, saying which is missing."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from echomq_build import require_echomq_build

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module", autouse=True)
def echomq_build() -> None:
    require_echomq_build()


def run(scenario: str, out: Path) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "chaos", "run", str(ROOT / "scenarios" / "echomq"
                                                      / f"{scenario}.toml"), "--out", str(out)],
        capture_output=True, text=True, timeout=240, check=False, cwd=ROOT)
    assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-2000:]
    return done.returncode, json.loads((out / "report.json").read_text())


@pytest.mark.parametrize("scenario", ["elixir-groups-kill-worker", "elixir-groups-pause-all"])
def test_the_shipped_consumers_verdict_is_its_logs(scenario: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    code, report = run(scenario, out)
    health = json.loads((out / "monitor.json").read_text())
    assert health["undecoded_calls"] == 0 and health["unattributed_calls"] == 0
    accepted: Counter[str] = Counter()
    for log in sorted((out / "logs").glob("worker-*.log")):
        for line in log.read_text().splitlines():
            fields = line.split()
            if len(fields) > 2 and fields[1] == "complete" and "result=ok" in fields:
                accepted[fields[2].removeprefix("id=")] += 1
    jobs = report["jobs"]
    assert jobs["enqueued"] > 0 and jobs["lost"] == 0
    assert jobs["completed"] == len(accepted)
    assert jobs["double_completed"] == sum(1 for count in accepted.values() if count > 1)
    cadence = report["invariants"]["reap_cadence"]
    assert cadence["rhythm"] == "loop" and cadence["max_park_ms"] is not None
    if scenario == "elixir-groups-kill-worker":
        assert code == 0 and report["verdict"] == "pass", report["verdict"]
        assert cadence["status"] == "ok" and cadence["longest_drain_ms"] > 0


def test_a_consumer_beat_longer_than_the_interval_fails_reap_cadence_alone(tmp_path: Path) -> None:
    code, report = run("broken/elixir-long-beat", tmp_path / "run")
    failed = sorted(name for name, result in report["invariants"].items()
                    if result["status"] == "fail")
    assert code == 1 and failed == ["reap_cadence"], failed
    examples = report["invariants"]["reap_cadence"]["examples"]
    assert examples and all(e["reason"] == "parked past the interval" for e in examples)
