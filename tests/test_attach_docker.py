"""runtime = "attach" with the docker driver across two Docker engines on this one host
(docs/attach.md): the machine's engine and a second dockerd this module starts with its own
socket, data root, exec root and pid file (host networking, no bridge, no iptables), stopped
afterwards. The test, not the run, deploys the Node example SUT (`echomq-chaos/node-echomq`,
built offline by `echomq-chaos images build`) as containers split over both engines, found by
name on one and by labels on the other. On the second engine the same program runs from this
host's files, bind-mounted read-only into an image holding only the merged-/usr links (copying
the 260 MB image there by `docker save | docker load` took most of a minute of every suite).
The run really `docker kill`s and `docker pause`s them: kill and pause pass, the broken workers
fail, nothing is left paused, and a killed container is started again at the end. Skipped
without an engine or the image, failed instead under ECHOMQ_CHAOS_REQUIRE_DOCKER=1."""

from __future__ import annotations

import contextlib
import io
import secrets
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import docker.errors
import docker_support
import pytest
from attach_support import (
    KILL,
    MEMBERS,
    PAUSE,
    actions,
    deployment_env,
    figures,
    nothing_left_applied,
    report,
    run_cli,
    scenario_file,
    wait_until,
)
from docker.models.containers import Container
from docker_support import unavailable

from chaos.lifeline import die_with_parent
from chaos.protocol.client import redis_client
from chaos.runtime.engine import engine_address, find_image
from chaos.runtime.images import NODE_SUT_IMAGE as NODE_IMAGE
from chaos.runtime.valkey import ValkeyServer

REPO = Path(__file__).resolve().parent.parent
NODE_SUT = REPO / "sut" / "node-echomq"  # it reads the scripts from the repo's chaos/protocol/lua
HOST_ROOT_IMAGE = "echomq-chaos-test/host-usr:latest"  # the second engine's: links into /usr

pytestmark = pytest.mark.integration
engine = docker_support.engine  # the fixture, under its own name
# Where each member runs: engine "a" (this machine's) or "b" (the second one), found by its
# container's name or by labels.
PLACEMENT = {"worker-1": ("a", "name"), "worker-2": ("b", "labels"),
             "worker-3": ("a", "labels"), "reaper": ("b", "name")}


@pytest.fixture(scope="module")
def engines(engine: docker.DockerClient) -> Iterator[dict[str, tuple[str, docker.DockerClient]]]:
    """{"a": this machine's engine, "b": a second dockerd started here}, each (url, client);
    the first runs the Node example's image, the second an image of the merged-/usr links
    only (``host_usr_rootfs``), the program bind-mounted from this host."""
    image = find_image(engine, NODE_IMAGE)
    if image is None:
        unavailable(f"no image {NODE_IMAGE} (echomq-chaos images build makes it, with node "
                    "and sut/node-echomq's npm ci)")
    if not (NODE_SUT / "node_modules").is_dir():
        unavailable("sut/node-echomq has no node_modules (npm ci there, as .ci/run does): the "
                    "second engine's containers run it from this host")
    dockerd = shutil.which("dockerd")
    if dockerd is None:
        unavailable("no dockerd binary to start a second engine (install Debian's Docker "
                    "engine package, as .ci/run does)")
    assert image is not None and dockerd is not None
    # Short: containerd's socket lives under the exec root, and a unix socket path is <108 bytes
    root = Path(tempfile.mkdtemp(prefix="emqc-b-", dir="/tmp"))
    url = f"unix://{root}/docker.sock"
    with (root / "dockerd.log").open("wb") as log:
        process = subprocess.Popen(
            [dockerd, "--data-root", str(root / "data"), "--exec-root", str(root / "exec"),
             "--pidfile", str(root / "docker.pid"), "-H", url, "--bridge=none",
             "--iptables=false", "--ip-masq=false"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, preexec_fn=die_with_parent)
    second: docker.DockerClient | None = None
    try:
        deadline = time.monotonic() + 60
        while second is None:
            with contextlib.suppress(docker.errors.DockerException):
                client = docker.DockerClient(base_url=url, timeout=120)
                client.ping()
                second = client
            if second is None:
                if process.poll() is not None or time.monotonic() > deadline:
                    unavailable("a second dockerd did not come up: "
                                + (root / "dockerd.log").read_text()[-800:])
                time.sleep(0.2)
        second.api.import_image_from_data(host_usr_rootfs(), repository=HOST_ROOT_IMAGE)
        if find_image(second, HOST_ROOT_IMAGE) is None:
            unavailable(f"the second engine did not keep {HOST_ROOT_IMAGE} after docker import")
        yield {"a": (engine_address(), engine), "b": (url, second)}
    finally:
        if second is not None:
            for container in second.containers.list(all=True):
                with contextlib.suppress(docker.errors.DockerException):
                    container.remove(force=True)
            second.close()
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        for mount in Path("/proc/mounts").read_text().splitlines():
            point = mount.split()[1]
            if point.startswith(str(root)):
                subprocess.run(["umount", "-l", point], check=False)
        shutil.rmtree(root, ignore_errors=True)


def host_usr_rootfs() -> bytes:
    """A root filesystem of the merged-/usr links only (bin, lib, lib64, sbin -> usr/...):
    with this host's /usr bind-mounted, a container runs the host's node."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for link in ("bin", "lib", "lib64", "sbin"):
            entry = tarfile.TarInfo(link)
            entry.type, entry.linkname = tarfile.SYMTYPE, f"usr/{link}"
            tar.addfile(entry)
        for directory in ("usr", "tmp", "etc"):
            entry = tarfile.TarInfo(directory)
            entry.type, entry.mode = tarfile.DIRTYPE, 0o1777 if directory == "tmp" else 0o755
            tar.addfile(entry)
    return buffer.getvalue()


class Containers:
    """The Node example SUT deployed as containers by the test, split over two engines: each
    member logs in as an ACL user of its own; host networking reaches the test's server."""

    def __init__(self, engines: dict[str, tuple[str, docker.DockerClient]],
                 server: ValkeyServer, queue: str) -> None:
        self.engines, self.server, self.queue = engines, server, queue
        self.token = secrets.token_hex(4)
        self.url = f"redis://127.0.0.1:{server.port}"
        self.admin = redis_client(server.url, password=server.password, decode_responses=True)
        self.containers: dict[str, Container] = {}

    def start(self, worker_break: str = "") -> None:
        server, queue, engines = self.server, self.queue, self.engines
        for name in MEMBERS:
            password = secrets.token_hex(12)
            self.admin.execute_command("ACL", "SETUSER", name, "reset", "on", f">{password}",
                                       "~*", "&*", "+@all")
            url = f"redis://{name}:{password}@127.0.0.1:{server.port}"
            script = "reaper.js" if name == "reaper" else "worker.js"
            argv = ["node", script, *(["--break", worker_break]
                                      if worker_break and script == "worker.js" else [])]
            where = PLACEMENT[name][0]
            _, client = engines[where]
            # engine b: the host's node, and this repo (sut/node-echomq after its npm ci, the
            # scripts it loads), read-only
            from_host = {} if where == "a" else {
                "volumes": {"/usr": {"bind": "/usr", "mode": "ro"},
                            str(REPO): {"bind": str(REPO), "mode": "ro"}},
                "working_dir": str(NODE_SUT)}
            self.containers[name] = client.containers.run(
                NODE_IMAGE if where == "a" else HOST_ROOT_IMAGE, argv, detach=True,
                name=f"attach-{self.token}-{name}", network_mode="host",
                environment=deployment_env(name, url, queue),
                labels={"attach-test": self.token, "member": name}, **from_host)
        wait_until(self.connected, "every member connected as its own user")

    def connected(self) -> bool:
        users = {client.get("user") for client in self.admin.client_list()}
        return all(name in users for name in self.containers)

    def members(self) -> str:
        lines = []
        for name in MEMBERS:
            where, how = PLACEMENT[name]
            found = (f'container = "{self.containers[name].name}"' if how == "name" else
                     f'labels = {{ attach-test = "{self.token}", member = "{name}" }}')
            lines.append(f'[[attach.members]]\nname = "{name}"\nrole = '
                         f'"{"reaper" if name == "reaper" else "worker"}"\ndriver = "docker"\n'
                         f'engine = "{self.engines[where][0]}"\n{found}\n')
        return "".join(lines)

    def status(self) -> dict[str, str]:
        for container in self.containers.values():
            container.reload()
        return {name: str(container.status) for name, container in self.containers.items()}

    def started_at(self, name: str) -> str:
        self.containers[name].reload()
        return str(self.containers[name].attrs["State"]["StartedAt"])

    def drained(self) -> bool:
        from chaos.protocol.client import QueueClient, QueueKeys

        return QueueClient(self.admin, QueueKeys("emq:", self.queue)).backlog() == (0, 0)

    def close(self) -> None:
        for _, client in self.engines.values():  # by label: also one whose start failed
            for container in client.containers.list(
                    all=True, filters={"label": f"attach-test={self.token}"}):
                with contextlib.suppress(docker.errors.DockerException):
                    container.remove(force=True)
        if self.containers:
            self.admin.execute_command("ACL", "DELUSER", *self.containers)
        self.admin.close()


@pytest.fixture
def deploy(engines: dict[str, tuple[str, docker.DockerClient]],
           valkey_server: ValkeyServer) -> Iterator[Callable[..., Containers]]:
    made: list[Containers] = []

    def make(queue: str, worker_break: str = "") -> Containers:
        made.append(Containers(engines, valkey_server, queue))  # torn down however far
        made[-1].start(worker_break)                               # its start gets
        return made[-1]

    yield make
    for deployment in made:
        deployment.close()


def test_attached_containers_on_two_engines_pass_a_pause_then_a_kill(
        deploy: Callable[..., Containers], tmp_path: Path):
    deployment = deploy("docker-attached")
    pause = scenario_file(tmp_path / "pause.toml", "attach-docker-pause", deployment.url,
                          "docker-attached", deployment.members(), PAUSE)
    done = run_cli("run", str(pause), "--out", str(tmp_path / "pause"),
                   password=deployment.server.password, timeout=180)
    print(figures(done))
    assert done.returncode == 0, done.stderr[-3000:]
    b_url = deployment.engines["b"][0]
    worker_2 = deployment.containers["worker-2"].name
    assert [(a["action"], a["how"]) for a in actions(tmp_path / "pause")] == [
        ("pause", f"docker -H {b_url} pause {worker_2}"),
        ("resume", f"docker -H {b_url} unpause {worker_2}")]
    nothing_left_applied(tmp_path / "pause")
    assert set(deployment.status().values()) == {"running"}
    seen = report(tmp_path / "pause")["run"]["runtime"]["members"]
    assert {member["engine"] for member in seen.values()} == {
        deployment.engines["a"][0], b_url}  # several engines in one run

    # A second run: nothing left paused; its kill really kills, and the killed container is
    # started again once the run is over.
    wait_until(deployment.drained, "the first run's jobs drained")
    before = {name: deployment.started_at(name) for name in MEMBERS}
    kill = scenario_file(tmp_path / "kill.toml", "attach-docker-kill", deployment.url,
                         "docker-attached", deployment.members(), KILL)
    done = run_cli("run", str(kill), "--out", str(tmp_path / "kill"),
                   password=deployment.server.password, timeout=180)
    print(figures(done))
    assert done.returncode == 0, done.stderr[-3000:]
    done_actions = actions(tmp_path / "kill")
    assert [a["action"] for a in done_actions] == ["kill", "restart"]
    victim = done_actions[0]["member"]
    assert done_actions[0]["how"].endswith(f" kill {deployment.containers[victim].name}")
    final = report(tmp_path / "kill")["run"]
    assert final["faults"][0]["worker"] == victim
    nothing_left_applied(tmp_path / "kill")
    assert set(deployment.status().values()) == {"running"}
    assert deployment.started_at(victim) != before[victim]  # killed, then started again
    assert all(deployment.started_at(name) == before[name] for name in MEMBERS
               if name != victim)
    wait_until(deployment.connected, f"{victim} connected again")


def test_attached_containers_with_the_unfenced_complete_break_fail(
        deploy: Callable[..., Containers], tmp_path: Path):
    deployment = deploy("docker-broken", worker_break="unfenced-complete")
    path = scenario_file(tmp_path / "broken.toml", "attach-docker-broken", deployment.url,
                         "docker-broken", deployment.members(), PAUSE)
    done = run_cli("run", str(path), "--out", str(tmp_path / "broken"),
                   password=deployment.server.password, timeout=180)
    print(figures(done))
    assert done.returncode == 1, done.stderr[-3000:]
    assert "[FAIL] no_double_completion" in done.stderr
    nothing_left_applied(tmp_path / "broken")
    assert set(deployment.status().values()) == {"running"}
