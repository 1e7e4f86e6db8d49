"""The toolkit under its own faults: Ctrl-C twice, a SIGKILLed runner, `clean`.
Real runs through the CLI, real processes, counted through /proc."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from procs import children_of, pid_records, report, wait_until_gone

from chaos.history.events import read_history
from chaos.run.offline import VERDICT_KEYS
from chaos.runtime.pids import PID_DIR, clean_processes, is_alive, record_process, start_ticks

ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "chaos", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def start_run(scenario: str, out: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "chaos", "run", str(ROOT / "scenarios" / f"{scenario}.toml"),
         "--out", str(out), *extra],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for_line(runner: subprocess.Popen[str], text: str, timeout: float = 60) -> str:
    assert runner.stdout is not None
    deadline = time.monotonic() + timeout
    seen = []
    for line in runner.stdout:
        seen.append(line)
        if text in line:
            return "".join(seen)
        assert time.monotonic() < deadline, f"no {text!r} within {timeout}s:\n{''.join(seen)}"
    raise AssertionError(f"runner ended before {text!r}:\n{''.join(seen)}")


@pytest.mark.integration
def test_second_interrupt_kills_everything_at_once(tmp_path: Path):
    """Workers busy with 8 s jobs make the orderly teardown slow (they finish what they hold);
    a second SIGINT must not wait for that."""
    out = tmp_path / "run"
    job_ms = 8000
    runner = start_run("steady-state", out, "--set", "topology.lease_ms=30000",
                       "--set", 'topology.handler.distribution="fixed"',
                       "--set", f"topology.handler.fixed_ms={job_ms}")
    wait_for_line(runner, "phase chaos")
    time.sleep(0.5)
    records = pid_records(out)
    assert {r.name for r in records} >= {"valkey", "reaper", "worker-1", "worker-2"}
    assert all(is_alive(r) for r in records)
    runner.send_signal(signal.SIGINT)
    wait_for_line(runner, "interrupted: tearing down")
    second = time.monotonic()
    runner.send_signal(signal.SIGINT)
    output, _ = runner.communicate(timeout=30)
    exited_after = time.monotonic() - second
    assert runner.returncode == 130
    assert "interrupted again" in output
    assert exited_after < job_ms / 1000 / 2, "it waited for the workers' jobs"
    assert wait_until_gone(records, timeout=5) is not None
    assert report(out)["verdict"] == "aborted"
    assert len(read_history(out / "history.jsonl")) > 10
    assert cli("check", str(out)).returncode == 130


@pytest.mark.integration
def test_sigkilled_runner_takes_its_children_along_and_clean_is_idempotent(tmp_path: Path):
    out = tmp_path / "run"
    runner = start_run("pause-worker", out)  # a frozen (SIGSTOPped) worker when it dies
    wait_for_line(runner, "phase chaos")
    time.sleep(1.0)
    records = pid_records(out)
    # valkey, the fork server, reaper, 3 workers
    assert len(records) == 6 and all(is_alive(r) for r in records)
    # valkey and the fork server are the runner's children; the fork server forked the rest
    forkserver = next(r.pid for r in records if r.name == "forkserver")
    assert sorted(r.pid for r in records) == sorted(children_of(runner.pid)
                                                    + children_of(forkserver))
    runner.kill()
    runner.communicate(timeout=10)
    gone_after = wait_until_gone(records, timeout=10)
    assert gone_after is not None, [r.name for r in records if is_alive(r)]
    print(f"children gone {gone_after:.3f}s after SIGKILL of the runner")
    # What a SIGKILLed runner leaves: its pid files (nothing alive), and a checkable history.
    checked = cli("check", str(out), "--json")
    assert checked.returncode == 130
    assert not (out / "report.json").exists()  # nothing of the runner ran after SIGKILL
    first = cli("clean", "--runs", str(tmp_path))
    assert first.returncode == 0
    assert ": killed " not in first.stdout  # PDEATHSIG already did it: 0 orphans
    assert first.stdout.count("removed pid file") == 7  # 6 processes + the runner
    assert not (out / PID_DIR).exists()
    written = report(out)  # clean wrote the report the runner could not
    assert written["verdict"] == "aborted" and written["scenario"] == "pause-worker"
    assert written["jobs"]["enqueued"] > 0 and "killed" in written["error"]
    rechecked = json.loads(checked.stdout)  # clean judged it as check does
    assert {k: written.get(k) for k in VERDICT_KEYS} == {k: rechecked.get(k) for k in VERDICT_KEYS}
    again = cli("clean", "--runs", str(tmp_path))
    assert again.returncode == 0 and "nothing left behind" in again.stdout


def test_clean_kills_only_the_recorded_process_group_never_a_recycled_pid(tmp_path: Path):
    run, other, live = tmp_path / "run-a", tmp_path / "run-b", tmp_path / "run-c"
    sleeper = ["sleep", "60"]
    # A leftover worker with a grandchild in its group (a wrapper that started something).
    leader = subprocess.Popen(["sh", "-c", "sleep 60 & exec sleep 61"], start_new_session=True)
    innocent = subprocess.Popen(sleeper, start_new_session=True)
    runner = subprocess.Popen(sleeper, start_new_session=True)
    try:
        deadline = time.monotonic() + 5
        while len(_group(leader.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        group = _group(leader.pid)
        assert len(group) == 2
        record_process(run, "worker-1", leader.pid)
        # A record whose pid now belongs to another process (a recycled pid): start time differs.
        record_process(other, "worker-2", innocent.pid)
        stale = other / PID_DIR / "worker-2.json"
        stale.write_text(stale.read_text().replace(f'"start_ticks": {start_ticks(innocent.pid)}',
                                                   '"start_ticks": 1'))
        # A run whose runner still lives is left alone entirely.
        record_process(live, "runner", runner.pid)
        record_process(live, "valkey", innocent.pid)

        done = clean_processes(tmp_path)
        assert sum("killed worker-1" in line for line in done) == 2, done
        leader.wait(timeout=5)
        assert wait_until_gone_pids(group)
        assert innocent.poll() is None and runner.poll() is None
        assert any("still running" in line for line in done)
        assert not (run / PID_DIR).exists() and not (other / PID_DIR).exists()
        assert (live / PID_DIR / "valkey.json").exists()
        # Idempotent: nothing more to kill or remove (the live run is reported, still untouched).
        assert [line for line in clean_processes(tmp_path) if "still running" not in line] == []
        assert innocent.poll() is None
    finally:
        for process in (leader, innocent, runner):
            process.kill()
            process.wait()


def _group(pgid: int) -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir()
            if p.name.isdigit() and _pgid(int(p.name)) == pgid]


def _pgid(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[2]) if fields[0] != "Z" else None


def wait_until_gone_pids(pids: list[int], timeout: float = 5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(_pgid(pid) is not None for pid in pids):
            return True
        time.sleep(0.01)
    return False


# --- crash-safe evidence --------------------------------------------------------------------


def test_a_report_is_replaced_whole_or_not_at_all(tmp_path: Path):
    from chaos.files import write_json_atomic

    path = tmp_path / "report.json"
    write_json_atomic(path, {"verdict": "pass"})
    with pytest.raises(TypeError):
        write_json_atomic(path, {"verdict": "fail", "broken": object()})  # fails mid-write
    assert path.read_text() == '{\n  "verdict": "pass"\n}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]  # no temp file left


def test_a_history_torn_by_a_crash_loses_only_its_last_line(tmp_path: Path):
    run = '{"seq":"1-0","type":"run","ts":1,"lease_ms":1000,"reap_interval_ms":250}\n'
    enqueue = '{"seq":"2-0","type":"enqueue","ts":2,"id":"j1"}\n'
    path = tmp_path / "history.jsonl"
    path.write_text(run + enqueue + '{"seq":"3-0","type":"cla')  # the writer died mid-line
    assert [e.type for e in read_history(path)] == ["run", "enqueue"]
    path.write_text(run + '{"seq":"3-0","type":"cla\n' + enqueue)  # not at the end: corrupt
    with pytest.raises(ValueError, match=re.escape(f"{path}:2")):
        read_history(path)


@pytest.mark.integration
def test_leases_still_held_when_the_drain_ends_are_reaped_not_judged_unreaped(tmp_path: Path):
    """The drain times out while the worker holds leases it never renews (heartbeat off,
    handlers 2.5 leases long: the first leases lapse, are reaped and the jobs claimed again by
    free slots, whose leases are live when the drain ends, 0.1 + 1.1 s after the first claims,
    nearly a lease before they lapse). Told to stop, the worker finishes them long past their
    deadlines. The reaper runs until the worker is gone, so those leases are reaped and the late
    completes rejected, as the queue would: no late complete is read as a lease the reaper left
    unreaped (reap_prompt), and the jobs left in the queue make the run unknown, not failed."""
    import io

    from chaos.run.runner import run_scenario
    from chaos.scenario.loading import scenario_from_dict

    scenario = scenario_from_dict({
        "name": "drain-ends-with-leases-held",
        "topology": {"workers": 1, "concurrency": 4, "lease_ms": 1000, "reap_interval_ms": 100,
                     "heartbeat_ms": 0,
                     "handler": {"distribution": "fixed", "fixed_ms": 2500}},
        "load": {"rate": 50, "max_jobs": 2},
        "phases": {"warmup_ms": 0, "chaos_ms": 100, "heal_ms": 0, "drain_margin_ms": 0},
        "check": {"tolerance_ms": 0},
    }, "test")
    result = run_scenario(scenario, tmp_path / "run", io.StringIO())
    found = result.report
    last = found["run"]["backlog"][-1]
    assert (last["phase"], found["run"]["drained"]) == ("drain", False)
    assert last["active"] >= 1, found["run"]["backlog"]  # the drain ended with leases held
    prompt = found["invariants"]["reap_prompt"]
    assert prompt["ok"] and prompt["violations"] == 0, prompt["examples"]
    assert result.verdict == "unknown", found["invariants"]
    # the held leases (the second attempts) were reaped, and their holder's completes rejected
    reaped = {(event.job_id, event.attempt)
              for event in read_history(tmp_path / "run" / "history.jsonl")
              if event.type == "reap"}
    assert {("job-0000001", 2), ("job-0000002", 2)} <= reaped, reaped
    assert found["rejected"].get("complete_rejected", 0) >= 2
