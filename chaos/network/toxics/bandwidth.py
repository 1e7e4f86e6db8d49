"""``bandwidth``: at most ``rate`` KB/s, big chunks cut into 100 ms pieces (Toxiproxy's
``toxics/bandwidth.go``). A ``rate`` <= 0 passes data unthrottled, where Toxiproxy loops forever."""

from __future__ import annotations

import asyncio

from chaos.network.toxics.toxic import Chunk, TimedOut, ToxicKind, ToxicStage


async def pipe_bandwidth(stage: ToxicStage, attributes: dict[str, int]) -> None:
    rate = attributes["rate"]  # KB/s, i.e. bytes per millisecond
    loop = stage.link.loop
    debt = 0.0  # seconds the link is behind its rate; negative after oversleeping
    while True:
        chunk = await stage.get()
        if chunk is None or isinstance(chunk, TimedOut):
            stage.close()
            return
        if rate <= 0:
            stage.emit(chunk)  # Toxiproxy spins forever here; we pass the data unthrottled
            continue
        debt += len(chunk.data) / rate / 1000
        piece = rate * 100  # what the rate allows in 100 ms
        while len(chunk.data) > piece:
            await asyncio.sleep(0.1)
            head, rest = chunk.data[:piece], Chunk(chunk.data[piece:], chunk.timestamp)
            stage.emit_part(Chunk(head, chunk.timestamp), rest)
            chunk = rest
            debt -= 0.1
        started = loop.time()
        await asyncio.sleep(max(debt, 0.0))
        debt -= loop.time() - started
        stage.emit(chunk)


KIND = ToxicKind("bandwidth", "BandwidthToxic", ("rate",), pipe_bandwidth)
