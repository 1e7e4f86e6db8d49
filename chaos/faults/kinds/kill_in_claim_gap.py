"""kill_in_claim_gap: SIGKILL a worker at an instant it is inside its claim gap.

A two-step claim (pop, then lease) loses the job when its worker dies between the steps; a kill
at a planned instant lands there only by luck. So the worker is first told to stay in the gap
of its next claim (an order: its control file, then SIGUSR1); it says when it is there (a file
beside its control file), and only then is it killed: the kill lands in the gap every time.
A worker that never enters a gap (a one-step claim, the sound protocol) is killed when
``wait_ms`` is over. Nothing heals it: the worker stays dead.
"""

from __future__ import annotations

import time

from chaos.faults.target import FaultTarget
from chaos.scenario.faults import KillInClaimGap

GROUP = "process"
POLL_S = 0.005


def apply(runtime: FaultTarget, fault: KillInClaimGap, name: str, fault_id: str) -> None:
    # The worker stays in the gap as long as we may wait for it: our kill still finds it there.
    runtime.control(name, "claim_gap_hold", fault.wait_ms, fault_id)
    deadline = time.monotonic() + fault.wait_ms / 1000
    while not runtime.in_claim_gap(name, fault_id) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    runtime.kill(name)
