"""``slow_close``: the EOF is passed on ``delay`` ms late (Toxiproxy's ``toxics/slow_close.go``).
Updated or removed while it holds the EOF, it still closes, where Toxiproxy loses the EOF."""

from __future__ import annotations

import asyncio

from chaos.network.toxics.toxic import TimedOut, ToxicKind, ToxicStage


async def pipe_slow_close(stage: ToxicStage, attributes: dict[str, int]) -> None:
    while True:
        chunk = await stage.get()
        if chunk is None or isinstance(chunk, TimedOut):
            await asyncio.sleep(attributes["delay"] / 1000)
            stage.close()
            return
        stage.emit(chunk)


KIND = ToxicKind("slow_close", "SlowCloseToxic", ("delay",), pipe_slow_close)
