"""Start-up: from ``echomq-chaos run`` (a fresh process, as a user starts it) to the first claim
with 8 workers on the local runtime, vs starting a bare valkey-server until it answers PING.
Runs alternate with the baseline, medians of each. The first claim's time is its event's ``ts``
(Valkey's clock, which is this machine's clock) against the wall clock when ``run`` started.
The same history splits that time where it goes: until the ``run`` event (the interpreter, the
runner's own imports and the scenario's validation, with valkey-server booting meanwhile, the
preflight), until
the warmup phase starts (the reaper and the 8 workers forked by the fork server, which imported
them while the runner did, until all are connected), and until the first claim (the load's
first job). The baseline polls PING every 2 ms, as the runner does (chaos.runtime.valkey).

Two more rows say what the first stage is made of: a bare interpreter, and one importing what
a run imports before its first claim (the runner and the scenario's validation).
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


# Where the start-up's time goes: each stage ends at the first event of this type (and phase).
STAGES = (("runner up", "run", None), ("workers connected", "phase", "warmup"),
          ("first claim", "claim", None))


def run_to_first_claim_ms(out: Path) -> dict[str, float]:
    """ms from ``run``'s start to the end of each of the STAGES (the last: the first claim)."""
    started_ms = time.time() * 1000
    done = subprocess.run([sys.executable, "-m", "chaos", "run", str(SCENARIO), "--out",
                           str(out)], capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the start-up run exited {done.returncode}: {done.stderr[-800:]}")
    ends: dict[str, float] = {}
    for event in iter_history(out / "history.jsonl"):
        for stage, kind, phase in STAGES:
            if stage not in ends and event.type == kind and (
                    phase is None or event.extra.get("phase") == phase):
                ends[stage] = event.ts - started_ms
        if len(ends) == len(STAGES):
            return ends
    missing = [stage for stage, _kind, _phase in STAGES if stage not in ends]
    raise RuntimeError(f"the start-up run's history lacks the end of {missing}")


def python_ms(*argv: str) -> float:
    """One Python process running ``argv`` (``-c CODE``, ``-m MODULE ...``) to its end."""
    started = time.perf_counter()
    subprocess.run([sys.executable, *argv], capture_output=True, timeout=120, check=True)
    return (time.perf_counter() - started) * 1000


RUNNER_IMPORTS = "import chaos.cli, chaos.run.runner, chaos.run.plan, chaos.scenario.loading"


def valkey_start_ms() -> float:
    started = time.perf_counter()
    with valkey_server("startup"):
        ready = time.perf_counter()
    return (ready - started) * 1000


def measure(runs: int) -> dict[str, Any]:
    stages: list[dict[str, float]] = []
    bare, interpreter, runner, imports = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        for number in range(runs):
            bare.append(valkey_start_ms())
            interpreter.append(python_ms("-c", "pass"))
            runner.append(python_ms("-c", RUNNER_IMPORTS))
            imports.append(python_ms("-m", "chaos.reference.worker", "--help"))
            stages.append(run_to_first_claim_ms(Path(tmp) / f"run-{number}"))
    to_claim = [ends["first claim"] for ends in stages]
    # each stage's own share: from the previous stage's end (the run's start for the first)
    spans = {stage: median([ends[stage] - (ends[STAGES[index - 1][0]] if index else 0.0)
                            for ends in stages])
             for index, (stage, _kind, _phase) in enumerate(STAGES)}
    split = ", ".join(f"{stage} +{ms:,.0f} ms" for stage, ms in spans.items())
    rows = [Row("startup", "run -> first claim, 8 workers, local runtime", median(to_claim),
                "ms", median(bare), "bare valkey-server start -> PING",
                target=("<=", 5.0), note=f"{runs} runs each; medians of each stage: {split}"),
            Row("startup", "a bare Python interpreter (-c pass)", median(interpreter), "ms",
                median(bare), "bare valkey-server start -> PING"),
            Row("startup", "a Python process importing what run needs to its first claim",
                median(runner), "ms", median(bare), "bare valkey-server start -> PING",
                note="the runner's own floor: redis-py, pydantic and the scenario models, the "
                     "runtime (in the first stage)"),
            Row("startup", "one Python process importing the worker (--help)", median(imports),
                "ms", median(bare), "bare valkey-server start -> PING",
                note="paid once per run, by the fork server, in parallel with the runner")]
    return {"rows": rows, "raw": {"run_to_first_claim_ms": to_claim, "stages_ms": stages,
                                  "valkey_start_ms": bare, "python_ms": interpreter,
                                  "runner_import_ms": runner, "worker_import_ms": imports}}
