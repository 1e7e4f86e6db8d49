"""How fast and how completely a run tears down: Ctrl-C, a second Ctrl-C, and a SIGKILLed runner.

Each round starts ``echomq-chaos run`` on a shipped scenario (real valkey-server, reaper,
workers; ``pause-worker`` so one worker is frozen by SIGSTOP when the signal lands), waits for
the chaos phase, reads the run's pid files (every child, with its start time), and then:

* ``sigint``: one SIGINT; time until the runner exits (it heals, stops every child, writes the
  report), and the verdict it wrote;
* ``double``: SIGINT, then a second one as soon as the teardown has begun, with workers busy in
  8 s jobs (so the orderly teardown would take seconds); time from the second signal to exit;
* ``sigkill``: SIGKILL of the runner; time until every recorded child is gone (the kernel's
  PR_SET_PDEATHSIG does it; nothing in the runner runs).

Orphans: recorded children still alive 10 s after the runner ended (the target is 0). Reports the
median, min and max over ``--rounds`` per mode; the figures are wall-clock seconds on this
machine, for the issue's closing note, not a threshold any test asserts.

    .venv/bin/python benchmarks/teardown.py [--rounds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from chaos.runtime.pids import PID_DIR, PidRecord, is_alive, read_record

ROOT = Path(__file__).resolve().parent.parent
ORPHAN_WAIT_S = 10.0


def start(out: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "chaos", "run", str(ROOT / "scenarios" / "pause-worker.toml"),
         "--out", str(out), *extra],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for(runner: subprocess.Popen[str], text: str) -> None:
    assert runner.stdout is not None
    for line in runner.stdout:
        if text in line:
            return
    raise RuntimeError(f"the run ended before {text!r}")


def children(out: Path) -> list[PidRecord]:
    records = [read_record(path) for path in (out / PID_DIR).glob("*.json")]
    return [r for r in records if r is not None and r.name != "runner"]


def gone_after(records: list[PidRecord], timeout: float) -> float | None:
    started = time.monotonic()
    while any(is_alive(r) for r in records):
        if time.monotonic() - started > timeout:
            return None
        time.sleep(0.01)
    return time.monotonic() - started


def one_round(mode: str, out: Path) -> dict[str, Any]:
    extra = ([] if mode != "double" else
             ["--set", "topology.lease_ms=30000", "--set", 'topology.handler.distribution="fixed"',
              "--set", "topology.handler.fixed_ms=8000"])
    runner = start(out, *extra)
    wait_for(runner, "phase chaos")
    time.sleep(1.0)
    records = children(out)
    if mode == "sigkill":
        runner.kill()
        signalled = time.monotonic()
        runner.communicate(timeout=30)
        waited = gone_after(records, ORPHAN_WAIT_S)
        seconds = None if waited is None else time.monotonic() - signalled
    else:
        runner.send_signal(signal.SIGINT)
        signalled = time.monotonic()
        if mode == "double":
            wait_for(runner, "interrupted: tearing down")
            runner.send_signal(signal.SIGINT)
            signalled = time.monotonic()
        runner.communicate(timeout=60)
        seconds = time.monotonic() - signalled
        gone_after(records, ORPHAN_WAIT_S)
    orphans = sum(is_alive(r) for r in records)
    report = out / "report.json"
    verdict = json.loads(report.read_text())["verdict"] if report.exists() else None
    return {"seconds": seconds, "children": len(records), "orphans": orphans,
            "exit_code": runner.returncode, "verdict": verdict}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="teardown-") as temp:
        for mode in ("sigint", "double", "sigkill"):
            rounds = [one_round(mode, Path(temp) / f"{mode}-{i}") for i in range(args.rounds)]
            times = [r["seconds"] for r in rounds if r["seconds"] is not None]
            results[mode] = {
                "rounds": rounds,
                "median_s": round(statistics.median(times), 3) if times else None,
                "min_s": round(min(times), 3) if times else None,
                "max_s": round(max(times), 3) if times else None,
                "orphans": sum(r["orphans"] for r in rounds),
                "children_per_round": rounds[0]["children"],
            }
            print(f"{mode:8} median {results[mode]['median_s']} s  (min {results[mode]['min_s']}"
                  f", max {results[mode]['max_s']}, {args.rounds} rounds, "
                  f"{results[mode]['children_per_round']} children each)  orphans "
                  f"{results[mode]['orphans']}  exit codes "
                  f"{sorted({r['exit_code'] for r in rounds})}  verdicts "
                  f"{sorted({str(r['verdict']) for r in rounds})}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0 if all(r["orphans"] == 0 for r in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
