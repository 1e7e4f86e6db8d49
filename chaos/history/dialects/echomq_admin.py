"""The echomq dialect's reading of EchoMQ's transitions beside a lease's own: flows
(``EchoMQ.Flows``), a user's ``remove_job`` and ``reprocess_job``, and ``EchoMQ.Locks``'
presence markers (docs/echomq.md, the mapping table). The effects a call had on one job are
gathered by the dialect's loop (``chaos.history.dialects.echomq``); this module says which of
these transitions they make, so that loop stays one pass over a lease's common calls.

    enqueue of a flow   a new row ``state awaiting_children`` with a payload, in no set, its
    parent              ``<row>:dependencies`` SET to N: ``enqueue`` with ``children`` N
    enqueue of a child  a new row with a payload and a ``parent`` field, into pending:
                        ``enqueue`` with its ``parent`` (read by the dialect's enqueue)
    release             a parent held since its enqueue (its row's state awaiting_children)
                        into pending, state pending (the last child's complete, or a dead
                        child's whose parent ignores its failure): ``release``; into dead,
                        state dead (a dead child's that fails its parent): ``release`` with
                        ``to`` dead, failed for good with it
    remove              its row deleted with its ``<row>:logs`` (or out of dead), no
                        completion counted (``metrics:completed``), into no set: ``remove``
    reprocess           out of dead (a member the dead set held) into pending, its row kept,
                        no claim: ``reprocess``
    reassign            out of one group's lane into another's (``EchoMQ.Lanes.reassign``,
                        @greassign: its row's ``group`` rewritten), no claim: ``reassign`` with
                        the group it is in now
    lock marker         ``SET <row>:lock <token> ...``, ``DEL <row>:lock`` (plain commands, as
                        EchoMQ.Locks sends them): ``lock_marker`` held or released; a refresh
                        (``PEXPIRE <row>:lock``) and the row's mirror of it (``HSET <row> lock
                        <token>``, ``HPEXPIRE <row> ... lock``, ``HDEL <row> lock``) make none

Anything else a call does to a parent still held is not read: undecoded, its jobs without
evidence. A cross-queue flow's outbox entry (``RPUSH <base>flow:outbox``) moves no job of this
queue: its delivery in the parent's queue is that queue's release.
"""

from __future__ import annotations

from chaos.history.dialects.echomq_effect import Effect

AWAITING = "awaiting_children"  # a flow parent's state until its last child completes
# A job's sub-keys these transitions write: <row>:dependencies (a parent's children left),
# <row>:processed (its children's results), <row>:logs (deleted by remove_job), <row>:lock
LOCK_SUFFIX, LOGS_SUFFIX, DEPENDENCIES_SUFFIX = ":lock", ":logs", ":dependencies"


def admin_event(job_id: str, job: Effect, ts: str, holder: str,
                completion_counted: bool) -> dict[str, str] | None:
    """The flow, removal or reprocess ``job``'s effects make; None when they make none of these
    (the dialect reads them as a lease's own transitions)."""
    if job.deleted and not completion_counted and (job.logs_deleted or job.left_dead) \
            and not job.pending and job.deadline is None and not job.attempts_raised \
            and job.due is None and job.dead is None:
        return {"type": "remove", "id": job_id, "worker": holder,
                "attempt": job.attempt_before, "ts": ts}
    if job.state_before == AWAITING and job.dead is not None and not job.pending \
            and not job.attempts_raised and job.deadline is None and not job.deleted:
        # a held parent failed with its dead child (@retry's fail-parent arm)
        return {"type": "release", "id": job_id, "worker": holder, "to": "dead", "ts": ts}
    if job.attempts_raised or job.deadline is not None or job.deleted or job.completed \
            or job.due is not None or job.dead is not None or job.left_active:
        return None
    if job.left_dead and job.pending and not job.left_schedule:
        return {"type": "reprocess", "id": job_id, "worker": holder, "ts": ts}
    if job.left_lane and job.pending and job.existed and not job.payload \
            and not job.left_schedule:  # (the dialect adds the group its row has now)
        return {"type": "reassign", "id": job_id, "worker": holder, "ts": ts}
    if job.pending and job.existed and not job.payload and job.state_before == AWAITING \
            and not job.left_dead and not job.left_schedule:
        return {"type": "release", "id": job_id, "worker": holder, "ts": ts}
    if job.awaiting and job.payload and not job.existed and not job.pending \
            and job.children is not None:
        return {"type": "enqueue", "id": job_id, "children": job.children, "ts": ts}
    return None


def lock_marker(args: list[str], job_prefix: str, ts: str) -> dict[str, str] | None:
    """The ``lock_marker`` event of a plain command on a job's ``:lock`` key (a SET takes it,
    a DEL releases it); None for another command (a refresh, anything else)."""
    command = args[0].upper()
    if command == "SET" and len(args) > 2:
        return {"type": "lock_marker", "id": args[1][len(job_prefix):-len(LOCK_SUFFIX)],
                "held": "1", "token": args[2], "ts": ts}
    if command in ("DEL", "UNLINK") and len(args) == 2:
        return {"type": "lock_marker", "id": args[1][len(job_prefix):-len(LOCK_SUFFIX)],
                "held": "0", "ts": ts}
    return None


def lock_mirror(args: list[str], job_prefix: str) -> bool:
    """Is this plain command a ``:lock`` marker's refresh, or the row's mirror of the marker
    (the ``lock`` field EchoMQ.Locks keeps in the row beside it): no transition, no event?"""
    command = args[0].upper()
    key = args[1]
    if key.endswith(LOCK_SUFFIX):
        return command in ("PEXPIRE", "EXPIRE", "PEXPIREAT")
    if ":" in key[len(job_prefix):]:
        return False
    if command == "HSET":
        return len(args) == 4 and args[2] == "lock"
    if command == "HDEL":
        return args[2:] == ["lock"]
    if command == "HPEXPIRE":
        return args[-1:] == ["lock"] and "FIELDS" in (arg.upper() for arg in args)
    return False
