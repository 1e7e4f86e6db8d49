"""The echomq dialect's reading of EchoMQ's group lanes (``EchoMQ.Lanes``, docs/echomq.md): the
writes of a call to the lanes' keys, gathered by the dialect's loop
(``chaos.history.dialects.echomq``) into what the call did to each job and the lane events it
makes. A group's lane (``<base>g:<group>:pending``) is a pending set of its own: a job into it
is as into pending, out of it (``ZREM``) a job leaving its lane (a reassign, or a stale
complete; a job leaving it for nowhere is undecoded), its head popped (``ZPOPMIN``) a
claim's. ``HSET glimit <g> <n>`` is a ``group_limit`` event, ``SADD``/``SREM paused <g>`` a
``group_pause``/``group_resume``. Anything else (the ring, the wake list, the live counts, the
weights) moves no job."""

from __future__ import annotations

from collections.abc import Callable

from chaos.history.dialects.echomq_effect import Effect

LANE_SUFFIX = ":pending"  # <base>g:<group>:pending: a group's lane
_ZADD_OPTIONS = frozenset(("XX", "NX", "GT", "LT", "CH", "INCR"))


class Lanes:
    """The lanes' keys of one queue, and what a write to them does."""

    def __init__(self, base: str) -> None:
        self.lanes = base + "g:"  # a group's lane: <base>g:<group>:pending
        self.glimit = base + "glimit"  # each group's limit of live leases
        self.paused = base + "paused"  # the paused groups (EchoMQ.Lanes.pause)

    def write(self, name: str, key: str, args: list[str], effects: dict[str, Effect],
              effect_of: Callable[[dict[str, Effect], str], Effect],
              events: list[dict[str, str]], ts: str, conn: str | None) -> bool:
        """Apply one write of a call (``name``, upper case, on ``key``) to ``effects`` (each
        job's, ``effect_of`` making a job's first) and ``events``; True for a lane's head
        popped (a claim, empty when nothing else follows)."""
        if key.startswith(self.lanes) and key.endswith(LANE_SUFFIX):
            if name == "ZPOPMIN":
                return True
            if name == "ZADD":
                first = 2
                while first < len(args) and args[first].upper() in _ZADD_OPTIONS:
                    first += 1
                for member, score in zip(args[first + 1::2], args[first::2]):  # noqa: B905
                    job = effects.get(member) or effect_of(effects, member)
                    job.pending, job.pending_score = True, score
            elif name == "ZREM":
                for member in args[2:]:
                    (effects.get(member) or effect_of(effects, member)).left_lane = True
        elif key == self.glimit and name == "HSET":
            events += [{"type": "group_limit", "group": args[index], "limit": args[index + 1],
                        "ts": ts} for index in range(2, len(args) - 1, 2)]
        elif key == self.paused and name in ("SADD", "SREM"):
            # (a SADD of a group already paused, or a SREM of one that is not, writes nothing;
            # the checker takes the event as the state it leaves, so it is harmless)
            kind = "group_pause" if name == "SADD" else "group_resume"
            events += [{"type": kind, "group": group, "worker": conn or "", "ts": ts}
                       for group in args[2:]]
        return False
