"""One launch contract per reference process: the runtime builds a ``WorkerConfig`` from the
scenario and starts the worker with its ``to_argv()``; the worker's own parser reads that command
line back into an equal config. A flag added on one side only fails here, not in a run."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from chaos.protocol.client import QueueKeys
from chaos.reference.config import WorkerConfig
from chaos.reference.payload import HandlerDistribution
from chaos.reference.worker import parse_args
from chaos.runtime.local import LocalRuntime
from chaos.scenario.loading import load_scenario

ROOT = Path(__file__).resolve().parent.parent
BASE = WorkerConfig(url="redis://127.0.0.1:6390", name="worker-3",
                    keys=QueueKeys("emq:", "jobs"), lease_ms=1000, heartbeat_ms=333)


# Every field but the four the worker cannot run without differs from its default here.
EVERY_FIELD_SET = replace(BASE, heartbeat_ms=0, concurrency=1, poll_ms=5, seed=99,
                          protocol="client-clock", clock_file="/tmp/c", claim_gap_ms=40,
                          heartbeat="thread", control_file="/tmp/k", record_events=False,
                          ack_ledger="/tmp/acks", wait_replicas=1, completed_retention_ms=5000,
                          handler=HandlerDistribution("lognormal", 10, 1, 2, 30, 0.25))


@pytest.mark.parametrize("config", [BASE, EVERY_FIELD_SET], ids=["defaults", "every-field-set"])
def test_a_worker_config_survives_its_own_command_line(config: WorkerConfig):
    assert parse_args(config.to_argv()) == config


def test_every_field_of_the_contract_is_on_the_command_line():
    """A field to_argv forgets comes back as the parser's default: the every-field-set case
    above differs from the defaults in every field, so none can be left out unseen."""
    same = [name for name in WorkerConfig.__dataclass_fields__
            if name not in ("url", "name", "keys", "lease_ms")
            and getattr(EVERY_FIELD_SET, name) == getattr(BASE, name)]
    assert same == []


def test_the_runtime_starts_a_worker_with_what_the_scenario_says(tmp_path: Path):
    scenario = load_scenario(ROOT / "scenarios" / "long-handlers.toml",
                             ["topology.heartbeat = \"thread\"", "seed = 5"])
    runtime = LocalRuntime(scenario, tmp_path / "run")
    argv = runtime.worker_args("worker-2", 1, "/clock", "/acks", "/control", incarnation=1)
    assert argv[:2] == ["-m", "chaos.reference.worker"]
    config = parse_args(argv[2:])
    topology = scenario.topology
    assert (config.name, config.lease_ms, config.heartbeat_ms, config.heartbeat,
            config.concurrency, config.poll_ms, config.protocol) == (
        "worker-2", topology.lease_ms, topology.effective_heartbeat_ms, "thread",
        topology.concurrency, topology.poll_ms, scenario.protocol)
    assert config.handler == HandlerDistribution(**topology.handler.model_dump())
    assert config.seed == 5 * 7919 + 1 + 104_729  # each incarnation draws other handler times
    assert (config.clock_file, config.ack_ledger, config.control_file) == (
        "/clock", "/acks", "/control")
