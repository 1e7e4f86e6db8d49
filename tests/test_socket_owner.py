"""Who owns a connection that neither logs in as its own user nor names itself: the member whose
process holds the socket (chaos.runtime.sockets). A real child process, in a session of its own
as every member is, connects as the default user and runs a queue of scripts no SHA1 names:
the recorder's history holds its calls as its member's."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from test_monitor import live_recorder

from chaos.history.events import read_history
from chaos.history.monitor import MONITOR_HISTORY
from chaos.protocol.client import QueueKeys
from chaos.runtime import sockets
from chaos.runtime.valkey import ValkeyServer

ROOT = Path(__file__).resolve().parent.parent
# One byte off our scripts (no SHA1 matches: decoded by effect), no client name, no own user.
CHILD = textwrap.dedent("""
    import sys, time
    from chaos.protocol.client import QueueClient, QueueKeys, redis_client

    class OneByteOff(QueueClient):
        def load_scripts(self):
            self._sources = {n: s.rstrip("\\n") for n, s in self._sources.items()}
            super().load_scripts()

    url, password, prefix = sys.argv[1:4]
    client = redis_client(url, password=password, decode_responses=True)
    queue = OneByteOff(client, QueueKeys(prefix, "q"))
    queue.enqueue("j1", "x")
    claimed = queue.claim(60_000, "whoever")
    queue.complete(claimed.job_id, claimed.attempt, "whoever")
    print("done", flush=True)
    time.sleep(30)
""")


def _child(server: ValkeyServer, prefix: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", CHILD, server.url, server.password or "",
                             prefix], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            start_new_session=True)


def test_an_unnamed_connection_is_the_member_whose_process_holds_its_socket(
        valkey_server: ValkeyServer, raw_client, tmp_path: Path):
    keys = QueueKeys("owner:", "q")
    groups: dict[str, int] = {}
    recorder = live_recorder(valkey_server, keys, tmp_path)
    recorder.socket_owner = lambda address: sockets.socket_owner(address, groups)
    recorder.members = frozenset({"worker-9"})
    child = _child(valkey_server, keys.prefix)
    try:
        groups["worker-9"] = child.pid  # its session: its process group
        assert child.stdout is not None and child.stdout.readline().strip() == "done"
        theirs = [c["addr"] for c in raw_client.client_list() if not c.get("name")
                  and c.get("cmd") != "client|list" and c.get("flags") != "O"]
        owners = {sockets.socket_owner(addr, groups) for addr in theirs}
        assert "worker-9" in owners
        assert sockets.socket_owner(theirs[0], {"other": 1}) is None
        time.sleep(0.05)
        health = recorder.stop()
    finally:
        child.kill()
        child.wait()
    assert health.undecoded_calls == 0 and health.unattributed_calls == 0, health
    events = read_history(tmp_path / MONITOR_HISTORY)
    calls = [(e.type, e.worker, e.extra.get("conn")) for e in events
             if e.type in ("claim", "complete")]
    assert calls == [("claim", "worker-9", "worker-9"), ("complete", "worker-9", "worker-9")]
    assert json.dumps(health.as_dict())  # the health stays serialisable
