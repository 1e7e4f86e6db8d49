"""Tools only ``.ci/run`` installs (redis-benchmark from redis-tools, chromium; Docker,
debootstrap and docker-compose have their own gate in ``docker_support.py``). The README's two
commands install none of them, so on a fresh machine a test that needs one skips and says which
and how to get it; under ``CI=true``, where ``.ci/run`` installs them, its absence is a failure
(as ``test_sut_node.py`` treats node)."""

from __future__ import annotations

import os
import shutil

import pytest


def require_tool(tool: str, package: str) -> str:
    """The path of ``tool``; absent, skip with the reason (fail under CI=true)."""
    path = shutil.which(tool)
    if path is not None:
        return path
    problem = (f"{tool} is not on PATH (apt-get install {package}; .ci/run installs it, the "
               "README's set-up does not)")
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {problem}")
    pytest.skip(problem)
