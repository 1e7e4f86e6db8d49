"""Every shipped scenario's header (its leading comment and its description) promises only what its
settings enforce or set up: a header saying "no needless redelivery" over settings that judge no
needless redelivery (no ``check.max_needless``) lets a worker that never renews pass the run it
says it tests. Each promise a header can make in words and a setting can hold is a rule below:
the words, and what the scenario must then say. Every rule is shown to catch a header that
promises more than its settings (``BROKEN``), and every shipped scenario is held to every rule.
(No server: the files are only read.)"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from chaos.names import INVARIANTS
from chaos.scenario.loading import load_scenario, scenario_from_dict
from chaos.scenario.model import Scenario

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = sorted((ROOT / "scenarios").rglob("*.toml"))
NUMBERS = {"one": 1.0, "two": 2.0, "three": 3.0, "four": 4.0, "five": 5.0}


def number(text: str) -> float:
    return NUMBERS[text] if text in NUMBERS else float(text)


def header(path: Path) -> str:
    """The leading comment block, as one line of text, less its sentences about another
    scenario ("failover-no-wait.toml is the same run without WAIT")."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    sentences = re.split(r"(?<=\.) ", " ".join(lines))
    return " ".join(sentence for sentence in sentences
                    if not re.search(r"[\w-]+\.toml is\b", sentence))


def durations(scenario: Scenario) -> set[int]:
    return {fault.duration_ms for fault in scenario.faults if fault.duration_ms is not None}


def killed(scenario: Scenario) -> int:
    """Workers the kill faults take (a {random = k} target: k; a name: one)."""
    count = 0
    for fault in scenario.faults:
        if fault.kind == "kill":
            random = getattr(fault.target, "random", None)
            count += random if random is not None else 1
    return count


Check = Callable[[Scenario, re.Match[str]], bool]


@dataclass(frozen=True)
class Promise:
    name: str
    words: str  # a regular expression over the header
    holds: Check  # what the settings must then say


PROMISES = [
    Promise("no needless redelivery",
            r"\bno needless redeliver|nothing is ever reaped|no lease ever lapses",
            lambda s, m: s.check.max_needless == 0),
    Promise("nothing lost", r"nothing (?:acknowledged )?(?:is|may be) lost|none be lost"
                            r"|no acknowledged transition is lost",
            lambda s, m: "no_loss" not in s.check.report_only),
    Promise("completed once", r"completed once|exactly-once|nothing is completed twice",
            lambda s, m: "no_double_completion" not in s.check.report_only),
    Promise("report-only", r"report-only", lambda s, m: bool(s.check.report_only)),
    Promise("stall limit", r"stall limit of (\d+)|after exactly (\d+) recoveries"
                           r"|maxStalledCount (\d+)|after (\d+) recoveries",
            lambda s, m: s.topology.max_stalls == int(next(g for g in m.groups() if g))),
    Promise("WAIT n", r"[Ww]ith (?:WAIT |wait_replicas = )(\d+)",
            lambda s, m: s.wait_replicas == int(m.group(1))),
    Promise("no WAIT", r"without WAIT", lambda s, m: s.wait_replicas == 0),
    Promise("appendfsync", r"appendfsync (always|everysec)",
            lambda s, m: s.valkey.appendonly and s.valkey.appendfsync == m.group(1)),
    Promise("k of n workers killed", r"(?:SIGKILL|[Kk]ill) (\d+) of (\d+)(?: \w+)? workers",
            lambda s, m: (killed(s), s.topology.workers) == (int(m.group(1)),
                                                              int(m.group(2)))),
    Promise("more stranded than a batch", r"more stranded leases than one reap batch",
            lambda s, m: killed(s) * s.topology.concurrency > s.topology.reap_limit),
    Promise("a fault for x leases", r"for (\d+(?:\.\d+)?|two|three) leases",
            lambda s, m: number(m.group(1)) * s.topology.lease_ms in durations(s)),
    Promise("a fault for x seconds", r"for (\d+(?:\.\d+)?|two|three) (?:s|seconds)\b",
            lambda s, m: number(m.group(1)) * 1000 in durations(s)),
    Promise("latency", r"(\d+) ms (?:latency|each way)",
            lambda s, m: any(getattr(f, "latency_ms", None) == int(m.group(1))
                             for f in s.faults)),
    Promise("clock skew", r"(\d+) s ahead",
            lambda s, m: any(getattr(f, "offset_ms", None) == int(m.group(1)) * 1000
                             for f in s.faults)),
    Promise("every worker frozen", r"[Ff]reeze every worker|[Ee]very worker freezes",
            lambda s, m: {f.target for f in s.faults if f.kind == "pause"}
            >= set(s.topology.worker_names)),
    Promise("a lone worker", r"one-worker pool|the only worker",
            lambda s, m: s.topology.workers == 1),
    Promise("handlers as multiples of the lease",
            r"[Hh]andlers (?:from|of) (\d+(?:\.\d+)?)x ?(?:to|-) ?(\d+(?:\.\d+)?)x the lease",
            lambda s, m: (s.topology.handler.min_ms, s.topology.handler.max_ms) == (
                number(m.group(1)) * s.topology.lease_ms,
                number(m.group(2)) * s.topology.lease_ms)),
    Promise("handlers in seconds", r"[Hh]andlers \((\d+(?:\.\d+)?)-(\d+(?:\.\d+)?) s\)",
            lambda s, m: (s.topology.handler.min_ms, s.topology.handler.max_ms) == (
                number(m.group(1)) * 1000, number(m.group(2)) * 1000)),
    Promise("lockDuration", r"lockDuration \((\d+)\)",
            lambda s, m: s.topology.lease_ms == int(m.group(1))),
    Promise("stalledInterval", r"stalledInterval \((\d+)\)",
            lambda s, m: s.topology.reap_interval_ms == int(m.group(1))),
    Promise("reap_limit", r"reap_limit = (\d+)",
            lambda s, m: s.topology.reap_limit == int(m.group(1))),
    Promise("the invariant that catches it", r"\b([a-z]+(?:_[a-z]+)+) catches it"
                                             r"|must catch the (double completion)",
            lambda s, m: (m.group(1) or "no_double_completion") in s.expect_fail),
]


def broken_promises(text: str, scenario: Scenario) -> list[str]:
    """The promises ``text`` makes that ``scenario``'s settings do not hold."""
    broken = []
    for promise in PROMISES:
        for match in re.finditer(promise.words, text):
            if not promise.holds(scenario, match):
                broken.append(f"{promise.name}: {match.group(0)!r}")
    return broken


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: str(p.relative_to(ROOT / "scenarios")))
def test_every_scenario_header_promises_only_what_its_settings_hold(path: Path):
    scenario = load_scenario(path)
    assert broken_promises(f"{header(path)} {scenario.description}", scenario) == []


def test_every_rule_holds_some_shipped_header_to_its_words():
    """No dead rule: each one's words are in at least one shipped header."""
    texts = [f"{header(path)} {load_scenario(path).description}" for path in SCENARIOS]
    for promise in PROMISES:
        assert any(re.search(promise.words, text) for text in texts), promise.name


def test_invariants_a_header_names_are_real_ones():
    """The rule above only holds a header to invariants it names by their own names."""
    for path in SCENARIOS:
        for match in re.finditer(r"\b([a-z]+(?:_[a-z]+)+) catches it", header(path)):
            assert match.group(1) in INVARIANTS, (path, match.group(0))


def scenario(**fields: object) -> Scenario:
    base: dict[str, object] = {"name": "broken-header",
                               "topology": {"workers": 3, "lease_ms": 1000}}
    for key, value in fields.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}  # type: ignore[dict-item]
        else:
            base[key] = value
    return scenario_from_dict(base, "test")


# Per rule: a header promising it, over settings that do not hold it. The first is the header
# long-handlers.toml had, over the settings it had: no max_needless, so a worker that never
# renewed passed it.
BROKEN = {
    "no needless redelivery": (
        "Handlers from 0.5x to 3x the lease. With the heartbeat on every lease is renewed while "
        "its handler runs: no needless redelivery in any duration bucket.",
        scenario(topology={"max_stalls": 2, "handler": {"min_ms": 500, "max_ms": 3000}})),
    "nothing lost": ("nothing may be lost", scenario(check={"report_only": ["no_loss"]})),
    "completed once": ("completed once elsewhere",
                       scenario(check={"report_only": ["no_double_completion"]})),
    "report-only": ("the invariants it can break are report-only", scenario()),
    "stall limit": ("with a stall limit of 3", scenario(topology={"max_stalls": 2})),
    "WAIT n": ("With WAIT 1 every call waits", scenario()),
    "no WAIT": ("failover without WAIT", scenario(wait_replicas=1,
                                                  valkey={"replication": "sentinel"})),
    "appendfsync": ("appendfsync always", scenario(valkey={"appendfsync": "always"})),
    "k of n workers killed": ("SIGKILL 5 of 6 workers", scenario(
        topology={"workers": 6}, faults=[{"kind": "kill", "target": {"random": 4},
                                          "at_ms": 100}])),
    "more stranded than a batch": ("more stranded leases than one reap batch", scenario(
        topology={"concurrency": 2, "reap_limit": 10},
        faults=[{"kind": "kill", "target": {"random": 2}, "at_ms": 100}])),
    "a fault for x leases": ("freeze a worker for 2.5 leases", scenario(
        faults=[{"kind": "pause", "target": "worker-1", "at_ms": 100, "duration_ms": 2000}])),
    "a fault for x seconds": ("cut one worker off for three seconds", scenario(
        faults=[{"kind": "partition", "target": "worker-1", "at_ms": 100,
                 "duration_ms": 2000}])),
    "latency": ("600 ms each way", scenario(
        faults=[{"kind": "latency", "target": "worker-1", "at_ms": 100, "latency_ms": 300}])),
    "clock skew": ("the reaper's clock 3 s ahead", scenario(
        faults=[{"kind": "clock_skew", "target": "reaper", "at_ms": 100,
                 "offset_ms": 1000}])),
    "every worker frozen": ("Freeze every worker at once", scenario(
        faults=[{"kind": "pause", "target": "worker-1", "at_ms": 100, "duration_ms": 500}])),
    "a lone worker": ("a one-worker pool freezes", scenario()),
    "handlers as multiples of the lease": ("Handlers of 0.5x-3x the lease", scenario(
        topology={"handler": {"min_ms": 500, "max_ms": 2000}})),
    "handlers in seconds": ("Handlers (1.5-2.5 s) longer than a pause", scenario(
        topology={"handler": {"min_ms": 1000, "max_ms": 2500}})),
    "lockDuration": ("lockDuration (300)", scenario()),
    "stalledInterval": ("stalledInterval (500)", scenario()),
    "reap_limit": ("reap_limit = 1 makes four enough", scenario()),
    "the invariant that catches it": ("exclusive_lease catches it", scenario(
        protocol="unfenced-complete", expect_fail=["no_double_completion"])),
}


def test_every_rule_is_shown_to_catch_a_broken_promise():
    assert set(BROKEN) == {promise.name for promise in PROMISES}


@pytest.mark.parametrize("name", BROKEN)
def test_a_header_promising_what_its_settings_do_not_hold_is_caught(name: str):
    text, settings = BROKEN[name]
    assert [found.split(":")[0] for found in broken_promises(text, settings)] == [name]
