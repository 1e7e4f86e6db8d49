"""A changed build of the reference worker and reaper without a change of settings: for
calibrating and testing ``trend`` only (docs/store.md, "A changed build").

``ECHOMQ_CHAOS_BUILD_VARIANT`` (in the runner's environment; every reference process inherits
it, forked or spawned) holds comma-separated ``KEY=VALUE`` items:

  reaper_period_ms=N   the reaper sweeps every N ms whatever its ``--interval-ms`` says (a
                       reaper whose code got slower; the scenario, and so its settings hash and
                       the checker's bounds, still say the configured interval)
  claim_delay_ms=N     each claim call of a worker takes N ms longer (a slower claim path)
  handler_scale=X      each handler runs X times as long as drawn (a slower handler)

Read in each process's ``main`` (not at import: the fork server imports the modules before any
run). It is not part of the scenario, so it enters no settings hash: a run of a variant is
stored as the same scenario and settings as a sound one, as a code change would be. An unknown
key or a bad value stops the process with a message (exit 2): a calibration run must not go
on silently as the sound build.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

VARIANT_ENV = "ECHOMQ_CHAOS_BUILD_VARIANT"


class VariantError(ValueError):
    """A variant the processes cannot honour."""


@dataclass(frozen=True)
class BuildVariant:
    reaper_period_ms: int | None = None
    claim_delay_ms: int = 0
    handler_scale: float = 1.0

    @property
    def sound(self) -> bool:
        return self == BuildVariant()

    def describe(self) -> str:
        parts = [f"reaper_period_ms={self.reaper_period_ms}"
                 if self.reaper_period_ms is not None else "",
                 f"claim_delay_ms={self.claim_delay_ms}" if self.claim_delay_ms else "",
                 f"handler_scale={self.handler_scale:g}" if self.handler_scale != 1.0 else ""]
        return ",".join(part for part in parts if part) or "sound"


def parse_variant(text: str) -> BuildVariant:
    """``reaper_period_ms=350,claim_delay_ms=25`` -> BuildVariant; '' -> the sound build."""
    values: dict[str, str] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep:
            raise VariantError(f"{VARIANT_ENV}: {item!r} is not KEY=VALUE")
        values[key.strip()] = value.strip()
    unknown = sorted(set(values) - {"reaper_period_ms", "claim_delay_ms", "handler_scale"})
    if unknown:
        raise VariantError(f"{VARIANT_ENV}: unknown key(s) {', '.join(unknown)} (known: "
                           "reaper_period_ms, claim_delay_ms, handler_scale)")
    try:
        period = int(values["reaper_period_ms"]) if "reaper_period_ms" in values else None
        delay = int(values.get("claim_delay_ms", "0"))
        scale = float(values.get("handler_scale", "1"))
    except ValueError as error:
        raise VariantError(f"{VARIANT_ENV}: {error}") from None
    if (period is not None and period <= 0) or delay < 0 or scale <= 0:
        raise VariantError(f"{VARIANT_ENV}: reaper_period_ms must be > 0, claim_delay_ms >= 0, "
                           "handler_scale > 0")
    return BuildVariant(period, delay, scale)


def build_variant(environ: Mapping[str, str] | None = None) -> BuildVariant:
    """This process's build variant, from its environment (the sound build without one)."""
    return parse_variant((os.environ if environ is None else environ).get(VARIANT_ENV, ""))
