"""EchoMQ's grouped admission for the built-in producer (``load.groups``, docs/echomq.md): each
job goes into one group's lane by the groups' weights, after each limited group's limit is set,
through scripts with EchoMQ.Lanes' effects (``lua/genqueue.lua``, ``lua/glimit.lua``), so the
recorder decodes them as it decodes the user's own grouped enqueue."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from importlib.resources import files
from typing import Any, cast

import redis

from chaos.load.sources import Producer
from chaos.protocol.client import QueueClient, QueueKeys
from chaos.scenario.model import LoadGroup


def _script(name: str) -> str:
    return files("chaos.queues.echomq").joinpath("lua", f"{name}.lua").read_text()


def weighted_turns(weights: Mapping[str, float]) -> Iterator[str]:
    """The groups in turn, each as often as its weight says: smooth weighted round robin (each
    turn every group gains its weight, the one furthest ahead is chosen and pays the total):
    the group furthest behind its share n * weight / total, so each count stays within about
    a job of it (tests/test_grouped_admission.py) and no group waits long for its turn."""
    names = sorted(weights)
    total = sum(weights.values())
    credit = dict.fromkeys(names, 0.0)
    while True:
        for name in names:
            credit[name] += weights[name]
        chosen = max(names, key=lambda name: credit[name])  # the first of equals: stable
        credit[chosen] -= total
        yield chosen


class GroupedAdmission:
    """``enqueue`` with the built-in producer's signature (``chaos.load.sources.Producer``):
    the job into the lane whose turn it is."""

    def __init__(self, client: redis.Redis, keys: QueueKeys,
                 groups: Mapping[str, LoadGroup]) -> None:
        self.client, self.keys, self.groups = client, keys, dict(groups)
        self._genqueue = client.register_script(_script("genqueue"))
        self._glimit = client.register_script(_script("glimit"))
        self._turns = weighted_turns({name: group.weight for name, group in groups.items()})

    def set_limits(self) -> None:
        """Each limited group's limit, before its first job."""
        base = self.keys.base
        for name, group in sorted(self.groups.items()):
            if group.limit is not None:
                self._glimit(keys=[f"{base}glimit", f"{base}gactive", f"{base}ring",
                                   f"{base}paused", f"{base}wake", f"{base}g:{name}:pending"],
                             args=[name, group.limit])

    def enqueue(self, job_id: str, payload: str = "", kind: str = "") -> bool:
        base = self.keys.base
        group = next(self._turns)
        return bool(self._genqueue(
            keys=[self.keys.job_prefix + job_id, f"{base}g:{group}:pending", f"{base}ring",
                  f"{base}paused", f"{base}glimit", f"{base}gactive", f"{base}wake"],
            args=[job_id, payload, group]))


class GroupedProducer(Producer):
    """The built-in producer over a ``GroupedAdmission``, the limits set before the first
    job (the history says which lane each job went into)."""

    def __init__(self, admission: GroupedAdmission, *args: Any, **kwargs: Any) -> None:
        super().__init__(cast(QueueClient, admission), *args, **kwargs)
        self.admission = admission

    def start(self) -> None:
        self.admission.set_limits()
        super().start()
