"""The Docker engine as the toolkit uses it: one connection, the labels every container carries,
and which image stands for each role (official, else the offline stand-in, else a pull).

Shared by the Docker runtime, ``echomq-chaos images`` and ``echomq-chaos clean``. Every engine
failure becomes an ``InfraError`` (exit 3) that says what to do about it.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any

import docker
import docker.errors
from docker.models.containers import Container
from docker.models.images import Image

from chaos.errors import InfraError
from chaos.runtime.pids import boot_id, start_ticks

# Every container the toolkit starts carries LABEL_TOOL; a run's also carry LABEL_RUN=<run id>.
LABEL_TOOL = "echomq-chaos"
LABEL_RUN = "echomq-chaos.run"
LABEL_ROLE = "echomq-chaos.role"  # valkey, toxiproxy, reaper, worker-1, ...
LABEL_SOURCE = "echomq-chaos.source"  # on built images: hash of the sources they were built from
LABEL_RUNNER = "echomq-chaos.run.runner"  # "<pid>:<start time>" of the process that started it
ENGINE_TIMEOUT_S = 60


def engine_address() -> str:
    return os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")


def connect_engine() -> docker.DockerClient:
    """A client whose engine answered a ping, or InfraError naming the address and the fix."""
    try:
        client = docker.from_env(timeout=ENGINE_TIMEOUT_S)
        client.ping()
    except docker.errors.DockerException as error:
        raise InfraError(
            f"no Docker engine answering at {engine_address()} ({_first_line(error)}); "
            "start one (e.g. `dockerd &` as root after `apt-get install docker.io`) or set "
            "DOCKER_HOST, or use the local runtime (runtime = \"local\")") from None
    return client


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def labelled(client: docker.DockerClient, run_id: str | None = None) -> list[Container]:
    """The toolkit's containers (running or not): all of them, or one run's."""
    label = f"{LABEL_RUN}={run_id}" if run_id else LABEL_TOOL
    for _ in range(5):
        try:
            found: list[Container] = client.containers.list(all=True, filters={"label": label})
            return found
        except docker.errors.NotFound:
            continue  # one went between the listing and its inspection: list again
        except docker.errors.DockerException as error:
            raise InfraError(f"listing containers labelled {label}: "
                             f"{_first_line(error)}") from None
    raise InfraError(f"listing containers labelled {label}: they keep disappearing")


def remove_containers(containers: list[Container]) -> list[str]:
    """Force-remove containers (paused ones are thawed first); the names removed. Best effort:
    one that is already gone is not an error."""
    removed = []
    for container in containers:
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
            if container.status == "paused":
                container.unpause()
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as error:
            raise InfraError(f"removing container {container.name}: "
                             f"{_first_line(error)}") from None
        removed.append(container.name)
    return removed


def runner_label(pid: int | None = None) -> str:
    """``pid:start-ticks:boot-id`` of a runner: tells a live runner from a recycled pid."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}:{start_ticks(pid)}:{boot_id()}"


def runner_alive(label: str | None) -> bool:
    """Is the very process that started a container still running (same pid, start, boot)?"""
    pid, _, rest = (label or "").partition(":")
    return pid.isdigit() and "None" not in rest and runner_label(int(pid)) == label


def leftovers(client: docker.DockerClient, everything: bool = False) -> list[Container]:
    """Containers whose runner is gone (a killed or crashed run); all of them if ``everything``."""
    return [container for container in labelled(client)
            if everything or not runner_alive(container.labels.get(LABEL_RUNNER))]


def clean_containers(everything: bool = False) -> list[str]:
    """``echomq-chaos clean``'s container part: what it removed, or why it did nothing."""
    try:
        client = connect_engine()
    except InfraError as error:
        return [f"containers: skipped, {error}"]
    try:
        removed = remove_containers(leftovers(client, everything))
    finally:
        client.close()
    return [f"container {name}: removed" for name in removed]


def find_image(client: docker.DockerClient, name: str) -> Image | None:
    """The engine's image ``name``, None if it has none (one inspect)."""
    try:
        return client.images.get(name)
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.DockerException as error:
        raise InfraError(f"inspecting image {name}: {_first_line(error)}") from None


def has_image(client: docker.DockerClient, name: str) -> bool:
    return find_image(client, name) is not None


def image_label(image: Image | None, label: str) -> str | None:
    labels: dict[str, str] = (image.labels or {}) if image is not None else {}
    return labels.get(label)


@dataclass(frozen=True)
class ResolvedImage:
    role: str  # valkey, toxiproxy, worker
    name: str  # what containers are started from
    source: str  # "local" (already present), "offline stand-in", or "pulled"
    id: str

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "id": self.id}


def resolve_image(client: docker.DockerClient, role: str, official: str,
                  offline: str | None) -> ResolvedImage:
    """The image for ``role``: ``official`` if present, else the offline stand-in if present,
    else ``official`` pulled. Machines without a registry build the stand-ins beforehand."""
    for name, source in ((official, "local"), (offline, "offline stand-in")):
        found = find_image(client, name) if name else None
        if name and found is not None:
            return ResolvedImage(role, name, source, found.short_id)
    try:
        image = client.images.pull(official)
    except docker.errors.DockerException as error:
        stand_in = f" nor its offline stand-in {offline}" if offline else ""
        raise InfraError(
            f"{role} image {official}: not present{stand_in}, and pulling it failed "
            f"({_first_line(error)}); on a machine without a registry run "
            "`echomq-chaos images build` first") from None
    return ResolvedImage(role, official, "pulled", image.short_id)
