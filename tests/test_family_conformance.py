"""The conformance suite every registered queue family must pass (docs/families.md), as
Toxiproxy's suite holds every toxic to one contract: its spec and runner seam, its recorded
MONITOR sample decoded to what the queue's own record says happened, with no call left
undecoded, its bound on known cases, and its words in every report. Parametrized over
``chaos.registry.families()``: a family installed from outside the repository is held to it
the same way (the last test builds one, installs it on a path and runs it)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from histories import History

from chaos.check.checker import check
from chaos.check.verdict import CheckConfig
from chaos.family import BatteryFit, QueueFamily, family_for
from chaos.history.dialects import make_dialect
from chaos.history.events import Event
from chaos.history.monitor import HistoryWriter, RecorderHealth, decode_lines
from chaos.history.schema import Run
from chaos.protocol.client import QueueKeys
from chaos.protocol.ids import ID_STYLES
from chaos.registry import FamilySpec, families, family_spec
from chaos.report.summary import build_report, summary_text
from chaos.scenario.loading import scenario_from_dict

ROOT = Path(__file__).resolve().parent.parent
FAMILIES = sorted(families())


def _scenario_for(spec: FamilySpec):  # type: ignore[no-untyped-def]
    """The smallest scenario of that family: the reference queue as it is, any other a SUT
    of the user's speaking its dialect (with the settings its sample says it needs)."""
    if spec.dialect is None:
        return scenario_from_dict({"name": "conformance"}, "test")
    needs = spec.conformance().scenario if spec.conformance is not None else {}
    data: dict[str, Any] = {name: dict(fields) for name, fields in needs.items()}
    data["name"] = "conformance"
    data["sut"] = {**data.get("sut", {}), "workers": ["true"], "dialect": spec.name}
    return scenario_from_dict(data, "test")


@pytest.mark.parametrize("name", FAMILIES)
def test_the_spec_and_its_runner_seam(name: str):
    spec = family_spec(name)
    assert spec.name == name and spec.summary
    scenario = _scenario_for(spec)
    family = family_for(scenario, QueueKeys(scenario.valkey.prefix, scenario.valkey.queue))
    assert isinstance(family, QueueFamily) and family.name == name
    assert family.id_style in ID_STYLES
    assert isinstance(family.sweepers, tuple)
    assert isinstance(family.battery_fit(), BatteryFit)
    assert family.key_base and isinstance(family.bound_source(), str)
    if spec.dialect is not None:
        dialect = make_dialect(name, scenario.valkey.prefix, scenario.valkey.queue, 1000)
        assert callable(dialect.decode) and callable(dialect.jobs_named)
        assert family.dialect_name == name
    else:
        with pytest.raises(ValueError, match="no MONITOR dialect"):
            make_dialect(name, "emq:", "jobs")


@pytest.mark.parametrize("name", FAMILIES)
def test_its_recorded_sample_decodes_to_what_the_queue_recorded(name: str):
    spec = family_spec(name)
    assert spec.conformance is not None, f"{name}: every family ships a conformance sample"
    sample = spec.conformance()
    if spec.dialect is None:
        assert sample.monitor == []  # its scripts write the history: nothing to decode
        return
    assert sample.monitor and sample.expect
    handle, health = io.StringIO(), RecorderHealth(name)
    decode_lines(sample.monitor, HistoryWriter(
        make_dialect(name, sample.prefix, sample.queue, sample.lease_ms), handle, health,
        resolve=lambda address: sample.connection))
    events = [Event.from_record(json.loads(line)) for line in handle.getvalue().splitlines()]
    kinds = {kind for kind, _ in sample.expect}
    decoded = [(event.type, event.job_id) for event in events
               if event.type in kinds and event.job_id]
    assert decoded == sample.expect
    assert health.undecoded_calls == 0 and not health.unreadable_lines


@pytest.mark.parametrize("name", FAMILIES)
def test_its_bound_on_known_cases_and_in_the_reports_words(name: str):
    spec = family_spec(name)
    assert spec.conformance is not None
    sample = spec.conformance()
    assert sample.bounds
    dialect = "" if spec.dialect is None else name
    for lease, interval, bound in sample.bounds:
        assert spec.bound.bound_ms(lease, interval) == bound
        assert spec.bound.reap_lag_ms(lease, interval) == bound - lease >= 0
        config = CheckConfig(lease, interval, tolerance_ms=70, dialect=dialect)
        assert config.bound_ms == bound + 70
    # A hand-written run of this family: one job, its lease stranded by a kill, recovered
    # within the bound. The checker writes the family's words; the summary renders them.
    lease, interval, bound = sample.bounds[0]
    h = History(lease, interval, 100, run=False)
    h.write(Run(scenario="conformance", lease_ms=lease, reap_interval_ms=interval,
                tolerance_ms=100, dialect=dialect), 0)
    h.phase("warmup", ts=0)
    h.enqueue("a", ts=1)
    h.claim("a", 1, "w1", ts=2)
    h.fault("kill", "w1", ts=10)
    h.reap("a", 1, ts=2 + bound)
    h.claim("a", 2, "w2", ts=3 + bound)
    h.complete("a", 2, "w2", ts=4 + bound)
    h.phase("end", ts=10 + bound, drained=1, aborted=0)
    verdict = check(h.events())
    result = verdict.invariants["recovery_bound"]
    assert result.ok and result.figures["model"]["family"] == name
    text = summary_text(build_report("conformance", verdict.word, verdict))
    assert result.figures["model"]["terms"] in text


# --- a family from outside the repository --------------------------------------------------------

TOY_FAMILY = '''
"""A queue family of nobody here: EchoMQ's layout, a bound of L + 2R."""
import dataclasses

from chaos.queues.echomq.family import EchoMQFamily
from chaos.registry import BoundModel, FamilySpec, family_spec


class ToyFamily(EchoMQFamily):
    name = "toyq"


FAMILY = FamilySpec(
    name="toyq",
    summary="a toy family installed from outside the repository",
    family=ToyFamily,
    dialect=lambda prefix, queue, lease_ms: family_spec("echomq").dialect(
        prefix, queue, lease_ms),
    bound=BoundModel(bound_ms=lambda lease, interval: lease + 2 * interval,
                     formula="lease_ms + 2 x reap_interval_ms",
                     terms=lambda lease, interval: f"toy: lease {lease} + 2 x reap {interval}",
                     letters="L+2R"),
    dialect_text={"": "toyq (EchoMQ's layout, a toy's bound)"},
    # its layout is EchoMQ's: the same recorded lines, its own bound's cases
    conformance=lambda: dataclasses.replace(family_spec("echomq").conformance(),
                                            bounds=[(1000, 250, 1500), (300, 1000, 2300)]),
)
'''


def install_toy_family(site: Path) -> dict[str, str]:
    """The package and the distribution metadata pip would write, on a path of its own: what
    ``importlib.metadata`` finds there is an installed distribution like any other."""
    (site / "toyfamily").mkdir(parents=True)
    (site / "toyfamily" / "__init__.py").write_text(textwrap.dedent(TOY_FAMILY))
    info = site / "toyfamily-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toyfamily\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[echomq_chaos.families]\ntoyq = toyfamily:FAMILY\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(site), *filter(None, [os.environ.get("PYTHONPATH")])])}


def test_a_family_installed_from_outside_is_listed_and_used(tmp_path: Path):
    env = install_toy_family(tmp_path / "site")
    listed = subprocess.run([sys.executable, "-m", "chaos", "families", "--json"], env=env,
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert {"reference", "echomq", "bullmq", "toyq"} <= set(rows)
    assert rows["toyq"]["distribution"] == "toyfamily"
    assert rows["toyq"]["bound"] == "lease_ms + 2 x reap_interval_ms"
    # The conformance suite holds it too, as it holds ours.
    suite = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         str(Path(__file__)), "-k", "toyq and not outside"],
        env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert suite.returncode == 0 and "\n3 passed" in suite.stdout, suite.stdout[-3000:]


@pytest.mark.integration
def test_a_family_installed_from_outside_judges_a_real_run(tmp_path: Path):
    """The Node example, declared to speak the toy family: its decoder reads the run, its seam
    drives it, its bound (L + 2R) is the one judged and the one the report spells."""
    env = install_toy_family(tmp_path / "site")
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "chaos", "run",
         str(ROOT / "scenarios" / "node" / "kill-worker.toml"),
         "--set", 'sut.dialect="toyq"', "--out", str(out)],
        env=env, capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    bound = report["invariants"]["recovery_bound"]
    assert bound["model"]["family"] == "toyq" and bound["count"] >= 1
    assert bound["bound_ms"] == 1000 + 2 * 250 + bound["tolerance_ms"]
    assert "toy: lease 1000 + 2 x reap 250" in done.stderr
    assert "toyq (EchoMQ&#x27;s layout, a toy&#x27;s bound)" in (out / "report.html").read_text()
