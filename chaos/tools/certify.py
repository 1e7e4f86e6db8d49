"""``echomq-chaos certify [SCENARIO.toml]``: one battery against one queue, read per bug class.

The queue is the ``[sut]`` of the given scenario file (its workers, reaper, dialect, login, cwd,
image and start-up timeout, its history settings, its key layout and runtime), or the reference
queue when no file is given (``--protocol NAME``: one of its broken variants). The battery
(``scenarios/certify/``, the table ``BATTERY``) supplies everything else: topology, load,
phases, faults, checks. Each of its scenarios reaches one fence by construction, not by chance;
the ones that only make a bug likely (``seeded``) run once per seed of ``--seeds``.

Each battery scenario is fitted to the queue by its family (``chaos.family``, chosen once per
scenario): where a queue's workers are its only reapers and a scenario stops every worker at once,
the queue's standalone reaper runs beside them, or the scenario is not applicable; a scenario
whose fault the queue cannot take (one the reference worker carries out on itself, one aimed at
a reaper the queue does not run) is not applicable either. Every such scenario is tabled with
its reason, never dropped.

``BUG_CLASSES`` is the static map from a class of bug to the battery scenarios built to reach
it and the invariants that see it (docs/certify.md prints the same table). certify prints, per
class, what each of those scenarios found, seed by seed, and exits as ``run`` does for a suite:
the worst exit code of its runs.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from chaos.errors import EXIT_ABORTED, EXIT_CHECKER, EXIT_FAIL, EXIT_PASS, EXIT_UNKNOWN
from chaos.family import family_for
from chaos.names import INVARIANTS, PROTOCOLS
from chaos.protocol.client import QueueKeys
from chaos.run.runner import RunResult, run_scenario
from chaos.run.suite import worst_exit_code
from chaos.scenario.loading import (
    ScenarioError,
    apply_overrides,
    load_scenario,
    read_scenario_file,
    validated,
)
from chaos.scenario.model import Scenario
from chaos.scenario.sut import COOPERATIVE_FAULTS

DEFAULT_BATTERY = Path("scenarios/certify")


@dataclass(frozen=True)
class BatteryScenario:
    """One scenario of the battery: the fence it reaches, and whether it only makes a bug
    likely (``seeded``: run once per seed of ``--seeds``, the file's seed, +1, ...)."""

    name: str  # scenarios/certify/<name>.toml
    fence: str
    seeded: bool = False


BATTERY: tuple[BatteryScenario, ...] = (
    BatteryScenario("stale-finish-during-rework",
                    "a stale finish lands while another worker re-runs the job"),
    BatteryScenario("lone-worker-frozen",
                    "stale calls land between the reap and the re-claim"),
    BatteryScenario("all-workers-frozen",
                    "every worker frozen at once; two reapers race for the lapsed leases"),
    BatteryScenario("staggered-lapses",
                    "six lapses at different offsets of the reap interval, after quiet spells",
                    seeded=True),
    BatteryScenario("long-handlers",
                    "handlers of 2-4 leases: every lease must be renewed (max_needless = 0)"),
    BatteryScenario("kill-busy-workers",
                    "dead holders while the others keep renewing; more stranded leases than "
                    "one reap batch; a kill inside a claim by chance", seeded=True),
    BatteryScenario("slow-link",
                    "a worker's requests arrive 600 ms late, then it freezes: a lease timed by "
                    "the client's clock lapses before its server-side deadline"),
    BatteryScenario("skewed-reaper-clock",
                    "the reaper's clock 3 s ahead (reference queue only)"),
    BatteryScenario("kill-in-claim-gap",
                    "a worker killed inside its claim (reference queue only)"),
)


@dataclass(frozen=True)
class BugClass:
    key: str
    title: str
    invariants: tuple[str, ...]  # what sees it
    scenarios: tuple[str, ...]  # the battery scenarios built to reach it
    zoo: tuple[str, ...]  # the mutant zoo's variants of this class (protocol names)


BUG_CLASSES: tuple[BugClass, ...] = (
    BugClass("stale-finish", "unfenced complete / stale finish / a token handed out twice",
             ("exclusive_lease", "no_double_completion", "attempts_monotonic"),
             ("stale-finish-during-rework", "lone-worker-frozen", "all-workers-frozen"),
             ("unfenced-complete", "reused-token")),
    BugClass("complete-skips-active", "complete that skips the active check",
             ("exclusive_lease", "no_double_completion"),
             ("lone-worker-frozen", "all-workers-frozen"),
             ("complete-skips-active",)),
    BugClass("client-clock", "lapse judged by the client's clock",
             ("no_premature_reap", "lease_length"),
             ("slow-link", "skewed-reaper-clock"),
             ("client-clock",)),
    BugClass("lazy-reaper", "no reaper / lazy or backing-off reaper",
             ("reap_prompt", "recovery_bound"),
             ("staggered-lapses", "lone-worker-frozen", "all-workers-frozen",
              "kill-busy-workers"),
             ("no-reaper", "grace-reaper", "idle-backoff-reaper")),
    BugClass("single-batch-reaper", "reaper that never sweeps past one batch",
             ("recovery_bound", "reap_prompt"),
             ("kill-busy-workers",),
             ("single-batch-reaper",)),
    BugClass("sparse-reaper", "reaper that sweeps less often than its interval",
             ("reap_cadence",),
             ("staggered-lapses", "long-handlers"),
             ("sparse-reaper", "idle-backoff-reaper")),
    BugClass("non-renewing", "non-renewing worker, or its live lease's renewal refused",
             ("needless_limit", "live_lease_honoured"),
             ("long-handlers",),
             ()),
    BugClass("premature-reap", "premature reap (or a lease granted short or padded)",
             ("no_premature_reap", "lease_length"),
             ("all-workers-frozen", "slow-link", "skewed-reaper-clock"),
             ("nonatomic-reap", "short-lease", "client-clock", "padded-lease")),
    BugClass("resurrected-lease", "resurrected lease",
             ("exclusive_lease",),
             ("lone-worker-frozen",),
             ("extend-resurrects",)),
    BugClass("double-completion", "double completion",
             ("no_double_completion",),
             ("stale-finish-during-rework", "lone-worker-frozen", "all-workers-frozen"),
             ("unfenced-complete", "complete-skips-active", "extend-resurrects")),
    BugClass("lost-job", "lost job",
             ("no_loss",),
             ("kill-in-claim-gap", "kill-busy-workers"),
             ("nonatomic-claim",)),
)

_BY_NAME = {entry.name: entry for entry in BATTERY}
assert all(name in _BY_NAME for bug in BUG_CLASSES for name in bug.scenarios)
assert all(name in INVARIANTS for bug in BUG_CLASSES for name in bug.invariants)
assert {variant for bug in BUG_CLASSES for variant in bug.zoo} == set(PROTOCOLS) - {"sound"}

# Sections of the SUT's scenario file certify carries into every battery scenario.
_SUT_SECTIONS = ("sut", "history", "runtime", "docker")
_SUT_VALKEY_FIELDS = ("prefix", "queue", "server")  # its key layout, and the server it needs


# --- the queue under test ----------------------------------------------------------------------

@dataclass(frozen=True)
class Target:
    """What certify runs the battery against: a SUT file's parts, or the reference queue."""

    label: str
    foreign: bool
    protocol: str  # the reference queue's variant ("sound" for a foreign SUT)
    parts: dict[str, Any]  # top-level fields merged into every battery scenario

    @property
    def runs_reaper(self) -> bool:
        """Does the queue run reaper processes (a fault can target)?"""
        if self.foreign:
            return bool(self.parts["sut"]["reaper"] != "none")
        return self.protocol != "no-reaper"

    def with_overrides(self, overrides: Sequence[str]) -> Target:
        """The same queue, its label naming the ``--set`` every battery scenario gets (another
        ``sut.workers``: what was certified is not the file's alone)."""
        if not overrides:
            return self
        return replace(self, label=f"{self.label}, every scenario with --set "
                                   + ", --set ".join(overrides))

    @classmethod
    def reference(cls, protocol: str | None) -> Target:
        protocol = protocol or "sound"
        if protocol not in PROTOCOLS:
            raise ScenarioError(f"--protocol {protocol!r}: unknown protocol; expected one of "
                                f"{', '.join(PROTOCOLS)}")
        return cls(f"the reference queue (protocol {protocol})", False, protocol,
                   {"protocol": protocol})

    @classmethod
    def from_file(cls, path: Path, protocol: str | None) -> Target:
        data = read_scenario_file(path)
        sut = data.get("sut")
        if not isinstance(sut, dict) or sut.get("workers") is None:
            raise ScenarioError(
                f"{path}: no [sut] section naming workers (sut.workers): certify takes the "
                "system under test from a scenario file's [sut] (its workers, reaper, dialect, "
                "login, cwd); without a file it certifies the reference queue (--protocol NAME "
                "for one of its broken variants)")
        if protocol is not None:
            raise ScenarioError(f"--protocol {protocol!r}: the broken variants are the reference "
                                f"queue's; {path} brings a system under test of its own "
                                "(sut.workers)")
        scenario = load_scenario(path)  # the whole file valid, sut.cwd resolved beside it
        dumped = scenario.model_dump(mode="json")
        parts = {section: dumped[section] for section in _SUT_SECTIONS}
        parts["valkey"] = {name: dumped["valkey"][name] for name in _SUT_VALKEY_FIELDS
                           if dumped["valkey"][name] is not None}
        reaper = scenario.sut.reaper if isinstance(scenario.sut.reaper, str) else \
            " ".join(scenario.sut.reaper)
        standalone = scenario.sut.standalone_reaper
        label = (f"{path} [sut]: {' '.join(scenario.sut.workers or [])} (reaper {reaper}"
                 f"{', standalone reaper ' + ' '.join(standalone) if standalone else ''}, "
                 f"dialect {scenario.sut.dialect}, login {scenario.sut.login}, "
                 f"cwd {scenario.sut.cwd})")
        return cls(label, True, "sound", parts)


def not_applicable(scenario: Scenario, target: Target) -> str | None:
    """Why a battery scenario cannot run against this target (None: it can): a fault only the
    reference worker carries out, against a SUT of the user's own; a fault aimed at the reaper
    of a queue that runs none (no-reaper, or a SUT whose workers reap)."""
    for fault in scenario.faults:
        why = COOPERATIVE_FAULTS.get(fault.kind)
        if target.foreign and why is not None:
            return f"its {fault.kind} fault needs {why}"
        if not target.runs_reaper and fault.target in scenario.topology.reaper_names:
            return f"its {fault.kind} fault targets the reaper, and {target.label} runs none"
    return None


def battery_scenario(path: Path, target: Target, overrides: list[str]) -> Scenario:
    """A battery file with the target's parts merged in, then ``--set`` applied."""
    data = read_scenario_file(path)
    for section, value in target.parts.items():
        if isinstance(value, dict) and isinstance(data.get(section), dict):
            data[section] = {**data[section], **value}
        else:
            data[section] = value
    source = f"{path} (certify)"
    apply_overrides(data, overrides, source)
    return validated(data, source)


def find_battery(directory: Path = DEFAULT_BATTERY) -> Path:
    if directory.is_dir():
        return directory
    # Installed elsewhere (run from another directory): the repository's copy.
    fallback = Path(__file__).resolve().parents[2] / directory
    if directory == DEFAULT_BATTERY and fallback.is_dir():
        return fallback
    raise ScenarioError(f"{directory}: no such directory of battery scenarios")


@dataclass(frozen=True)
class PlannedRun:
    entry: BatteryScenario
    scenario: Scenario | None  # None: not applicable to this target
    seeds: tuple[int, ...]
    skipped: str | None = None  # why not applicable
    adapted: str | None = None  # how the queue's family changed it, and why


def plan_battery(target: Target, seeds: int, only: Sequence[str] | None = None,
                 overrides: Sequence[str] = (), directory: Path = DEFAULT_BATTERY
                 ) -> list[PlannedRun]:
    """Every battery scenario merged and validated before anything runs (bad input: exit 2)."""
    if seeds < 1:
        raise ScenarioError(f"--seeds {seeds}: must be at least 1")
    unknown = sorted(set(only or ()) - set(_BY_NAME))
    if unknown:
        raise ScenarioError(f"--only {', '.join(unknown)}: no such battery scenario; have "
                            f"{', '.join(_BY_NAME)}")
    folder = find_battery(directory)
    planned = []
    for entry in BATTERY:
        if only and entry.name not in only:
            continue
        path = folder / f"{entry.name}.toml"
        why = not_applicable(load_scenario(path), target)
        if why is not None:
            planned.append(PlannedRun(entry, None, (), why))
            continue
        merged = battery_scenario(path, target, list(overrides))
        fit = family_for(merged, QueueKeys(merged.valkey.prefix, merged.valkey.queue)) \
            .battery_fit()
        if fit.scenario is None:
            planned.append(PlannedRun(entry, None, (), fit.not_applicable))
            continue
        count = seeds if entry.seeded else 1
        planned.append(PlannedRun(entry, fit.scenario,
                                  tuple(fit.scenario.seed + k for k in range(count)),
                                  adapted=fit.adapted))
    if not any(run.scenario is not None for run in planned):
        raise ScenarioError(f"nothing to run: no battery scenario chosen can run against "
                            f"{target.label} (" + "; ".join(f"{run.entry.name}: {run.skipped}"
                                                            for run in planned) + ")")
    return planned


# --- results -----------------------------------------------------------------------------------

@dataclass
class CertifyRun:
    scenario: str
    seed: int
    verdict: str  # pass | fail | unknown | checker_error | error | aborted
    exit_code: int
    failed: list[str]  # invariants that failed
    undecided: list[str]  # invariants blind (evidence missing), whose judge raised, or not
    # judged (reap_cadence of a queue that promises no cadence)
    wall_ms: int | None
    run_dir: str
    error: str | None = None
    exercised: bool | None = None  # did a fault strand a lease (report.json ``exercised``)
    unexercised: str = ""  # why not, when it did not
    retried_with: int | None = None  # the seed it was run again with, being no evidence

    @property
    def decided(self) -> bool:
        return self.verdict in ("pass", "fail")

    @property
    def evidence(self) -> bool:
        """A run whose faults could strand a lease and stranded none proved nothing of recovery:
        no evidence (retried with another seed), unless it failed: a failure stands on what
        it saw."""
        return self.exercised is not False or self.verdict == "fail"


@dataclass
class ClassFinding:
    bug: BugClass
    status: str  # SEEN | not seen | undecided | not run | not applicable
    runs: list[CertifyRun]  # the designated scenarios' runs
    not_run: list[str]  # designated scenarios left out (--only)
    not_applicable: dict[str, str]  # designated scenarios this target cannot run, and why
    elsewhere: list[CertifyRun]  # other runs that failed one of the class's invariants

    def as_dict(self) -> dict[str, Any]:
        return {"class": self.bug.key, "title": self.bug.title, "status": self.status,
                "invariants": list(self.bug.invariants), "scenarios": list(self.bug.scenarios),
                "zoo": list(self.bug.zoo),
                "runs": [{"scenario": run.scenario, "seed": run.seed, "verdict": run.verdict,
                          "failed": run.failed} for run in self.runs],
                "not_run": self.not_run, "not_applicable": self.not_applicable,
                "elsewhere": [{"scenario": run.scenario, "seed": run.seed,
                               "failed": sorted(set(run.failed) & set(self.bug.invariants))}
                              for run in self.elsewhere]}


def sees(run: CertifyRun, bug: BugClass) -> bool:
    return bool(set(run.failed) & set(bug.invariants))


def classify(bug: BugClass, runs: Sequence[CertifyRun], skipped: dict[str, str],
             ran: set[str]) -> ClassFinding:
    """What the battery's runs say of one class: SEEN when a scenario built for it failed one of
    its invariants; not seen when every such scenario ran and decided without; undecided when
    one of them could not decide (unknown, an error) and none saw it."""
    designated = [run for run in runs if run.scenario in bug.scenarios]
    not_run = [name for name in bug.scenarios if name not in ran and name not in skipped]
    not_applicable = {name: skipped[name] for name in bug.scenarios if name in skipped}
    elsewhere = [run for run in runs if run.scenario not in bug.scenarios and sees(run, bug)]
    if any(sees(run, bug) for run in designated):
        status = "SEEN"
    elif not designated:
        status = "not applicable" if not_applicable and not not_run else "not run"
    elif any(not run.evidence for run in designated if run.retried_with is None):
        status = "not exercised"  # its retries spent, a run still stranded no lease
    elif any(not run.decided or set(run.undecided) & set(bug.invariants)
             for run in designated):
        status = "undecided"
    else:
        status = "not seen"
    if not_run and designated:
        status += f" ({len(not_run)} of its {len(bug.scenarios)} scenarios not run)"
    return ClassFinding(bug, status, designated, not_run, not_applicable, elsewhere)


@dataclass
class CertifyResult:
    target: str
    protocol: str
    seeds: int
    runs: list[CertifyRun] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # scenario -> why not applicable
    adapted: dict[str, str] = field(default_factory=dict)  # scenario -> how, for this queue
    planned: list[str] = field(default_factory=list)  # scenarios chosen to run
    aborted: bool = False
    retries: int = 0  # how often a run that exercised nothing is run again, another seed

    @property
    def exit_code(self) -> int:
        """The worst of the runs that stand (a run retried is replaced by its retry); one that
        exercised nothing when its retries ran out is unknown (4) at best."""
        if self.aborted:
            return EXIT_ABORTED
        return worst_exit_code([
            run.exit_code if run.evidence or run.exit_code != EXIT_PASS else EXIT_UNKNOWN
            for run in self.runs if run.retried_with is None])

    @property
    def word(self) -> str:
        return {EXIT_PASS: "PASS", EXIT_FAIL: "FAIL", EXIT_UNKNOWN: "UNKNOWN",
                EXIT_CHECKER: "CHECKER ERROR", EXIT_ABORTED: "ABORTED"}.get(
            self.exit_code, "ERROR")

    def findings(self) -> list[ClassFinding]:
        ran = {run.scenario for run in self.runs}
        return [classify(bug, self.runs, self.skipped, ran) for bug in BUG_CLASSES]

    def as_dict(self) -> dict[str, Any]:
        return {"schema": 1, "target": self.target, "protocol": self.protocol,
                "seeds": self.seeds, "unexercised_retries": self.retries,
                "verdict": self.word, "exit_code": self.exit_code,
                "aborted": self.aborted, "planned": self.planned,
                "not_applicable": self.skipped, "adapted": self.adapted,
                "runs": [asdict(run) for run in self.runs],
                "classes": [finding.as_dict() for finding in self.findings()]}


def _outcome(name: str, seed: int, result: RunResult) -> CertifyRun:
    invariants = result.report.get("invariants") or {}
    exercise = result.report.get("exercise") or {}
    return CertifyRun(
        name, seed, result.verdict, result.exit_code,
        [n for n, found in invariants.items() if found.get("status") == "fail"],
        # blind, raised, or not judged at all (a queue that promises no sweep cadence): no
        # class it sees can be called "not seen"
        [n for n, found in invariants.items() if found.get("status") in ("blind", "error")
         or (found.get("ok") and found.get("judged") is False)],
        (result.report.get("run") or {}).get("wall_ms"), str(result.run_dir),
        result.report.get("error"), exercise.get("exercised"),
        "" if exercise.get("exercised") is not False else str(exercise.get("reason", "")))


def certify(planned: Sequence[PlannedRun], target: Target, seeds: int, out: Path,
            retries: int, progress: TextIO = sys.stderr) -> CertifyResult:
    """Run every planned scenario and seed, one after another, each in ``out/<name>-seed<N>``
    (its console output in ``console.log`` there); a Ctrl-C stops the battery. A run whose
    faults stranded no lease (``CertifyRun.evidence``) is run again with a seed the scenario
    has not used, up to ``retries`` times."""
    result = CertifyResult(target.label, target.protocol, seeds, retries=retries,
                           skipped={run.entry.name: run.skipped for run in planned
                                    if run.skipped is not None},
                           adapted={run.entry.name: run.adapted for run in planned
                                    if run.adapted is not None},
                           planned=[run.entry.name for run in planned if run.scenario])
    jobs = deque((run.entry.name, run.scenario.model_copy(update={"seed": seed}), 0)
                 for run in planned if run.scenario is not None for seed in run.seeds)
    used = {run.entry.name: set(run.seeds) for run in planned}  # seeds a retry must not reuse
    total, done = len(jobs), 0
    try:
        while jobs:
            name, scenario, retry = jobs.popleft()
            done += 1
            run_dir = out / f"{name}-seed{scenario.seed}"
            run_dir.mkdir(parents=True, exist_ok=True)
            print(f"[{done}/{total}] {name} seed {scenario.seed}"
                  f"{f' (retry {retry} of {retries})' if retry else ''} ...", end="",
                  file=progress, flush=True)
            started = time.monotonic()
            with open(run_dir / "console.log", "w") as console:
                outcome = _outcome(name, scenario.seed,
                                   run_scenario(scenario, run_dir, stream=console))
            result.runs.append(outcome)
            again = ""
            if not outcome.evidence and outcome.verdict != "aborted":
                if retry < retries:
                    outcome.retried_with = max(used[name]) + 1
                    used[name].add(outcome.retried_with)
                    jobs.appendleft((name, scenario.model_copy(
                        update={"seed": outcome.retried_with}), retry + 1))
                    total += 1
                again = (f", NOT EXERCISED ({outcome.unexercised}): " + (
                    f"no evidence, run again with seed {outcome.retried_with}"
                    if outcome.retried_with is not None else
                    f"no evidence, and its retries are spent ({retries})"))
            print(f" {outcome.verdict.upper()}"
                  f"{' ' + ','.join(outcome.failed) if outcome.failed else ''}{again} "
                  f"({time.monotonic() - started:.1f}s)", file=progress, flush=True)
            if outcome.verdict == "aborted":
                result.aborted = True
                break
    except KeyboardInterrupt:  # between two runs (a run itself ends as "aborted")
        result.aborted = True
    return result


__all__ = ["BATTERY", "BUG_CLASSES", "CertifyResult", "Target", "certify",
           "classify", "plan_battery"]
