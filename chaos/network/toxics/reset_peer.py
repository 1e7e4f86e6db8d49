"""``reset_peer``: on the first input (data or EOF), waits ``timeout`` ms, then ends the link; that
input is dropped (Toxiproxy's ``toxics/reset_peer.go``).

Whether the end is a TCP RST depends, as in Toxiproxy, on when the connection opened. One opened
while the toxic is on the proxy got SO_LINGER 0 on both its sockets as it started
(``lingers_zero``, Toxiproxy's ``link.Start``), so its close, this one or any other, is an RST. One
already open when the toxic was added keeps its normal close: the toxic ends it with a FIN.
"""

from __future__ import annotations

from chaos.network.toxics.toxic import ToxicKind, ToxicStage


async def pipe_reset_peer(stage: ToxicStage, attributes: dict[str, int]) -> None:
    await stage.get()
    stage.drop()
    # Toxiproxy sleeps here without listening for interrupts: removing or updating the toxic
    # does not call the close off, so it runs on a timer of the link, not in this task.
    stage.link.end_later(stage, attributes["timeout"] / 1000)
    stage.task = None


KIND = ToxicKind("reset_peer", "ResetToxic", ("timeout",), pipe_reset_peer, lingers_zero=True)
