"""EchoMQ's flows, a user's remove_job and reprocess_job, and EchoMQ.Locks' markers on the real
thing (docs/echomq.md): the example SUT speaking the real EchoMQ contract
(scenarios/echomq/flows-kill-worker.toml) passes with every call decoded, its verdict held to
the processes' own logs; a complete that releases a flow's parent at its first child's
(``worker --break eager-parent``) is caught by flow_order alone."""

from __future__ import annotations

import io
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
WORKERS = ("worker-1", "worker-2", "worker-3")


def run(name: str, tmp_path: Path, overrides: list[str] | None = None):  # type: ignore[no-untyped-def]
    from chaos.run.runner import run_scenario
    from chaos.scenario.loading import load_scenario

    scenario = load_scenario(ROOT / "scenarios" / "echomq" / f"{name}.toml", overrides)
    return run_scenario(scenario, tmp_path / "run", io.StringIO())


def history_of(result: Any) -> list[dict[str, str]]:
    return [json.loads(line) for line in
            (result.run_dir / "history-monitor.jsonl").read_text().splitlines()]


def worker_lines(result: Any, event: str) -> list[tuple[int, str, dict[str, str]]]:
    """Every ``<ms> <event> key=value ...`` line of the workers' logs: (ms, worker, fields)."""
    found = []
    for name in WORKERS:
        for ms, rest in re.findall(rf"^(\d+) {event} (.*)$",
                                   (result.run_dir / "logs" / f"{name}.log").read_text(), re.M):
            found.append((int(ms), name, dict(pair.split("=", 1) for pair in rest.split())))
    return found


@pytest.mark.integration
def test_flows_removals_and_reprocessing_pass_as_the_processes_logs_tell(tmp_path: Path):
    result = run("flows-kill-worker", tmp_path)
    assert result.verdict == "pass", result.report["verdict"]
    health = result.report["history_recorder"]["health"]
    assert (health["undecoded_calls"], health["unscripted_writes"],
            health["unattributed_calls"]) == (0, 0, 0), health
    events = history_of(result)
    of = lambda kind: [event for event in events if event["type"] == kind]  # noqa: E731
    producer_log = (result.run_dir / "logs" / "producer.log").read_text()
    # the jobs enqueued are the ones the producer printed: flat ones, and each flow's parent
    # with its children, each child naming its parent
    flows = dict(re.findall(r" enqueue id=(\S+) flow=(\S+)", producer_log))
    flat = set(re.findall(r" enqueue id=(\S+)$", producer_log, re.M))
    children = {child: parent for parent, named in flows.items() for child in named.split(",")}
    assert flows and {e["id"] for e in of("enqueue")} == flat | set(flows) | set(children)
    assert {e["id"]: e["parent"] for e in of("enqueue") if "parent" in e} == children
    assert {e["id"] for e in of("enqueue") if "children" in e} == set(flows)
    # the removals and reprocessings the history shows are the ones the producer logged; a
    # removal refused (a worker's lock marker on the job) writes nothing and shows nothing
    removed = re.findall(r" removed id=(\S+)", producer_log)
    refused = re.findall(r" remove_refused id=(\S+)", producer_log)
    # (the jobs in dead when it removes, failed for good, are there to be removed: one at least)
    assert removed and sorted(e["id"] for e in of("remove")) == sorted(removed)
    assert 3 <= len(removed + refused) <= 6
    # the removal leaves the newest job in dead for the reprocess (the producer's design): it
    # puts back at least that one, whether or not another job dies between the two
    reprocessed = re.findall(r" reprocessed id=(\S+)", producer_log)
    assert reprocessed and sorted(e["id"] for e in of("reprocess")) == sorted(reprocessed)
    # every complete the workers logged accepted is in the history, by the same worker; the
    # jobs failed for good are the ones their retries dead-lettered, less those reprocessed and
    # then completed
    logged_ok = sorted((fields["id"], name) for _, name, fields in worker_lines(result, "complete")
                       if fields["result"] == "ok")
    completes = of("complete")
    assert sorted((e["id"], e["worker"]) for e in completes if not e.get("target")) == logged_ok
    dead = {fields["id"] for _, _, fields in worker_lines(result, "retry")
            if fields["result"] == "dead"}
    assert {e["id"] for e in completes if e.get("target") == "failed"} == dead
    # by the workers' own logs, no parent was claimed before its children had run: a claim
    # line comes before its handler's sleep (100 ms at least), so a parent's first claim line
    # is at least that long after each child's first
    claimed_at: dict[str, int] = {}
    for ms, _, fields in sorted(worker_lines(result, "claim"), key=lambda line: line[0]):
        claimed_at.setdefault(fields["id"], ms)
    for parent, named in flows.items():
        assert all(claimed_at[parent] >= claimed_at[child] + 100 for child in named.split(","))
    assert len(of("release")) == len(flows)
    # every lock marker set is the one its claim's holder took, on its own attempt
    claims = {(e["id"], e["attempt"], e["worker"]) for e in of("claim")}
    markers = [e for e in of("lock_marker") if e["held"] == "1"]
    assert markers and all((e["id"], e["token"], e["worker"]) in claims for e in markers)
    found = result.report["invariants"]
    assert found["flow_order"]["flows"] == len(flows)
    assert found["no_loss"]["removed"] == len(removed)
    # a job removed after it failed for good keeps that outcome; one removed unfinished is
    # removed, neither lost nor completed
    failed = {e["id"] for e in completes if e.get("target") == "failed"}
    assert result.report["outcomes"]["removed"] == len(set(removed) - failed - set(reprocessed))


@pytest.mark.integration
@pytest.mark.parametrize("seed", [1, 2])
def test_flows_kill_worker_passes_on_other_seeds(tmp_path: Path, seed: int):
    result = run("flows-kill-worker", tmp_path, [f"seed={seed}"])
    assert result.verdict == "pass", result.report["verdict"]
    assert result.report["history_recorder"]["health"]["undecoded_calls"] == 0
    assert result.report["invariants"]["flow_order"]["flows"] > 0


@pytest.mark.integration
def test_a_parent_released_at_its_first_childs_complete_fails_flow_order_alone(tmp_path: Path):
    """broken/eager-parent: each parent released at its first child's complete, and claimed
    (by the workers' own logs) while another child of it had not completed."""
    result = run("broken/eager-parent", tmp_path)
    assert result.checked is not None
    assert result.checked.failed_invariants() == ["flow_order"], result.report["verdict"]
    assert result.report["history_recorder"]["health"]["undecoded_calls"] == 0
    flows = dict(re.findall(r" enqueue id=(\S+) flow=(\S+)",
                            (result.run_dir / "logs" / "producer.log").read_text()))
    found = result.report["invariants"]["flow_order"]
    # every parent released early (at its first child's complete, of three), some claimed so
    assert found["released"] == found["flows"] == len(flows)
    assert found["violations"] > len(flows)
    assert all(example["job"] in flows and example["children"] == 3
               and example["children_completed"] < 3 for example in found["examples"])


@pytest.mark.integration
def test_a_dying_child_fails_or_frees_its_parent_by_its_policy_as_the_logs_tell(tmp_path: Path):
    """scenarios/echomq/flows-child-failures.toml: flows whose children die at their only
    attempt. By the processes' logs: a flow of policy ``fail`` with a child dead has its parent
    released to dead (failed for good) and never claimed; every other flow's parent is released
    to pending once, after its children settled, and runs once; the checker counts the
    failed parents, and every call is decoded."""
    result = run("flows-child-failures", tmp_path)
    assert result.verdict == "pass", result.report["verdict"]
    health = result.report["history_recorder"]["health"]
    assert (health["undecoded_calls"], health["unscripted_writes"],
            health["unattributed_calls"]) == (0, 0, 0), health
    producer_log = (result.run_dir / "logs" / "producer.log").read_text()
    flows = {parent: (children.split(","), policy) for parent, children, policy in
             re.findall(r" enqueue id=(\S+) flow=(\S+) policy=(\S+)", producer_log)}
    died = {fields["id"] for _, _, fields in worker_lines(result, "retry")
            if fields["result"] == "dead"}
    failing = {parent for parent, (children, policy) in flows.items()
               if policy == "fail" and died & set(children)}
    # both arms ran: parents failed with a child, and parents freed past a dead child
    assert failing and any(policy == "ignore" and died & set(children)
                           for children, policy in flows.values())
    releases = {(e["id"], e.get("to", "pending")) for e in history_of(result)
                if e["type"] == "release"}
    assert releases == {(parent, "dead" if parent in failing else "pending") for parent in flows}
    completed = Counter(fields["id"] for _, _, fields in worker_lines(result, "complete")
                        if fields["result"] == "ok")
    # a freed parent runs once: completed, or failed at its own attempt (one job in two does)
    assert all(completed[parent] + (parent in died) == (0 if parent in failing else 1)
               for parent in flows)
    claimed = {fields["id"] for _, _, fields in worker_lines(result, "claim")}
    assert not failing & claimed
    assert result.report["invariants"]["flow_order"]["parents_failed"] == len(failing)
