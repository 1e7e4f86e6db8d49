"""The documentation's examples, found and run (the convention: docs/contributing.md).

Every fenced block in README.md and docs/*.md names its language. ``text`` and ``json`` blocks
show output or a file's shape and are not run. ``sh``, ``python`` and ``toml`` blocks are
examples: each runs as written, unless the line just before its fence is
``<!-- illustrative: REASON -->`` (then each ``echomq-chaos`` command in it is still parsed by
the command line, so a renamed option breaks it too).

How an example runs, in a scratch directory that holds ``scenarios`` (a link to the repository's)
and the page's earlier blocks' leftovers (a page's blocks run in order, so a block may re-check
a run directory an earlier block made):

- ``sh``: the block as one ``bash -euo pipefail`` script, the virtualenv's ``bin`` first on PATH;
  it must exit 0;
- ``python``: the block as a pytest file; its tests must pass;
- ``toml``: the block as a scenario file; ``echomq-chaos validate`` must accept it.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHOWN = ("text", "json")  # output or a file's shape: not run
EXAMPLES = ("sh", "python", "toml")
MARKER = re.compile(r"^<!--\s*illustrative:\s*(?P<reason>.*?)\s*-->\s*$")
FENCE = re.compile(r"^```(?P<lang>\S*)\s*$")
TIMEOUT_S = 180.0


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # the opening fence, 1-based
    lang: str
    body: str
    illustrative: str | None  # the marker's reason; None: run it

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page}" \
               f":{self.line}"

    @property
    def runs(self) -> bool:
        return self.lang in EXAMPLES and self.illustrative is None


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of a page, with the illustrative marker just before each, if any."""
    lines = page.read_text(encoding="utf-8").split("\n")
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and lines[end].rstrip() != "```":
            end += 1
        if end == len(lines):
            raise ValueError(f"{page}:{index + 1}: a fenced block is never closed")
        marker = MARKER.match(lines[index - 1]) if index > 0 else None
        found.append(Block(page, index + 1, opening["lang"], "\n".join(lines[index + 1:end]),
                           None if marker is None else marker["reason"]))
        index = end + 1
    return found


def problems(block: Block) -> list[str]:
    """What breaks the convention (checked for every block, run or not)."""
    if block.lang not in SHOWN + EXAMPLES:
        return [f"{block.where}: fenced block without a known language ({block.lang!r}): tag it "
                f"{', '.join(SHOWN + EXAMPLES)}"]
    if block.illustrative is not None and not block.illustrative:
        return [f"{block.where}: an illustrative marker needs a reason"]
    if block.illustrative is not None and block.lang in SHOWN:
        return [f"{block.where}: a {block.lang} block is never run; drop its marker"]
    return []


def commands(body: str) -> list[str]:
    """A shell block's command lines: continuations joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", body)
    found = []
    for line in joined.split("\n"):
        words = shlex.split(line, comments=True)
        if words:
            found.append(shlex.join(words))
    return found


def cli_usage_errors(block: Block) -> list[str]:
    """Each ``echomq-chaos`` command of a shell block, parsed (not run) by the CLI's parser."""
    from chaos.cli import build_parser

    errors = []
    for command in commands(block.body):
        words = shlex.split(command)
        if words[0] != "echomq-chaos":
            continue
        try:
            build_parser().parse_args(words[1:])
        except SystemExit as exit_:
            if exit_.code:
                errors.append(f"{block.where}: {command!r} is not a valid command line")
    return errors


def scratch(directory: Path) -> Path:
    """A place to run a page's examples: ``scenarios`` as in the repository, the rest fresh."""
    directory.mkdir(parents=True, exist_ok=True)
    link = directory / "scenarios"
    if not link.exists():
        link.symlink_to(ROOT / "scenarios", target_is_directory=True)
    return directory


def run(block: Block, workdir: Path, number: int) -> subprocess.CompletedProcess[str]:
    """Run one example as written in ``workdir``; the caller asserts on the returncode."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("PYTEST_ADDOPTS", None)
    if block.lang == "sh":
        argv = ["bash", "-euo", "pipefail", "-c", block.body]
    elif block.lang == "python":
        test_file = workdir / f"test_doc_example_{number}.py"
        test_file.write_text(block.body + "\n", encoding="utf-8")
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                "--rootdir", str(workdir), str(test_file)]
    elif block.lang == "toml":
        scenario = workdir / f"doc-example-{number}.toml"
        scenario.write_text(block.body + "\n", encoding="utf-8")
        argv = [sys.executable, "-m", "chaos", "validate", str(scenario)]
    else:
        raise ValueError(f"{block.where}: a {block.lang} block is not run")
    return subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S)
