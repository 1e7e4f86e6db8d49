"""``limit_data``: closes the link once ``bytes`` bytes have passed on it (Toxiproxy's
``toxics/limit_data.go``); the count is kept across updates of the toxic."""

from __future__ import annotations

from chaos.network.toxics.toxic import Chunk, TimedOut, ToxicKind, ToxicStage


async def pipe_limit_data(stage: ToxicStage, attributes: dict[str, int]) -> None:
    limit = attributes["bytes"]
    while True:
        chunk = await stage.get()
        if chunk is None or isinstance(chunk, TimedOut):
            stage.close()
            return
        remaining = max(limit - stage.bytes_transmitted, 0)
        if remaining < len(chunk.data):
            chunk = Chunk(chunk.data[:remaining], chunk.timestamp)
        if chunk.data:
            stage.emit(chunk)
            stage.bytes_transmitted += len(chunk.data)
        else:
            stage.drop()
        if limit - stage.bytes_transmitted <= 0:
            stage.close()
            return


KIND = ToxicKind("limit_data", "LimitDataToxic", ("bytes",), pipe_limit_data)
