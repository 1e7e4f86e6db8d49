"""``selftest --history monitor|both``, end to end on two short variants: the MONITOR recorder's
history alone catches a mutant by its expected invariant and passes the sound protocol; with
both sources, each run's two histories are judged and compared, and a history that lost one
transition is told apart (the comparison can fail)."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from chaos.history.monitor import MONITOR_HISTORY
from chaos.tools.selftest import SelftestResult, load_mutants, selftest, table
from chaos.tools.selftest_sources import judge_sources

ROOT = Path(__file__).resolve().parent.parent
MUTANTS = ROOT / "scenarios" / "mutants"
pytestmark = pytest.mark.integration


def zoo(variant: str, out: Path, history: str) -> SelftestResult:
    (mutant,) = load_mutants([MUTANTS / f"{variant}.toml"])
    return selftest([mutant], out, history=history, progress=io.StringIO())


def test_monitor_history_alone_catches_the_mutant_and_passes_the_sound_protocol(
        tmp_path: Path):
    result = zoo("short-lease", tmp_path, "monitor")
    (row,) = result.rows
    assert row.caught, (row.mutant, table(result))
    assert row.sound.verdict == "pass", row.sound
    assert result.passed and result.as_dict()["history"] == "monitor"
    for outcome in (row.mutant, row.sound):
        report = json.loads((Path(outcome.run_dir) / "report.json").read_text())
        # Judged on the recorder's history, which kept up and decoded every call.
        assert report["history_recorder"]["source"] == "monitor"
        assert report["history_recorder"]["problems"] == []
        assert (Path(outcome.run_dir) / MONITOR_HISTORY).stat().st_size > 0
        assert outcome.sources is None  # one source: nothing to compare


def test_both_sources_judged_alike_and_a_lost_transition_disagrees(tmp_path: Path):
    result = zoo("no-reaper", tmp_path / "zoo", "both")
    (row,) = result.rows
    assert row.mutant.sources is not None and row.sound.sources is not None
    for outcome in (row.mutant, row.sound):
        found = outcome.sources
        assert found is not None and found.error is None
        assert found.scripts_failed == found.monitor_failed, found
        assert found.event_mismatches == [] and found.figure_differences == [], found
    assert set(row.expected) <= set(row.mutant.sources.monitor_failed)
    assert row.caught and row.sound.verdict == "pass", table(result)
    assert "Both sources" in table(result)

    # The same run with one complete missing from the recorder's history: not the same figures.
    copy = tmp_path / "lost-complete"
    shutil.copytree(row.sound.run_dir, copy)
    lines = (copy / MONITOR_HISTORY).read_text().splitlines(keepends=True)
    dropped = next(i for i, line in enumerate(lines) if json.loads(line)["type"] == "complete")
    (copy / MONITOR_HISTORY).write_text("".join(lines[:dropped] + lines[dropped + 1:]))
    found = judge_sources(copy)
    assert not found.agree and not found.events_agree
    # (the first few differences are listed, by name: the job counts or no_loss's violations)
    assert any(diff.startswith(("jobs.completed", "invariants.no_loss.violations"))
               for diff in found.figure_differences), found
