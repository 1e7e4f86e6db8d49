"""A real PostgreSQL server for the run store's tests: Debian's ``postgresql`` package (its
``initdb`` and ``pg_ctl``), a cluster made in a temporary directory, listening on 127.0.0.1 at
a free port, and stopped (``pg_ctl stop -m immediate``) however the test ends.

PostgreSQL refuses to run as root: as root the cluster is made and run as the ``postgres``
user the package creates. Absent, the tests that need it skip with the reason; under
``CI=true``, where ``.ci/run`` installs it, its absence is a failure (as ``ci_tools`` does).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.runtime.valkey import free_port

START_TIMEOUT_S = 30


def postgres_installed() -> bool:
    """Whether Debian's PostgreSQL is here; absent under CI=true, a failure (.ci/run installs
    it). For a test that does more than the store: it runs its PostgreSQL part only then."""
    if glob.glob("/usr/lib/postgresql/*/bin/initdb"):
        return True
    if os.environ.get("CI") == "true":
        pytest.fail("CI=true but PostgreSQL is not installed (apt-get install postgresql)")
    return False


@contextlib.contextmanager
def fresh_database(server_url: str) -> Iterator[str]:
    """A database of its own on the server of ``server_url``, dropped afterwards: its URL."""
    import sqlalchemy as sa

    from chaos.store.database import engine_url

    name = f"store_{os.getpid()}_{free_port()}"
    admin = sa.create_engine(engine_url(server_url), isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield server_url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as connection:
            connection.execute(sa.text(f'DROP DATABASE "{name}" WITH (FORCE)'))
        admin.dispose()


def postgres_bin() -> Path:
    """The directory of Debian's PostgreSQL binaries; skip (fail under CI=true) without one."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    problem = ("PostgreSQL is not installed (apt-get install postgresql; .ci/run installs it, "
               "the README's set-up does not)")
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {problem}")
    pytest.skip(problem)


def _as_owner(argv: list[str]) -> list[str]:
    """Root runs the server as the ``postgres`` user; anyone else as themself."""
    if os.geteuid() != 0:
        return argv
    runuser = shutil.which("runuser")
    if runuser is None:
        pytest.skip("running as root without runuser: PostgreSQL cannot be started")
    return [runuser, "-u", "postgres", "--", *argv]


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    """``postgresql://postgres@127.0.0.1:PORT/postgres`` of a server started for the module."""
    bin_dir = postgres_bin()
    root = Path(tempfile.mkdtemp(prefix="echomq-chaos-pg-"))
    data = root / "data"
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    port = free_port()
    log = root / "server.log"
    try:
        subprocess.run(_as_owner([str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres",
                                  "--auth=trust", "-E", "UTF8", "--no-sync"]),
                       check=True, capture_output=True, timeout=120)
        options = f"-c listen_addresses=127.0.0.1 -p {port} -k {root} -c fsync=off"
        started = subprocess.run(_as_owner([str(bin_dir / "pg_ctl"), "-D", str(data), "-l",
                                            str(log), "-o", options, "-w", "-t",
                                            str(START_TIMEOUT_S), "start"]),
                                 capture_output=True, text=True, timeout=START_TIMEOUT_S + 10)
        if started.returncode != 0:
            tail = log.read_text()[-2000:] if log.exists() else started.stderr
            pytest.fail(f"PostgreSQL did not start: {tail}")
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        if (data / "postmaster.pid").exists():
            subprocess.run(_as_owner([str(bin_dir / "pg_ctl"), "-D", str(data), "-m",
                                      "immediate", "-w", "stop"]),
                           capture_output=True, timeout=60)
        shutil.rmtree(root, ignore_errors=True)
