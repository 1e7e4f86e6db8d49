"""A foreign SUT under the Docker runtime: the Node.js example (sut/node-echomq) runs from its
offline image (``echomq-chaos images build``), one container per process, really SIGKILLed by
the engine, judged on the MONITOR recorder's history; its broken switch is caught there too.

Needs a Docker engine and the images (skips otherwise, fails under
ECHOMQ_CHAOS_REQUIRE_DOCKER=1, as the other Docker tests), and Node with ``npm ci`` done."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import docker
import docker_support
import pytest
from docker_support import ROOT

from chaos.runtime.docker import LABEL_RUN_DIR
from chaos.runtime.engine import LABEL_ROLE, has_image
from chaos.runtime.images import NODE_SUT_IMAGE

pytestmark = pytest.mark.integration
engine = docker_support.engine  # the fixture, under its own name


@pytest.fixture(scope="module")
def node_image(engine: docker.DockerClient) -> None:
    if not has_image(engine, NODE_SUT_IMAGE):  # images build skips it without node or npm ci
        docker_support.unavailable(f"no {NODE_SUT_IMAGE}: node or sut/node-echomq/node_modules "
                                   "was missing when the images were built")


def run_in_docker(engine: docker.DockerClient, name: str, out: Path) -> dict:
    result = subprocess.run([sys.executable, "-m", "chaos", "run",
                             str(ROOT / "scenarios" / "node" / f"{name}.toml"),
                             "--runtime", "docker", "--out", str(out)],
                            capture_output=True, text=True, timeout=180, cwd=ROOT)
    report = json.loads((out / "report.json").read_text())
    assert report["run"]["runtime"]["kind"] == "docker", result.stderr[-3000:]
    listed = engine.api.containers(all=True,
                                   filters={"label": f"{LABEL_RUN_DIR}={out.resolve()}"})
    assert {entry["Labels"][LABEL_ROLE] for entry in listed} == set()  # nothing outlives it
    return report


def test_the_node_sut_in_containers_is_killed_and_recovered(
        engine: docker.DockerClient, node_image: None, tmp_path: Path):
    report = run_in_docker(engine, "kill-worker", tmp_path / "run")
    assert report["verdict"] == "pass", report["invariants"]
    runtime = report["run"]["runtime"]
    assert runtime["images"]["sut"]["name"] == NODE_SUT_IMAGE
    assert "worker" not in runtime["images"]  # no reference worker (nor reaper) ran
    containers = runtime["containers"]
    assert set(containers) == {"valkey", "reaper", "worker-1", "worker-2", "worker-3"}
    killed = {name for name, state in containers.items() if state["killed_by_fault"]}
    assert killed == {fault["worker"] for fault in report["run"]["faults"]} and killed
    for name in killed:  # docker kill: SIGKILL, exit 128 + 9
        assert containers[name]["exit_code"] == 137, containers[name]
    for name in set(containers) - killed - {"valkey"}:  # node's SIGTERM handler: a clean exit
        assert containers[name]["exit_code"] == 0, containers[name]
    recorder = report["history_recorder"]
    assert recorder["source"] == "monitor" and recorder["problems"] == []
    bound = report["invariants"]["recovery_bound"]
    assert bound["count"] >= 1 and bound["max_ms"] <= bound["bound_ms"]
    # The Node worker logged from inside its container, with the contract's name.
    assert "worker-2 ready" in (tmp_path / "run" / "logs" / "worker-2.log").read_text()


def test_the_node_sut_broken_switch_is_caught_in_containers(
        engine: docker.DockerClient, node_image: None, tmp_path: Path):
    report = run_in_docker(engine, "unfenced-complete", tmp_path / "run")
    assert report["verdict"] == "fail"
    assert not report["invariants"]["no_double_completion"]["ok"], report["invariants"]


def test_certify_runs_a_queues_standalone_reaper_in_a_container_of_its_own(
        engine: docker.DockerClient, node_image: None, tmp_path: Path):
    """A queue whose workers are its only reapers (here the Node example declared so) gets its
    standalone reaper where a battery scenario freezes every worker: under Docker it runs from
    the SUT's image in a container of its own, beside the frozen worker, sweeps while that
    worker is frozen, and is gone with the run."""
    text = (ROOT / "scenarios" / "node" / "kill-worker.toml").read_text()
    text = text.replace('cwd = "../../sut/node-echomq"',
                        f'cwd = "{ROOT / "sut" / "node-echomq"}"')
    text = text.replace('reaper = ["node", "reaper.js"]',
                        'reaper = "none"\nstandalone_reaper = ["node", "reaper.js"]')
    assert 'standalone_reaper = ["node", "reaper.js"]' in text
    path = tmp_path / "node-reaping-workers.toml"
    path.write_text('runtime = "docker"\n' + text)
    out = tmp_path / "certify"
    done = subprocess.run([sys.executable, "-m", "chaos", "certify", str(path),
                           "--only", "lone-worker-frozen", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    summary = json.loads((out / "certify.json").read_text())
    assert "stop every worker at once" in summary["adapted"]["lone-worker-frozen"]
    (run,) = summary["runs"]
    report = json.loads((Path(run["run_dir"]) / "report.json").read_text())
    runtime = report["run"]["runtime"]
    assert runtime["kind"] == "docker" and runtime["images"]["sut"]["name"] == NODE_SUT_IMAGE
    reapers = json.loads((Path(run["run_dir"]) / "scenario.json").read_text())
    assert reapers["sut"]["reaper"] == ["node", "reaper.js"]
    assert set(runtime["containers"]) == {"valkey", "worker-1", "reaper"}
    assert not runtime["containers"]["reaper"]["killed_by_fault"]
    cadence = report["invariants"]["reap_cadence"]
    assert cadence["sweepers"] == ["reaper"] and cadence["per_sweeper"]["reaper"]["sweeps"]
    reap = report["invariants"]["recovery_bound"]
    assert reap["count"] >= 1 and reap["max_ms"] <= reap["bound_ms"]
    listed = engine.api.containers(all=True, filters={"label": f"{LABEL_RUN_DIR}="
                                                      f"{Path(run['run_dir']).resolve()}"})
    assert listed == []  # nothing outlives the run
