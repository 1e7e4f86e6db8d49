"""Branded ids (chaos.protocol.ids): what EchoMQ accepts, minted in order, unique per node."""

from __future__ import annotations

import pytest

from chaos.protocol.ids import EPOCH_MS, BrandedIds, base62, id_maker, snowflake


def test_a_branded_id_is_three_capitals_and_eleven_base62_digits_of_a_snowflake():
    mint = BrandedIds(node=68, clock_ms=lambda: 1_796_319_514_131)
    first = mint()
    assert len(first) == 14 and first.startswith("JOB")
    assert snowflake(first) == (1_796_319_514_131, 68, 0)
    assert snowflake(mint()) == (1_796_319_514_131, 68, 1)  # same ms: the sequence counts
    # a known id of EchoMQ's own (docs/echomq.md): ms 1796319514131, node 68, sequence 1
    assert snowflake("JOB0SaA6SW300P") == (1_796_319_514_131, 68, 1)
    assert base62(0) == "0" * 11 and base62(61, width=1) == "z"


def test_ids_sort_in_mint_order_even_when_the_clock_steps_back_or_the_sequence_overflows():
    now = [EPOCH_MS + 10_000]
    mint = BrandedIds(node=5, clock_ms=lambda: now[0])
    ids = [mint() for _ in range(5000)]  # past 4096 in one ms: carries into the next ms
    now[0] -= 3000  # the clock steps back
    ids += [mint() for _ in range(10)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_two_nodes_minting_in_one_millisecond_never_collide():
    a = BrandedIds(node=1, clock_ms=lambda: EPOCH_MS + 7)
    b = BrandedIds(node=2, clock_ms=lambda: EPOCH_MS + 7)
    assert not {a() for _ in range(100)} & {b() for _ in range(100)}
    assert id_maker("plain")(3) == "job-0000003"


@pytest.mark.parametrize("bad", ["job-0000001", "JOB0SaA6SW300", "JoB0SaA6SW300P",
                                 "JOB0SaA6SW300-", "JOBzzzzzzzzzzz"])
def test_anything_else_is_refused(bad: str):
    with pytest.raises(ValueError):
        snowflake(bad)
    with pytest.raises(ValueError):
        id_maker("uuid")
