"""Shared fixtures: a real valkey-server per test module (never a fake)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from chaos.protocol.client import QueueClient, QueueKeys, redis_client
from chaos.runtime.valkey import ValkeyServer, valkey_server_binary

_queue_names = itertools.count(1)


@pytest.fixture(scope="module")
def valkey_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ValkeyServer]:
    root: Path = tmp_path_factory.mktemp("valkey")
    server = ValkeyServer(valkey_server_binary(None), root / "data", root / "valkey.log")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def raw_client(valkey_server: ValkeyServer) -> Iterator[redis.Redis]:
    client = redis_client(valkey_server.url, password=valkey_server.password,
                                    decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def queue(raw_client: redis.Redis) -> QueueClient:
    """A client on a fresh queue name, so tests sharing a server never see each other's keys."""
    return QueueClient(raw_client, QueueKeys("test:", f"q{next(_queue_names)}"))


@pytest.fixture
def bullmq_installed() -> None:
    """Node and sut/bullmq's modules, checked when the test runs (never when it is collected,
    so a test's skip and its run agree even if `npm ci` ran in between); absent: skip with the
    reason, or fail under CI=true, where .ci/run installs them."""
    from chaos.queues.bullmq.load import BullMQUnavailable, require_installed

    try:
        require_installed()
    except BullMQUnavailable as problem:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but BullMQ cannot run: {problem}")
        pytest.skip(str(problem))


@pytest.fixture
def celery_installed() -> Path:
    """sut/celery's own environment (.ci/run makes sut/celery/.venv from its requirements),
    checked when the test runs; absent: skip with the reason, or fail under CI=true."""
    folder = Path(__file__).resolve().parent.parent / "sut" / "celery"
    python = folder / ".venv" / "bin" / "python"
    problem = None if python.exists() else (
        f"{python} is missing: python3 -m venv sut/celery/.venv && "
        "sut/celery/.venv/bin/pip install -r sut/celery/requirements.txt")
    if problem is not None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but Celery cannot run: {problem}")
        pytest.skip(problem)
    return folder
