"""What a reference worker is told, and its queue client. ``WorkerConfig`` is the launch
contract both sides share: the runtime builds one from the scenario and starts the worker with
``to_argv()``; the worker reads its command line back into an equal one
(``chaos.reference.worker.parse_args``; tests/test_launch_contract.py holds them to it)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from chaos.protocol.client import QueueClient, QueueKeys, connect
from chaos.protocol.clock import LocalClock
from chaos.reference.payload import HandlerDistribution

# claim_gap_hold: "I am in the gap", a file beside the control file (the runtime reads it; here,
# not in the worker, so the runner need not import the worker and its heartbeat for it)
CLAIM_GAP_SUFFIX = ".in-claim-gap"


@dataclass(frozen=True)
class WorkerConfig:
    url: str
    name: str
    keys: QueueKeys
    lease_ms: int
    heartbeat_ms: int
    concurrency: int = 4
    poll_ms: int = 20
    handler: HandlerDistribution = HandlerDistribution()
    seed: int = 1
    protocol: str = "sound"
    clock_file: str | None = None
    claim_gap_ms: int | None = None  # None: the protocol's default
    heartbeat: str = "process"  # HEARTBEAT_MODES
    control_file: str | None = None
    record_events: bool = True  # False: benchmarks only (--no-events)
    ack_ledger: str | None = None  # acks file of this worker's acknowledged transitions
    wait_replicas: int = 0  # WAIT for this many replicas after each script call
    completed_retention_ms: int = 0  # > 0: a completed job's hash expires that long after

    def to_argv(self) -> list[str]:
        """The worker's command line after ``python -m chaos.reference.worker``."""
        optional = (("--clock-file", self.clock_file), ("--claim-gap-ms", self.claim_gap_ms),
                    ("--control-file", self.control_file), ("--ack-ledger", self.ack_ledger))
        return ["--url", self.url, "--name", self.name, "--prefix", self.keys.prefix,
                "--queue", self.keys.queue, "--lease-ms", str(self.lease_ms),
                "--heartbeat-ms", str(self.heartbeat_ms), "--heartbeat", self.heartbeat,
                "--concurrency", str(self.concurrency), "--poll-ms", str(self.poll_ms),
                "--handler", json.dumps(asdict(self.handler)), "--seed", str(self.seed),
                "--protocol", self.protocol, "--wait-replicas", str(self.wait_replicas),
                "--completed-retention-ms", str(self.completed_retention_ms),
                *(item for flag, value in optional if value is not None
                  for item in (flag, str(value))),
                *([] if self.record_events else ["--no-events"])]


def queue_client(config: WorkerConfig, client_name: str) -> QueueClient:
    return QueueClient(
        connect(config.url, client_name=client_name), config.keys,
        protocol=config.protocol, clock=LocalClock(config.clock_file),
        claim_gap_ms=config.claim_gap_ms, record_events=config.record_events,
        wait_replicas=config.wait_replicas,
        completed_retention_ms=config.completed_retention_ms,
    )
