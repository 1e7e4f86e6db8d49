"""The plan (`validate`, `run --dry-run`, and `run` before it starts) names each queue family's
own keys, from the family (chaos.family's ``key_layout``), not the reference queue's layout."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.run.plan import describe_plan
from chaos.scenario.loading import load_scenario

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(("path", "keys"), [
    ("scenarios/kill-worker.toml", "keys emq:{jobs}:*"),
    ("scenarios/bullmq/kill-worker.toml", "keys emq:jobs:*"),  # BullMQ: prefix:queue:, no tag
    ("scenarios/celery/kill-worker.toml",  # kombu: the prefix, the queue, its unacked keys
     "keys cq:jobs (and its priority lists cq:jobs\\x06\\x16<n>), cq:unacked, "
     "cq:unacked_index, cq:unacked_mutex (kombu's)"),
])
def test_the_plan_names_the_familys_own_keys(path: str, keys: str):
    [line] = [line for line in describe_plan(load_scenario(ROOT / path)).splitlines()
              if line.startswith("  valkey ")]
    assert line.endswith(keys), line
