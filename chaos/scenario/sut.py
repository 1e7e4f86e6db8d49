"""The system under test (docs/sut.md): the reference implementation by default, or the user's
own workers (and reaper) as commands, speaking the contract of docs/sut.md.

A foreign SUT gets everything through environment variables and writes no events stream of its
own, so its history comes from the MONITOR recorder (``[history] source = "monitor"``, implied
unless the scenario says otherwise). Faults that need the reference worker's cooperation (an
order it carries out on itself, its clock file, its claim-gap hook) cannot be applied to it.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from chaos.registry import dialect_names
from chaos.scenario.fields import Strict


def _known_dialect(name: str) -> str:
    """A dialect a foreign SUT may speak: a family the MONITOR recorder can decode
    (``chaos.registry``: every installed family with a dialect)."""
    known = dialect_names()
    if name not in known:
        raise ValueError(f"unknown dialect {name!r}; the installed families decode "
                         f"{', '.join(known)} (echomq-chaos families)")
    return name


SutDialect = Annotated[str, AfterValidator(_known_dialect)]

# Placeholders an argv element may hold; each process also gets them through the environment.
PLACEHOLDERS = ("{name}", "{index}")

# Fault kinds carried out by the reference worker itself (an order in its control file, its
# clock offset file, its claim-gap hook): a foreign process does not know them.
COOPERATIVE_FAULTS = {
    "cpu_hog": "an order the reference worker carries out on itself",
    "block_heartbeat": "an order the reference worker carries out on itself",
    "heartbeat_lag": "an order the reference worker carries out on itself",
    "kill_in_claim_gap": "the reference worker's claim-gap hook",
    "clock_skew": "the reference processes' clock offset file",
}

Argv = Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]


class Sut(Strict):
    """``[sut]``: what runs as the workers and the reaper. Without ``workers``: the reference
    worker; ``reaper``: ``builtin`` (the reference reaper), ``none`` (the workers reap), or a
    command of the user's."""

    workers: Argv | None = None  # argv template; "{name}" and "{index}" are filled in
    # runtime = "docker": the image the workers' (and the user's reaper's) commands run in,
    # from its own working directory (cwd is the host's); the local runtime ignores it.
    image: str | None = None
    reaper: Literal["builtin", "none"] | Argv = "builtin"
    # A queue whose workers reap (reaper = "none"): a command of the same queue that only
    # reaps and takes no job (BullMQ: a Worker that only runs stalled checks). A run never
    # starts it; certify runs it as the reaper of a battery scenario that stops every worker at
    # once, where otherwise nothing could recover a lease (docs/certify.md).
    standalone_reaper: Argv | None = None
    # How its reapers keep their promise: ``grid``, a sweep at least every reap interval
    # (a timer); ``loop``, once a consumer loop: sweep, drain what it can claim, park on the
    # queue's wake list at most reap_interval_ms, sweep again (EchoMQ.Consumer's rhythm,
    # beat_ms = reap_interval_ms). Under ``loop`` each loop's park to its next sweep is held to
    # the interval, its drain is measured, and each stranded lease to the first sweep after its
    # deadline (docs/sut.md, "Reaping once a loop").
    reap_rhythm: Literal["grid", "loop"] = "grid"
    # The user's own enqueue path: a long-running command fed a payload a line on stdin,
    # answering ``<ms> enqueue id=<id>`` for each (docs/sut.md, "Your own producer"), driven
    # at the scenario's rate by the built-in producer. Absent: the family's built-in one.
    producer: Argv | None = None
    dialect: SutDialect = "echomq"
    # How its processes log in: ``own-user``, each with an ACL user of its own named after it
    # (the recorder knows each call's process by it); ``default``, as the ``default`` user with
    # the run's password, for a client that can log in no other way (EchoMQ's connector): the
    # processes must then name their connections (CLIENT SETNAME) after themselves
    # (CHAOS_NAME, or CHAOS_NAME-<anything>), or their calls cannot be attributed.
    login: Literal["own-user", "default"] = "own-user"
    # Whose scripts and settings the processes run: ``toolkit``, the contract of docs/sut.md as
    # written (the exported scripts honour every setting); ``echomq``, the real EchoMQ's
    # (echo_mq): each setting mapped to EchoMQ's own, exactly, and a setting EchoMQ has no
    # equivalent for refused at validation (docs/echomq.md, "What maps to what").
    contract: Literal["toolkit", "echomq"] = "toolkit"
    # Where the commands run; relative to the scenario file when loaded from one.
    cwd: str = "."
    # How long a SUT process has to connect (a client with its ACL user in CLIENT LIST).
    start_timeout_s: Annotated[float, Field(gt=0, le=600)] = 30.0

    @model_validator(mode="after")
    def _consistent(self) -> Sut:
        if self.image is not None and self.workers is None:
            raise ValueError(f"image = {self.image!r}: the image runs the SUT's commands; set "
                             "workers = [argv...] (and reaper) too")
        for label, argv in (("workers", self.workers),
                            ("reaper", self.reaper if isinstance(self.reaper, list) else None),
                            ("standalone_reaper", self.standalone_reaper),
                            ("producer", self.producer)):
            for part in argv or []:
                stray = part.replace("{name}", "").replace("{index}", "")
                if "{" in stray or "}" in stray:
                    raise ValueError(f"{label} element {part!r}: the only placeholders are "
                                     f"{', '.join(PLACEHOLDERS)}")
        if self.contract == "echomq" and (self.workers is None or self.dialect != "echomq"):
            raise ValueError("contract = 'echomq': the real EchoMQ's workers (set workers = "
                             "[argv...]), whose calls the echomq dialect reads (dialect = "
                             f"{self.dialect!r})")
        if self.workers is None and self.reaper != "builtin":
            raise ValueError(f"reaper = {self.reaper!r}: the reference workers run with the "
                             "built-in reaper; set workers = [argv...] for a SUT of your own")
        if self.producer is not None and self.workers is None:
            raise ValueError(f"producer = {self.producer!r}: a producer of your own enqueues "
                             "for workers of your own; set workers = [argv...] too")
        if self.reap_rhythm == "loop" and self.workers is None:
            raise ValueError("reap_rhythm = 'loop': consumers of your own that reap once a "
                             "loop; the reference reaper sweeps on a grid (set workers = "
                             "[argv...])")
        if self.standalone_reaper is not None and self.reaper != "none":
            raise ValueError(f"standalone_reaper = {self.standalone_reaper!r}: for a queue "
                             "whose workers reap (reaper = 'none'); this one's reaper is "
                             f"{self.reaper!r}")
        return self

    @property
    def foreign(self) -> bool:
        """Is it the user's own implementation (not the reference one)?"""
        return self.workers is not None

    @property
    def own_reaper(self) -> list[str] | None:
        """The user's reaper command, if the SUT brings one."""
        return self.reaper if isinstance(self.reaper, list) else None


def fill(argv: list[str], name: str, index: int) -> list[str]:
    """An argv template for one process: ``{name}`` and ``{index}`` (from 1) filled in."""
    return [part.replace("{name}", name).replace("{index}", str(index)) for part in argv]
