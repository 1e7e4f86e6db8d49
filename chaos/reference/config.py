"""What a reference worker is told (its command line, parsed), and its queue client."""

from __future__ import annotations

from dataclasses import dataclass

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


def queue_client(config: WorkerConfig, client_name: str) -> QueueClient:
    return QueueClient(
        connect(config.url, client_name=client_name), config.keys,
        protocol=config.protocol, clock=LocalClock(config.clock_file),
        claim_gap_ms=config.claim_gap_ms, record_events=config.record_events,
        wait_replicas=config.wait_replicas,
        completed_retention_ms=config.completed_retention_ms,
    )
