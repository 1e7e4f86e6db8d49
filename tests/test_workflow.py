"""The nightly workflow (.github/workflows/nightly-chaos.yml, docs/reports-and-ci.md) is valid
YAML, each echomq-chaos command in it a valid command line, and it keeps the run store between
nights and fails on a regression as on a failed run."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml
from doc_examples import commands

from chaos.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "nightly-chaos.yml"


def steps() -> list[dict]:
    return yaml.safe_load(WORKFLOW.read_text())["jobs"]["chaos"]["steps"]


def chaos_commands() -> list[list[str]]:
    found = []
    for step in steps():
        body = re.sub(r"\$\{\{[^}]*\}\}", "X", step.get("run", ""))
        for command in commands(body):
            words = shlex.split(command)
            if words and words[0].endswith("bin/echomq-chaos"):
                ends = [i for i, word in enumerate(words) if word in ("||", "&&", ";", "|")]
                found.append(words[1:ends[0] if ends else None])  # the command, not the shell
    return found


def test_every_echomq_chaos_command_of_the_nightly_workflow_parses():
    found = chaos_commands()
    assert len(found) >= 6
    for words in found:
        build_parser().parse_args(words)  # exits 2 (fails the test) on a bad command line


def test_the_nightly_job_keeps_its_run_store_and_fails_on_a_regression():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    assert "ECHOMQ_CHAOS_STORE" in workflow["env"]  # every run stored, by the environment
    used = [step.get("uses", "") for step in steps()]
    assert any(u.startswith("actions/cache/restore@") for u in used)
    assert any(u.startswith("actions/cache/save@") for u in used)
    trend = [words for words in chaos_commands() if words[0] == "trend"]
    assert trend and "--junit" in trend[0]
    # the runs label themselves with the commit, for `trend --by git`
    runs = [words for words in chaos_commands() if words[0] == "run"]
    assert runs and all("--label" in words for words in runs)
