"""Script calls straight on a pooled redis-py connection: one write, the replies read back.

redis-py's ``execute_command`` and its pipeline spend more client CPU per call than the server
spends running a claim script (retry wrappers, observability hooks, response callbacks): the
reference worker's claim path is bound by it. The scripts' replies need none of that, so the
protocol client packs its calls and reads the replies itself, on a connection of the same pool
(so URL, password, client name, TLS, unix sockets, Sentinel and timeouts are redis-py's).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from redis.exceptions import ResponseError


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
