"""``reset_peer``: on the first input (data or EOF), waits ``timeout`` ms, then closes the
connection with SO_LINGER 0: a TCP RST (Toxiproxy's ``toxics/reset_peer.go``); that input is
dropped. It resets even when added to a live connection, where Toxiproxy sets SO_LINGER only when
a connection starts, so a later reset is a plain close.
"""

from __future__ import annotations

from chaos.network.toxics.toxic import ToxicKind, ToxicStage


async def pipe_reset_peer(stage: ToxicStage, attributes: dict[str, int]) -> None:
    await stage.get()
    stage.drop()
    # Toxiproxy sleeps here without listening for interrupts: removing or updating the toxic
    # does not call the reset off, so it runs on a timer of the link, not in this task.
    stage.link.end_later(stage, attributes["timeout"] / 1000)
    stage.task = None


KIND = ToxicKind("reset_peer", "ResetToxic", ("timeout",), pipe_reset_peer)
