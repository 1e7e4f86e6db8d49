"""What the Docker tests share: the engine fixture and the gate that skips them (or, with
ECHOMQ_CHAOS_REQUIRE_DOCKER=1 as CI sets it, fails them) where there is no engine, image or
Compose."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from chaos.errors import InfraError
from chaos.runtime.engine import connect_engine

ROOT = Path(__file__).resolve().parent.parent
REQUIRED = os.environ.get("ECHOMQ_CHAOS_REQUIRE_DOCKER") == "1"
HOW_TO_ENABLE = ("start a Docker engine (apt-get install docker.io; dockerd &), build the images "
                 "(echomq-chaos images build), and set ECHOMQ_CHAOS_REQUIRE_DOCKER=1 to make "
                 "their absence a failure")


def unavailable(reason: str) -> None:
    if REQUIRED:
        pytest.fail(f"Docker tests are required here (ECHOMQ_CHAOS_REQUIRE_DOCKER=1): {reason}")
    pytest.skip(f"Docker tests skipped: {reason}; to run them, {HOW_TO_ENABLE}")


@pytest.fixture(scope="module")
def engine() -> Iterator[docker.DockerClient]:
    try:
        client = connect_engine()
    except InfraError as error:
        unavailable(str(error))
    from chaos.runtime.engine import has_image
    from chaos.runtime.images import BASE_IMAGE, build_images

    if not has_image(client, BASE_IMAGE):
        unavailable(f"no base image {BASE_IMAGE}")
    # Current images: reused when present, the worker rebuilt if the sources changed since.
    build_images(say=lambda text: None)
    yield client
    client.close()


def docker_compose() -> str:
    compose = shutil.which("docker-compose")
    if compose is None:
        unavailable("docker-compose is not installed (apt-get install docker-compose)")
    assert compose is not None
    return compose
