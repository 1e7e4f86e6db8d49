"""Job payloads (docs/sut.md): what the load sources enqueue for any SUT's handler."""

from __future__ import annotations

import json

from chaos.load.sources import payload_maker
from chaos.reference.payload import is_crash
from chaos.scenario.model import Handler, Load


def test_payloads_carry_seeded_handler_times_from_the_distribution():
    handler = Handler(distribution="uniform", min_ms=100, max_ms=400)
    load = Load(payload_bytes=5)
    first = json.loads(payload_maker(handler, load, 7).make())
    maker_a, maker_b = payload_maker(handler, load, 7), payload_maker(handler, load, 7)
    drawn = [json.loads(maker_a.make()) for _ in range(200)]
    assert drawn == [json.loads(maker_b.make()) for _ in range(200)]  # same seed, same jobs
    assert first == drawn[0]
    assert all(100 <= job["handler_ms"] <= 400 for job in drawn)
    assert len({job["handler_ms"] for job in drawn}) > 50  # drawn, not one value
    assert all(job["pad"] == "xxxxx" and job["crash"] is False for job in drawn)
    other = [json.loads(payload_maker(handler, load, 8).make()) for _ in range(20)]
    assert other != drawn[:20]


def test_a_fixed_handler_and_the_crash_flag():
    maker = payload_maker(Handler(distribution="fixed", fixed_ms=250), Load(), 1)
    job = json.loads(maker.make(crash=True))
    assert job["handler_ms"] == 250 and job["crash"] is True
    assert is_crash(maker.make(crash=True)) and not is_crash(maker.make())
    assert is_crash("poison")  # a bare poison payload, enqueued by hand
    assert not is_crash("not json") and not is_crash('["crash"]')
