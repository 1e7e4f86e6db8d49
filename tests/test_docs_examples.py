"""Every command block and Python example in README.md and docs/*.md works as written, or is
marked illustrative with a reason (docs/contributing.md; the runner: doc_examples.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from doc_examples import Block, blocks, cli_usage_errors, pages, problems, run, scratch

ALL = [block for page in pages() for block in blocks(page)]
RUNNABLE_PAGES = sorted({block.page for block in ALL if block.runs})


def test_every_block_says_what_it_is_and_every_illustrative_one_why():
    assert ALL and RUNNABLE_PAGES  # the runner found the pages and something to run
    found = [problem for block in ALL for problem in problems(block)]
    assert not found, "\n".join(found)


def test_illustrative_commands_are_still_valid_command_lines():
    found = [error for block in ALL if block.lang == "sh" and block.illustrative
             for error in cli_usage_errors(block)]
    assert not found, "\n".join(found)


def test_the_runner_fails_a_broken_example(tmp_path: Path):
    """The checks above and below can fail: a page with each kind of mistake."""
    page = tmp_path / "page.md"
    page.write_text("\n".join([
        "```", "untagged", "```",
        "<!-- illustrative: -->", "```sh", "echo no reason", "```",
        "<!-- illustrative: a renamed option -->", "```sh",
        "echomq-chaos run scenarios/kill-worker.toml --no-such-option", "```",
        "```sh", "echomq-chaos validate scenarios/no-such-file.toml", "```",
        "```python", "def test_x():", "    assert False", "```",
        "```toml", 'name = "x"', "[topology]", "workers = 0", "```",
    ]) + "\n")
    found = blocks(page)
    assert [len(problems(block)) for block in found] == [1, 1, 0, 0, 0, 0]
    assert cli_usage_errors(found[2]) and not cli_usage_errors(found[3])
    workdir = scratch(tmp_path / "scratch")
    for number, block in enumerate(found[3:], start=1):
        result = run(block, workdir, number)
        assert result.returncode != 0, (block.where, result.stdout, result.stderr)


@pytest.mark.integration
@pytest.mark.parametrize("page", RUNNABLE_PAGES, ids=lambda page: page.name)
def test_the_examples_of_a_page_run_as_written(page: Path, tmp_path: Path):
    workdir = scratch(tmp_path / "scratch")
    runnable: list[Block] = [block for block in blocks(page) if block.runs]
    for number, block in enumerate(runnable, start=1):
        result = run(block, workdir, number)
        assert result.returncode == 0, (
            f"{block.where} ({block.lang}) exited {result.returncode}:\n{block.body}\n"
            f"--- stdout\n{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-3000:]}")

