"""``echomq-chaos protocol export DIR``: the protocol's recording scripts (docs/design.md §2) for
a foreign worker that prefers the ``scripts`` history source (docs/sut.md).

It writes the sound scripts of ``chaos/protocol/lua/`` as they are (byte for byte, so their SHA1
is the one the ``echomq`` dialect knows) and ``README.md``: what each takes (KEYS, ARGV), read
from each script's own header comment, so the note cannot drift from the code.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

MUTANT_MARK = "-- MUTANT"  # the header of a deliberately broken variant: never exported


class ExportError(Exception):
    """The target cannot be written (exit 2)."""


def recording_scripts() -> dict[str, str]:
    """The sound scripts, by file name: their source text."""
    folder = resources.files("chaos.protocol").joinpath("lua")
    scripts = {entry.name: entry.read_text() for entry in folder.iterdir()
               if entry.name.endswith(".lua")}
    return {name: text for name, text in sorted(scripts.items())
            if not text.startswith(MUTANT_MARK)}


def header(text: str) -> list[str]:
    """A script's leading comment, without its ``--`` marks."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        lines.append(line.removeprefix("--").removeprefix(" "))
    return lines


def readme(scripts: dict[str, str]) -> str:
    parts = [
        "# The EchoMQ protocol's recording scripts",
        "",
        "Written by `echomq-chaos protocol export`. Each transition is one script, loaded with",
        "SCRIPT LOAD and called with EVALSHA (or EVAL). Each reads `TIME` itself and appends its",
        "event to the `<prefix>{<queue>}:events` stream in the same call, which is the history",
        "the `scripts` source reads: call them with the recording flag left out (or anything but",
        "`'0'`). The keys: `<prefix>{<queue>}:pending`, `:active`, `:events`, `:dead` and the",
        "job hashes `<prefix>{<queue>}:job:<id>` (ARGV's job key prefix is",
        "`<prefix>{<queue>}:job:`). Contract and payload: docs/sut.md in echomq-chaos.",
        "",
    ]
    for name, text in scripts.items():
        parts += [f"## {name}", "", "```text", *header(text), "```", ""]
    return "\n".join(parts)


def export(directory: Path) -> list[Path]:
    """Write the scripts and README.md into ``directory`` (created if absent); the paths."""
    if directory.exists() and not directory.is_dir():
        raise ExportError(f"{directory}: exists and is not a directory")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        scripts = recording_scripts()
        written = []
        for name, text in scripts.items():
            (directory / name).write_text(text)
            written.append(directory / name)
        (directory / "README.md").write_text(readme(scripts))
    except OSError as error:
        raise ExportError(f"{directory}: cannot write: {error.strerror or error}") from None
    return [*written, directory / "README.md"]
