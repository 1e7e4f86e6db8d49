"""Script calls straight on a pooled redis-py connection: one write, the replies read back.

redis-py's ``execute_command`` and its pipeline spend more client CPU per call than the server
spends running a claim script (retry wrappers, observability hooks, response callbacks): the
reference worker's claim path is bound by it. A script's reply needs none of that, so the
protocol client packs the claim path's calls (``client.PACKED_SCRIPTS``) and reads the replies
itself, on a connection of the same pool (so URL, password, client name, TLS, unix sockets,
Sentinel and timeouts are redis-py's).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from redis.exceptions import ConnectionError as StoreConnectionError
from redis.exceptions import ResponseError

WAIT_TIMEOUT_MS = 1000  # wait_replicas: how long a script call waits for its replicas


class NotReplicated(StoreConnectionError):
    """WAIT saw fewer replicas than asked within the timeout: the transition happened on the
    primary but is not acknowledged (a failover now could lose it). Transient, like a dropped
    connection: callers retry, and fencing turns a retried complete into a rejection."""


def call_packed(client: redis.Redis, commands: Sequence[Sequence[Any]]) -> list[Any]:
    """Send ``commands`` in one write on one pooled connection and read one reply each, in
    order; an error reply (``ResponseError``, e.g. ``NoScriptError``) is returned in its place.
    A connection or timeout error closes the connection (unread replies must not reach the next
    caller) and is raised: none, some or all of the commands may have run."""
    pool = client.connection_pool
    connection = pool.get_connection()
    try:
        connection.send_packed_command(connection.pack_commands(commands))
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(connection.read_response())
            except ResponseError as error:
                replies.append(error)
        return replies
    except BaseException:
        connection.disconnect()
        raise
    finally:
        pool.release(connection)


def call_script(client: redis.Redis, name: str, command: Sequence[Any],
                wait_replicas: int = 0) -> Any:
    """One script call (``command``: its EVALSHA or EVAL) and its reply; an error reply is
    raised (e.g. ``NoScriptError``). ``wait_replicas`` > 0: ``WAIT`` follows it on the same
    connection (WAIT counts that connection's writes) and fewer replicas than asked within
    ``WAIT_TIMEOUT_MS`` raise ``NotReplicated``."""
    if not wait_replicas:
        (reply,) = call_packed(client, [command])
    else:
        reply, replicas = call_packed(client, [command,
                                               ("WAIT", wait_replicas, WAIT_TIMEOUT_MS)])
    if isinstance(reply, Exception):
        raise reply
    if not wait_replicas:
        return reply
    if isinstance(replicas, Exception):  # e.g. "UNBLOCKED": this primary was just demoted
        raise NotReplicated(f"{name}: WAIT failed: {replicas}")
    if int(replicas) < wait_replicas:
        raise NotReplicated(f"{name}: WAIT saw {replicas} of {wait_replicas} "
                            f"replica(s) within {WAIT_TIMEOUT_MS} ms")
    return reply
