"""The reference reaper's loop against a real valkey-server."""

from __future__ import annotations

import itertools
import threading
import time

import redis

from chaos.protocol.client import QueueClient, QueueKeys, connect
from chaos.reference.reaper import run
from chaos.runtime.valkey import ValkeyServer


def test_a_reap_no_replica_confirmed_makes_the_reaper_find_the_primary_again(
        valkey_server: ValkeyServer, raw_client: redis.Redis):
    """With WAIT 1 on a server that has no replica, every reap is unconfirmed (NotReplicated),
    as on a demoted primary Sentinel has not reconfigured yet: the reaper drops its connection
    after each such sweep, so the next one connects (through Sentinel, in a real run) anew
    instead of writing to the same node until it is reconfigured."""
    name = "reaper-wait-test"
    queue = QueueClient(connect(valkey_server.url, password=valkey_server.password,
                                client_name=name),
                        QueueKeys("test:", "reaper-wait"), wait_replicas=1)
    stop = threading.Event()
    sweeping = threading.Thread(target=run, args=(queue, 50, 100, stop), daemon=True)
    sweeping.start()
    connections: set[str] = set()
    try:
        for _ in itertools.repeat(None, 400):  # each sweep waits WAIT's timeout (1 s) first
            connections |= {client["id"] for client in raw_client.client_list()
                            if client["name"] == name}
            if len(connections) >= 3:
                break
            time.sleep(0.05)
    finally:
        stop.set()
        sweeping.join()
        queue.client.close()
    assert len(connections) >= 3, connections
