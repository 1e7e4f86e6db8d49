"""A step-ramp load shape: add ``--step-users`` users every ``--step-seconds``, ``--steps`` times.

    locust -f loadtests/queue.py,loadtests/step_ramp.py --headless --host valkey://... \\
        --step-users 2 --step-seconds 10 --steps 5 --producer-rate 200

Locust asks the shape for its target once a second, so steps change on whole seconds.

With producers only (``ProducerUser`` on the command line) each step raises the enqueue rate by
``step-users x producer-rate`` jobs/s. A separate file: Locust applies any shape class found in a
locustfile, so ``loadtests/queue.py`` alone keeps honouring ``-u``/``-r``.
"""

from __future__ import annotations

from typing import Any

from locust import LoadTestShape, events


@events.init_command_line_parser.add_listener
def _step_options(parser: Any) -> None:
    group = parser.add_argument_group("step ramp (loadtests/step_ramp.py)")
    group.add_argument("--step-users", type=int, default=1, help="users added per step")
    group.add_argument("--step-seconds", type=float, default=10.0, help="length of a step (s)")
    group.add_argument("--steps", type=int, default=5, help="number of steps, then stop")


class StepRamp(LoadTestShape):
    def tick(self) -> tuple[int, float] | None:
        options = self.runner.environment.parsed_options if self.runner else None
        if options is None:
            return None
        step = int(self.get_run_time() // options.step_seconds)
        if step >= options.steps:
            return None
        users = (step + 1) * options.step_users
        return users, float(max(users, 1))  # spawn a whole step at once
