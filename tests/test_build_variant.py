"""The calibration knob ECHOMQ_CHAOS_BUILD_VARIANT (chaos.reference.variant): a changed build of
the reference worker and reaper without a change of settings."""

from __future__ import annotations

import pytest

from chaos.reference.variant import (
    VARIANT_ENV,
    BuildVariant,
    VariantError,
    build_variant,
    parse_variant,
)


def test_a_variant_is_read_from_the_environment() -> None:
    assert build_variant({}) == BuildVariant() and BuildVariant().sound
    variant = build_variant({VARIANT_ENV: "reaper_period_ms=350, claim_delay_ms=25,"
                                          "handler_scale=1.1"})
    assert variant == BuildVariant(350, 25, 1.1) and not variant.sound
    assert variant.describe() == "reaper_period_ms=350,claim_delay_ms=25,handler_scale=1.1"
    assert parse_variant("") == BuildVariant()


@pytest.mark.parametrize("text, word", [("reaper_period=350", "unknown key"),
                                        ("claim_delay_ms", "not KEY=VALUE"),
                                        ("claim_delay_ms=x", "invalid literal"),
                                        ("handler_scale=0", "handler_scale > 0")])
def test_a_bad_variant_is_refused(text: str, word: str) -> None:
    with pytest.raises(VariantError, match=word):
        parse_variant(text)

