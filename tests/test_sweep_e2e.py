"""``echomq-chaos sweep`` end to end: a real 2x2 grid of real runs (valkey-server, workers really
SIGKILLed), its outputs, the recommendation, Ctrl-C, and bad grids refused before anything runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaos.cli import main
from chaos.history.events import read_history

ROOT = Path(__file__).resolve().parent.parent
KILL_WORKER = str(ROOT / "scenarios" / "kill-worker.toml")
# Short phases; a low rate so that even the needlessly redelivering cells drain.
SHORT = ["--set", "phases.warmup_ms=300", "--set", "phases.chaos_ms=1500",
         "--set", "phases.heal_ms=200", "--set", "phases.drain_margin_ms=2500",
         "--set", "faults.1.at_ms=1000", "--set", "load.rate=20"]


def sweep_cli(*args: str, timeout: float = 150) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "chaos", "sweep", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


@pytest.mark.integration
def test_small_sweep_writes_every_output_and_recommends_a_passing_cell(tmp_path: Path):
    out = tmp_path / "sweep"
    # No heartbeat: a lease must cover the whole handler (uniform 100-400 ms in kill-worker).
    result = sweep_cli(KILL_WORKER, "--lease-ms", "250,2000", "--reap-ms", "100,250",
                       "--heartbeat-ms", "off", "--target-recovery-ms", "3000",
                       "--out", str(out), "--store", str(tmp_path / "runs.sqlite"), *SHORT)
    assert result.returncode in (0, 1), result.stderr[-3000:]
    summary = json.loads((out / "sweep.json").read_text())
    # --store: each cell's run recorded, as its report.json says
    from chaos.store.database import open_store
    from chaos.store.record import report_figures

    store = open_store(str(tmp_path / "runs.sqlite"))
    try:
        stored = {run.record.run_dir: run.record for run in store.runs()}
    finally:
        store.close()
    assert len(stored) == 4 and {r.command for r in stored.values()} == {"sweep"}
    for run_dir, stored_run in stored.items():
        report = json.loads((Path(run_dir) / "report.json").read_text())
        assert stored_run.figures == report_figures(report)
        assert stored_run.verdict == report["verdict"]
    assert len({r.settings_hash for r in stored.values()}) == 4  # four settings, four hashes
    assert summary["completed_cells"] == summary["planned_cells"] == 4
    assert summary["aborted"] is False and summary["target_recovery_ms"] == 3000
    cells = {(c["lease_ms"], c["reap_interval_ms"]): c for c in summary["cells"]}
    assert set(cells) == {(250, 100), (250, 250), (2000, 100), (2000, 250)}

    # One progress line per cell, with an ETA; the table has a row per cell.
    assert len([line for line in result.stderr.splitlines() if line.startswith("[cell ")]) == 4
    assert "ETA" in result.stderr
    table_rows = [line for line in result.stdout.splitlines() if line.split()[:1] in
                  (["250"], ["2000"])]
    assert len(table_rows) == 4 and "recovery p50/p99/max" in result.stdout

    # Every cell keeps a full run directory whose history shows no heartbeat at all.
    for cell in cells.values():
        assert cell["heartbeat_ms"] == 0 and cell["runs"] == 1
        run_dir = Path(cell["run_dirs"][0])
        assert run_dir.is_relative_to(out)
        assert json.loads((run_dir / "report.json").read_text())["verdict"] == cell["verdict"]
        events = read_history(run_dir / "history.jsonl")
        assert not [e for e in events if e.type.startswith("extend")]
        assert cell["model"]["high_ms"] == cell["lease_ms"] + cell["reap_interval_ms"]
    assert summary["evidence"]["extend_rtt_ms"]["count"] == 0
    handler = summary["evidence"]["handler_ms"]
    assert handler["count"] > 20 and handler["max_ms"] > 250  # longer than the short lease

    # A lease shorter than the handler with no heartbeat lapses under live workers.
    for reap in (100, 250):
        assert cells[(250, reap)]["needless"] >= 1
        assert cells[(2000, reap)]["needless"] == 0
        assert cells[(2000, reap)]["renewal_gap"]["max_ms"] < 2000
    # Kills strand leases in every cell, and recovery is measured against the model.
    assert all(cell["recovery"]["count"] >= 1 for cell in cells.values())

    recommendation = summary["recommendation"]
    if recommendation["cell"] is not None:
        chosen = next(c for c in cells.values() if c["key"] == recommendation["cell"])
        assert chosen["verdict"] == "pass" and chosen["needless"] == 0
        assert chosen["lease_ms"] == 2000
    else:  # only if a 2000 ms cell failed an invariant; then the text must say why
        assert any(c["verdict"] != "pass" for c in cells.values() if c["lease_ms"] == 2000)
        assert recommendation["binding"]
    assert " ".join(recommendation["text"].split()) in " ".join(result.stdout.split())

    page = (out / "sweep.html").read_text()
    assert page.count("<svg") == 2  # recovery p99 and needless heatmaps for the one heartbeat
    assert "<script" not in page and "<link" not in page and " src=" not in page
    assert "Recommendation" in page and "needless redeliveries" in page


@pytest.mark.integration
def test_ctrl_c_stops_the_sweep_and_still_reports_the_cells_done(tmp_path: Path):
    out = tmp_path / "sweep"
    sweep = subprocess.Popen(
        [sys.executable, "-m", "chaos", "sweep", KILL_WORKER, "--lease-ms", "500,1000",
         "--reap-ms", "100,250", "--out", str(out), *SHORT],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert sweep.stdout is not None
    deadline = time.monotonic() + 90
    for line in sweep.stdout:
        if line.startswith("[cell 1/4]") or time.monotonic() > deadline:
            break
    time.sleep(1.5)  # well inside the second cell's run
    sweep.send_signal(signal.SIGINT)
    rest, _ = sweep.communicate(timeout=60)
    assert sweep.returncode == 130, rest[-3000:]
    assert "interrupted after 1 of 4 cells" in rest
    summary = json.loads((out / "sweep.json").read_text())
    assert summary["aborted"] is True and summary["completed_cells"] == 1
    assert summary["planned_cells"] == 4
    # The best of one cell out of four is no answer: nothing is recommended, and it says why.
    assert summary["recommendation"] is None
    assert "!! no recommendation: the sweep was interrupted after 1 of 4 cells" in rest
    # The interrupted run tore down and kept its evidence, marked aborted.
    second = out / "cells" / "lease500-reap250-hb166" / "run-1"
    assert json.loads((second / "report.json").read_text())["verdict"] == "aborted"
    assert (out / "sweep.html").exists()


@pytest.mark.integration
def test_repetitions_run_with_successive_seeds_and_pool_into_one_cell(tmp_path: Path):
    out = tmp_path / "sweep"
    result = sweep_cli(str(ROOT / "scenarios" / "steady-state.toml"), "--lease-ms", "1000",
                       "--reap-ms", "250", "--heartbeat-ms", "300", "--repeat", "2",
                       "--out", str(out), "--set", "phases.warmup_ms=200",
                       "--set", "phases.chaos_ms=1000", "--set", "phases.heal_ms=200")
    assert result.returncode == 0, result.stderr[-3000:]
    (cell,) = json.loads((out / "sweep.json").read_text())["cells"]
    assert cell["runs"] == 2 and cell["heartbeat_ms"] == 300 and cell["heartbeat_set"] == 300
    reports = [json.loads((Path(d) / "report.json").read_text()) for d in cell["run_dirs"]]
    seeds = [json.loads((Path(d) / "scenario.json").read_text())["seed"]
             for d in cell["run_dirs"]]
    assert seeds == [1, 2]
    assert cell["jobs"] == sum(r["jobs"]["enqueued"] for r in reports) > 0
    assert cell["needless"] == 0 and cell["recovery"]["count"] == 0  # no faults, no lapses
    # Heartbeats ran every 300 ms: their round trips are on the extend events.
    assert json.loads((out / "sweep.json").read_text())["evidence"]["extend_rtt_ms"]["count"] > 0


@pytest.mark.integration
def test_a_bullmq_sweep_models_its_bound_and_recommends_from_renewal_gaps(tmp_path: Path):
    """Real BullMQ workers (killed in each cell): the cells are modelled on BullMQ's own bound,
    2R + max(L, R), and the lease headroom is judged from the renewal gaps of the judged
    (MONITOR) history, whose extends carry no round trip. Read from history.jsonl it was no
    evidence at all: "None ms", and the lease named as binding although every cell passed."""
    from chaos.queues.bullmq.load import BullMQUnavailable, require_installed

    try:
        require_installed()
    except BullMQUnavailable as problem:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but {problem}")
        pytest.skip(str(problem))
    out = tmp_path / "sweep"
    result = sweep_cli(str(ROOT / "scenarios" / "bullmq" / "kill-worker.toml"),
                       "--lease-ms", "600,1000", "--reap-ms", "250", "--out", str(out),
                       "--set", "phases.warmup_ms=500", "--set", "phases.chaos_ms=1200",
                       "--set", "phases.heal_ms=200", "--set", "phases.drain_margin_ms=2500")
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    summary = json.loads((out / "sweep.json").read_text())
    # the default target: BullMQ's bound for the scenario's own settings (L 1000, R 500)
    assert summary["target_recovery_ms"] == 2000 and "BullMQ" in summary["target_source"]
    for cell in summary["cells"]:
        lease, reap = cell["lease_ms"], cell["reap_interval_ms"]
        assert cell["dialect"] == "bullmq" and cell["bound_formula"] == "2R+max(L,R)"
        assert cell["bound_ms"] == cell["model"]["high_ms"] == 2 * reap + max(lease, reap)
        assert cell["verdict"] == "pass" and cell["renewal_gap"]["count"] > 0, cell
    assert "/ 2R+max(L,R) 1100 ms" in result.stderr  # the progress line of lease 600
    evidence = summary["evidence"]
    assert evidence["extend_rtt_ms"]["count"] == 0 and evidence["renewal_gap_ms"]["count"] > 0
    recommendation = summary["recommendation"]
    text = recommendation["text"]
    assert "None" not in text and "renewal gaps" in text, text
    if recommendation["cell"] is not None:
        assert "2R+max(L,R) = " in text
    else:  # only when a cell redelivered needlessly: the binding named, from measured gaps
        assert recommendation["binding"] in ("lease", "conflict"), text
    assert "2R + max(L, R), BullMQ's" in result.stdout


def test_a_bullmq_sweep_refuses_heartbeat_off(tmp_path: Path, capsys):
    """BullMQ always renews its locks (lockRenewTime 0 is its default, lockDuration / 2)."""
    code = main(["sweep", str(ROOT / "scenarios" / "bullmq" / "kill-worker.toml"),
                 "--lease-ms", "1000", "--reap-ms", "500", "--heartbeat-ms", "off,300",
                 "--out", str(tmp_path / "sweep")])
    error = capsys.readouterr().err
    assert code == 2 and "BullMQ always renews its locks" in error
    assert "heartbeat_ms=300" not in error
    assert not (tmp_path / "sweep").exists()


def test_invalid_cells_are_refused_before_anything_runs(tmp_path: Path, capsys):
    out = tmp_path / "sweep"
    code = main(["sweep", KILL_WORKER, "--lease-ms", "500,1000", "--reap-ms", "100",
                 "--heartbeat-ms", "600", "--out", str(out)])
    error = capsys.readouterr().err
    assert code == 2
    assert "cell lease_ms=500 reap_interval_ms=100 heartbeat_ms=600" in error
    assert "heartbeat_ms (600) must be < lease_ms (500)" in error
    assert "lease_ms=1000" not in error  # the valid cell is not reported as an error
    assert not out.exists()


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--lease-ms", "500,abc", "'abc' is not valid"),
    ("--reap-ms", "100,100", "'100' is given twice"),
    ("--heartbeat-ms", "-5", "'-5' is not valid"),
    ("--repeat", "0", "--repeat 0: must be at least 1"),
    ("--target-recovery-ms", "0", "must be > 0"),
])
def test_bad_sweep_arguments_are_usage_errors(tmp_path: Path, capsys, option: str, value: str,
                                              message: str):
    args = {"--lease-ms": "500", "--reap-ms": "100", option: value}
    argv = ["sweep", KILL_WORKER, "--out", str(tmp_path / "sweep")]
    for name, given in args.items():
        argv += [name, given]
    assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "sweep").exists()
