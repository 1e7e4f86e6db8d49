"""Start-up: from ``echomq-chaos run`` (a fresh process, as a user starts it) to the first claim
with 8 workers on the local runtime, vs starting a bare valkey-server until it answers PING.
Runs alternate with the baseline, medians of each. The first claim's time is its event's ``ts``
(Valkey's clock, which is this machine's clock) against the wall clock when ``run`` started.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import Row, median, valkey_server
from chaos.history.events import iter_history

SCENARIO = Path(__file__).parent / "scenarios" / "startup-8.toml"


def run_to_first_claim_ms(out: Path) -> float:
    started_ms = time.time() * 1000
    done = subprocess.run([sys.executable, "-m", "chaos", "run", str(SCENARIO), "--out",
                           str(out)], capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the start-up run exited {done.returncode}: {done.stderr[-800:]}")
    first_claim = next(event.ts for event in iter_history(out / "history.jsonl")
                       if event.type == "claim")
    return first_claim - started_ms


def worker_import_ms() -> float:
    """One Python process importing the worker (what each of the 8 pays before connecting)."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "chaos.reference.worker", "--help"], capture_output=True,
                   timeout=120, check=True)
    return (time.perf_counter() - started) * 1000


def valkey_start_ms() -> float:
    started = time.perf_counter()
    with valkey_server("startup"):
        ready = time.perf_counter()
    return (ready - started) * 1000


def measure(runs: int) -> dict[str, Any]:
    to_claim, bare, imports = [], [], []
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        for number in range(runs):
            bare.append(valkey_start_ms())
            imports.append(worker_import_ms())
            to_claim.append(run_to_first_claim_ms(Path(tmp) / f"run-{number}"))
    rows = [Row("startup", "run -> first claim, 8 workers, local runtime", median(to_claim),
                "ms", median(bare), "bare valkey-server start -> PING",
                target=("<=", 5.0), note=f"{runs} runs each"),
            Row("startup", "one Python process importing the worker (--help)", median(imports),
                "ms", median(bare), "bare valkey-server start -> PING",
                note="a run starts 8 workers, a reaper and itself on 2 cores")]
    return {"rows": rows, "raw": {"run_to_first_claim_ms": to_claim, "valkey_start_ms": bare,
                                  "worker_import_ms": imports}}
