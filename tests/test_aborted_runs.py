"""What an aborted run leaves, read back offline: `check` and `report` after a double Ctrl-C
(the stub report.json, a history cut off before its end event, acknowledgements the runner never
exported)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from histories import History

from chaos.cli import main
from chaos.report.summary import build_report


def cli_here(capsys: pytest.CaptureFixture[str], *args: str) -> subprocess.CompletedProcess[str]:
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(list(args), code, out, err)


def stopped_twice_run_dir(tmp_path: Path) -> Path:
    """What a double Ctrl-C leaves: a history cut off without its end event, a client's
    acknowledgement of a transition the runner never exported, and the stub report.json."""
    run_dir = tmp_path / "run"
    (run_dir / "acks").mkdir(parents=True)
    h = History()
    h.phase("warmup", ts=0)
    h.enqueue("a", ts=10)
    h.claim("a", 1, "w1", ts=20)
    h.write_jsonl(run_dir / "history.jsonl")
    (run_dir / "acks" / "producer.jsonl").write_text(
        '{"op": "enqueue", "id": "a", "t": 10}\n{"op": "enqueue", "id": "b", "t": 30}\n')
    (run_dir / "report.json").write_text(json.dumps(build_report(
        "hand-written", "aborted", None,
        error="interrupted twice: children SIGKILLed, orderly teardown skipped")))
    return run_dir


def test_check_after_a_double_interrupt_names_the_stub_and_no_store_loss(tmp_path: Path,
                                                                          capsys):
    run_dir = stopped_twice_run_dir(tmp_path)
    result = cli_here(capsys, "check", str(run_dir), "--json")
    assert result.returncode == 130
    assert "checker version" not in result.stderr
    assert "report.json is the stub" in result.stderr and "echomq-chaos report" in result.stderr
    acks = json.loads(result.stdout)["ack_ledger"]
    assert (acks["lost"], acks["unexported"]) == (0, 1), acks
    text = cli_here(capsys, "check", str(run_dir)).stdout
    assert "0 lost" in text and "1 not in the history" in text


def test_report_replaces_the_stub_a_double_interrupt_left(tmp_path: Path, capsys):
    run_dir = stopped_twice_run_dir(tmp_path)
    result = cli_here(capsys, "report", str(run_dir))
    assert result.returncode == 130, result.stderr
    written = json.loads((run_dir / "report.json").read_text())
    assert written["verdict"] == "aborted" and "invariants" in written
    assert written["error"].startswith("interrupted twice")  # what the run saw is kept
    assert "same verdict" in cli_here(capsys, "check", str(run_dir)).stderr
