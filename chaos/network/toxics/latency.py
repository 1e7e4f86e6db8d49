"""``latency``: each chunk leaves ``latency`` ± ``jitter`` ms after it arrived (Toxiproxy's
``toxics/latency.go``)."""

from __future__ import annotations

import asyncio

from chaos.network.toxics.toxic import TimedOut, ToxicKind, ToxicStage


async def pipe_latency(stage: ToxicStage, attributes: dict[str, int]) -> None:
    latency, jitter = attributes["latency"], attributes["jitter"]
    loop = stage.link.loop
    while True:
        chunk = await stage.get()
        if chunk is None or isinstance(chunk, TimedOut):
            stage.close()
            return
        delay_ms = latency
        if jitter > 0:
            delay_ms += stage.link.rng.randrange(jitter * 2) - jitter
        # Measured from when the chunk was read, so latency does not throttle throughput.
        sleep = delay_ms / 1000 - (loop.time() - chunk.timestamp)
        if sleep > 0:
            await asyncio.sleep(sleep)
        chunk.timestamp += sleep  # so a second latency toxic in the chain adds its own delay
        stage.emit(chunk)


KIND = ToxicKind("latency", "LatencyToxic", ("latency", "jitter"), pipe_latency)
