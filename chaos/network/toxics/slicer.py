"""``slicer``: chunks cut around ``average_size`` ± ``size_variation`` bytes, ``delay`` µs apart
(Toxiproxy's ``toxics/slicer.go``). It never cuts below 1 byte, where Toxiproxy recurses without
end on ``average_size`` 0."""

from __future__ import annotations

import asyncio
import random

from chaos.network.toxics.toxic import Chunk, TimedOut, ToxicKind, ToxicStage


def slice_offsets(start: int, end: int, average: int, variation: int,
                  rng: random.Random) -> list[int]:
    """Toxiproxy's ``SlicerToxic.chunk``: pairs of offsets, halving around ``average`` bytes."""
    if (end - start) - average <= variation or end - start <= 1:
        return [start, end]
    middle = start + (end - start) // 2
    if variation > 0:
        middle += rng.randrange(variation * 2) - variation
    middle = min(max(middle, start + 1), end - 1)  # never an empty or out-of-range slice
    return (slice_offsets(start, middle, average, variation, rng)
            + slice_offsets(middle, end, average, variation, rng))


async def pipe_slicer(stage: ToxicStage, attributes: dict[str, int]) -> None:
    average, variation = attributes["average_size"], attributes["size_variation"]
    delay = attributes["delay"] / 1_000_000
    while True:
        chunk = await stage.get()
        if chunk is None or isinstance(chunk, TimedOut):
            stage.close()
            return
        offsets = slice_offsets(0, len(chunk.data), average, variation, stage.link.rng)
        for index in range(1, len(offsets), 2):
            piece = Chunk(chunk.data[offsets[index - 1]:offsets[index]], chunk.timestamp)
            rest = Chunk(chunk.data[offsets[index]:], chunk.timestamp)
            if rest.data:
                stage.emit_part(piece, rest)
            else:
                stage.emit(piece)
            await asyncio.sleep(delay)


KIND = ToxicKind("slicer", "SlicerToxic", ("average_size", "size_variation", "delay"),
                 pipe_slicer)
