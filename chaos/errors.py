"""Errors every stage may raise, and the exit codes the commands map them to.

Exit codes: 0 pass, 1 fail (an invariant broken), 2 bad input (scenario, arguments, run
directory), 3 infrastructure (a server that would not start, a child that died), 4 unknown (no
invariant broken, but jobs were still pending or leased when the drain ended: the checker cannot
tell a pass from a loss; or evidence an invariant needs is missing), 5 checker error (a judge of
the checker's raised: a bug of the toolkit's, not the queue's; the traceback is in the run
directory), 130 aborted (Ctrl-C, or the runner stopped before it could judge).
"""

from __future__ import annotations

EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_INFRA, EXIT_UNKNOWN, EXIT_ABORTED = 0, 1, 2, 3, 4, 130
EXIT_CHECKER = 5


class InfraError(Exception):
    """Infrastructure failed (exit code 3): a server that would not start, a child that died."""


def exit_code_for(verdict_word: str) -> int:
    """pass 0, fail 1, unknown 4, checker_error 5, aborted 130, anything else (error) 3."""
    return {"pass": EXIT_PASS, "fail": EXIT_FAIL, "unknown": EXIT_UNKNOWN,
            "checker_error": EXIT_CHECKER, "aborted": EXIT_ABORTED}.get(
        verdict_word, EXIT_INFRA)
