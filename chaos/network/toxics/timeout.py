"""``timeout``: drops all data, and closes the link after ``timeout`` ms without input, never when
0 (Toxiproxy's ``toxics/timeout.go``). Removing it closes the links it was on (its ``Cleanup``),
so healing a partition made with ``timeout`` 0 closes the cut-off connections."""

from __future__ import annotations

from chaos.network.toxics.toxic import TimedOut, ToxicKind, ToxicStage


async def pipe_timeout(stage: ToxicStage, attributes: dict[str, int]) -> None:
    # As Toxiproxy's select loop re-arms its timer on every chunk, the timeout counts from the
    # last input: the link closes after ``timeout`` ms without data. 0 never closes.
    timeout = attributes["timeout"] / 1000 if attributes["timeout"] > 0 else None
    while True:
        chunk = await stage.get(timeout)
        if chunk is None or isinstance(chunk, TimedOut):
            stage.close()
            return
        stage.drop()  # data is dropped on the ground, never delivered later


KIND = ToxicKind("timeout", "TimeoutToxic", ("timeout",), pipe_timeout,
                 closes_link_on_removal=True)
