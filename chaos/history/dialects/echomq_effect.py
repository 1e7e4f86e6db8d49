"""What one call did to one job, as the echomq dialect's by-effect reading gathers it
(``chaos.history.dialects.echomq``; its lanes' and its user calls' readings,
``echomq_lanes`` and ``echomq_admin``, fill in their parts)."""

from __future__ import annotations


class Effect:
    """What one call did to one job (``EchoMQ._by_effect``). Class-level defaults: a new one
    sets only what it starts from (one per job a call touches, on the recorder's hot path)."""

    attempts_raised = completed = deleted = left_active = False
    payload = pending = other_state = left_schedule = False
    left_dead = logs_deleted = awaiting = False  # out of dead; its logs deleted; held parent
    left_lane = False  # out of a group's lane (ZREM g:<group>:pending)
    pending_score: str | None = None  # its score in pending (enqueue: TIME, or 0)
    deadline: str | None = None  # the lease written to active
    dead: str | None = None  # its score in dead
    due: str | None = None  # its score written to schedule (when it is due)
    due_before: str | None = None  # its score in schedule when the call took it out
    counted: str | None = None  # a field of its row (not attempts) the call counted up
    children: str | None = None  # a flow parent's count of children (its :dependencies SET)

    def __init__(self, existed: bool, deadline_before: str, attempt_before: str,
                 state_before: str | None) -> None:
        self.existed = existed  # its row held something when the call began
        self.deadline_before = deadline_before  # the lease it held when the call began (a reap's)
        self.attempt_before = attempt_before  # its attempts (fencing token) when the call began
        self.state_before = state_before  # its row's state when the call began

    @property
    def changed(self) -> bool:
        """Did the call change the job's lease, place or fate (not only bookkeeping)?"""
        return (self.attempts_raised or self.completed or self.deleted or self.left_active
                or self.pending or self.other_state or self.deadline is not None
                or self.dead is not None or self.due is not None or self.left_schedule
                or self.left_dead or self.awaiting or self.left_lane)
