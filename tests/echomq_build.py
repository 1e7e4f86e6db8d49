"""The real EchoMQ build the Elixir tests run on: ``ECHOMQ_BUILD`` (default
/opt/echomq-build/echo/_build/prod/lib, holding echo_data, echo_wire and echo_mq) and
``elixir`` on PATH; without them those tests skip, saying which is missing (no registry here
carries EchoMQ: docs/echomq.md says how the build was made)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

BUILD = Path(os.environ.get("ECHOMQ_BUILD", "/opt/echomq-build/echo/_build/prod/lib"))


def require_echomq_build() -> None:
    if shutil.which("elixir") is None:
        pytest.skip("elixir is not on PATH (the real EchoMQ runs on it)")
    missing = [app for app in ("echo_data", "echo_wire", "echo_mq")
               if not (BUILD / app / "ebin").is_dir()]
    if missing:
        pytest.skip(f"no EchoMQ build at {BUILD} (ECHOMQ_BUILD): {', '.join(missing)} missing")
