"""The run store (chaos/store, docs/store.md): records round-trip through a real SQLite file and a
real PostgreSQL server; a store that cannot be opened, of a newer schema, or corrupt is a clear
error (exit 3) that costs no run; a stored run holds report.json's figures and the checker's
samples, and `store import` adds a run directory later."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from chaos.runtime.valkey import free_port
from chaos.store.database import SCHEMA_VERSION, StoreError, engine_url, open_store, redacted
from chaos.store.record import FIGURES, RunRecord, parse_labels, report_figures
from tests.postgres import fresh_database, postgres_url  # noqa: F401 (a fixture)

ROOT = Path(__file__).resolve().parent.parent
KILL_WORKER = str(ROOT / "scenarios" / "kill-worker.toml")
SHORT = ["--set", "phases.warmup_ms=500", "--set", "phases.heal_ms=300",
         "--set", "phases.chaos_ms=2500", "--set", 'load.engine="builtin"']


def chaos(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "chaos", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, **(env or {})})


def record(scenario: str = "kill-worker", started_ms: int = 1_000, **changes) -> RunRecord:
    fields = dict(scenario=scenario, settings_hash="abc123def456", family="reference", seed=7,
                  started_ms=started_ms, verdict="pass", exit_code=0, command="run",
                  run_dir="/runs/1", figures={"recovery_p99_ms": 1203.0, "lost": 0.0},
                  samples={"reap": [1200, 1203], "reclaim": [1209]},
                  unknown_reasons=[], labels={"sut_version": "2.6.5"})
    fields.update(changes)
    return RunRecord(**fields)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty store of each kind: an SQLite file, or a database of its own on the
    module's PostgreSQL server."""
    if request.param == "sqlite":
        yield str(tmp_path / "runs.sqlite")
        return
    with fresh_database(request.getfixturevalue("postgres_url")) as url:
        yield url


# --- the database, both kinds ------------------------------------------------------------------

def test_runs_round_trip_with_their_figures_samples_and_labels(store_url: str):
    store = open_store(store_url)
    try:
        first = store.add(record(started_ms=2_000))
        second = store.add(record("pause-worker", started_ms=1_000, verdict="unknown",
                                  exit_code=4, unknown_reasons=["undrained"], samples={},
                                  labels={}, seed=None))
        runs = store.runs()
        assert [run.id for run in runs] == [second, first]  # oldest first
        assert runs[1].record == record(started_ms=2_000, samples={})  # samples on request
        assert runs[0].record.unknown_reasons == ["undrained"] and runs[0].record.seed is None
        assert store.samples([first, second]) == {first: record().samples, second: {}}
    finally:
        store.close()
    reopened = open_store(store_url)  # migrating again changes nothing
    try:
        assert len(reopened.runs()) == 2
    finally:
        reopened.close()


def test_a_store_of_a_newer_schema_is_refused_not_guessed_at(store_url: str):
    open_store(store_url).close()
    engine = sa.create_engine(engine_url(store_url))  # as a newer echomq-chaos left it
    with engine.begin() as connection:
        connection.execute(sa.text("UPDATE schema_version SET version = :v"),
                           {"v": SCHEMA_VERSION + 1})
    engine.dispose()
    with pytest.raises(StoreError, match=f"schema version {SCHEMA_VERSION + 1} is newer than "
                                         f"this echomq-chaos knows \\({SCHEMA_VERSION}\\)"):
        open_store(store_url)


OPEN_AT = """
import sys, time
from chaos.store.database import open_store
from chaos.store.record import RunRecord
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))  # every opener at the same instant
store = open_store(sys.argv[1])
store.add(RunRecord("kill-worker", "", "reference", 1, 1, "pass", 0, "run", "/runs/x"))
store.close()
"""


def test_a_new_store_opened_by_several_processes_at_once_is_migrated_once(store_url: str):
    """Runs side by side (a suite split over machines, a team's runners on one server) may
    all open a store no run has made yet: each waits for the store's migration lock, one
    builds the schema, and every run is stored."""
    openers = 6
    at = time.time() + 1.5  # past the interpreters' start-up
    processes = [subprocess.Popen([sys.executable, "-c", OPEN_AT, store_url, str(at)],
                                  cwd=ROOT, stderr=subprocess.PIPE, text=True)
                 for _ in range(openers)]
    failures = [process.communicate(timeout=60)[1] for process in processes
                if process.wait(timeout=60) != 0]
    assert not failures, failures[0][-2000:]
    store = open_store(store_url)
    try:
        assert len(store.runs()) == openers
    finally:
        store.close()


def test_bad_urls_and_unreachable_or_corrupt_stores_are_store_errors(tmp_path: Path):
    nobody = free_port()  # nothing listens there
    with pytest.raises(StoreError, match=f"store postgresql://chaos:\\*\\*\\*@127.0.0.1:{nobody}"
                                         "/runs: cannot read its schema version"):
        open_store(f"postgresql://chaos:secret@127.0.0.1:{nobody}/runs")
    with pytest.raises(StoreError, match="unsupported scheme 'mysql'"):
        open_store("mysql://127.0.0.1/runs")
    corrupt = tmp_path / "corrupt.sqlite"
    corrupt.write_bytes(b"this is not an SQLite database, only bytes\n" * 100)
    with pytest.raises(StoreError, match=f"store {corrupt}: cannot read its schema version: "
                                         "file is not a database"):
        open_store(str(corrupt))
    assert "secret" not in redacted("postgresql://chaos:secret@127.0.0.1/runs")


def test_labels_are_key_value_pairs():
    assert parse_labels(["sut_version=2.6.5", "git=abc=1"]) == {"sut_version": "2.6.5",
                                                                  "git": "abc=1"}
    with pytest.raises(ValueError, match="--label 'nokey': expected KEY=VALUE"):
        parse_labels(["nokey"])


# --- real runs ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def unstored_run(tmp_path_factory: pytest.TempPathFactory
                 ) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """One short kill-worker run whose store is a corrupt file: it must still run, and write
    its run directory whole."""
    root = tmp_path_factory.mktemp("unstored")
    corrupt = root / "corrupt.sqlite"
    corrupt.write_bytes(b"\x00garbage" * 512)
    run_dir = root / "run"
    done = chaos("run", KILL_WORKER, "--store", str(corrupt), "--out", str(run_dir), *SHORT)
    return run_dir, done


@pytest.mark.integration
def test_a_store_that_cannot_be_written_costs_no_run(unstored_run):
    run_dir, done = unstored_run
    assert done.returncode == 3, done.stderr[-3000:]
    assert "file is not a database" in done.stderr
    assert f"`echomq-chaos store import {run_dir}` adds it later" in done.stderr
    report = json.loads((run_dir / "report.json").read_text())
    assert report["verdict"] == "pass"  # the run itself was judged, and passed
    assert (run_dir / "history.jsonl").exists() and (run_dir / "report.html").exists()


@pytest.mark.integration
def test_store_import_adds_a_run_directory_later(unstored_run, store_url: str):
    run_dir, _ = unstored_run
    done = chaos("store", "import", str(run_dir), "--store", store_url, "--label", "night=1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{run_dir}: stored as run 1 (pass)" in done.stdout
    report = json.loads((run_dir / "report.json").read_text())
    store = open_store(store_url)
    try:
        (stored,) = store.runs()
        samples = store.samples([stored.id])[stored.id]
    finally:
        store.close()
    assert stored.record.figures == report_figures(report)
    assert {"recovery_p99_ms", "lost", "duplicated", "bound_ms"} <= set(stored.record.figures)
    assert (stored.record.scenario, stored.record.family, stored.record.command,
            stored.record.labels) == ("kill-worker", "reference", "import", {"night": "1"})
    # the samples behind the figures: every stranded lease's recovery, as the report counts them
    assert len(samples["reap"]) == report["recovery"]["reap"]["count"] >= 1
    assert max(samples["reap"]) == report["recovery"]["reap"]["max_ms"]


@pytest.mark.integration
def test_a_run_is_stored_from_the_environment_with_its_labels(tmp_path: Path):
    store = tmp_path / "night.sqlite"
    done = chaos("run", KILL_WORKER, "--label", "sut_version=2.6.5", "--label", "git=abc",
                 "--out", str(tmp_path / "run"), *SHORT, "--set", "seed=11",
                 env={"ECHOMQ_CHAOS_STORE": str(store)})
    assert done.returncode == 0, done.stderr[-3000:]
    opened = open_store(str(store))
    try:
        (stored,) = opened.runs()
    finally:
        opened.close()
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert stored.record.figures == report_figures(report) and stored.record.seed == 11
    assert stored.record.labels == {"sut_version": "2.6.5", "git": "abc"}
    assert stored.record.verdict == "pass" and stored.record.command == "run"
    assert set(stored.record.figures) <= set(FIGURES)


def test_bad_store_arguments_exit_2_before_anything_runs(tmp_path: Path):
    done = chaos("run", KILL_WORKER, "--store", str(tmp_path / "s.sqlite"), "--label", "oops",
                 "--out", str(tmp_path / "run"))
    assert done.returncode == 2 and "--label 'oops': expected KEY=VALUE" in done.stderr
    assert not (tmp_path / "run").exists() and not (tmp_path / "s.sqlite").exists()
    done = chaos("store", "import", str(tmp_path), env={"ECHOMQ_CHAOS_STORE": ""})
    assert done.returncode == 2 and "no store: give --store URL or set ECHOMQ_CHAOS_STORE" \
        in done.stderr
