"""Network links (docs/design.md §3): which Toxiproxy server a run uses, and the per-process
proxies on it.

Every proxied process (each worker, optionally the reaper) reaches Valkey through a proxy of its
own, named after it, so a network fault can target one process. Proxies and toxics are created
through ``toxiproxy-python`` whichever server answers: a real ``toxiproxy-server`` (found on PATH
or given as a path), an existing server's API (``toxiproxy.url``), or the built-in compatible
server (``chaos.network.server``). The report names which one, with its ``/version``.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from chaos.lifeline import toolkit_python
from chaos.scenario.model import ToxiproxySettings

if TYPE_CHECKING:  # toxiproxy-python pulls in requests: imported only by a run that uses it
    from toxiproxy.proxy import Proxy

API_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class ToxicSpec:
    """One Toxiproxy toxic, as its HTTP API takes it."""

    name: str
    type: str
    stream: str
    attributes: dict[str, int | float]
    toxicity: float = 1.0


class NetworkError(Exception):
    """The Toxiproxy server could not be started, reached, or asked to do something."""


@dataclass(frozen=True)
class ToxiproxyServerInfo:
    kind: str  # "toxiproxy-server" (the real one), "builtin", or "external" (toxiproxy.url)
    api_url: str
    version: str
    command: list[str] | None = None  # how it was started; None when it was already running


def server_command(settings: ToxiproxySettings, port: int) -> tuple[str, list[str]]:
    """(kind, argv) of the Toxiproxy server to start for ``settings`` on 127.0.0.1:``port``."""
    if settings.server == "builtin":
        real = None
    elif settings.server == "auto":
        real = shutil.which("toxiproxy-server")
    else:
        real = shutil.which(settings.server)
        if real is None:
            raise NetworkError(f"toxiproxy.server = {settings.server!r}: not an executable file")
    if real:
        return "toxiproxy-server", [real, "-host", "127.0.0.1", "-port", str(port)]
    return "builtin", toolkit_python("-m", "chaos.network.server", "--host", "127.0.0.1",
                                     "--port", str(port))


def api_version(api_url: str, timeout: float = API_TIMEOUT_S) -> str:
    """``GET /version``: a JSON ``{"version": …}`` (2.6+) or plain text (older servers)."""
    with urllib.request.urlopen(f"{api_url}/version", timeout=timeout) as response:
        body = response.read().decode(errors="replace").strip()
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        return str(json.loads(body)["version"])
    return body


def wait_for_api(api_url: str, alive: Callable[[], bool], timeout: float = 15.0) -> str:
    """Poll until the API answers; fail early if the server process died."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if not alive():
            raise NetworkError(f"the Toxiproxy server for {api_url} exited during start-up")
        try:
            return api_version(api_url, timeout=1.0)
        except (OSError, urllib.error.URLError) as error:
            last_error = error
            time.sleep(0.05)
    raise NetworkError(f"Toxiproxy API {api_url} not answering after {timeout:.0f}s: {last_error}")


def populate(api_url: str, proxies: list[dict[str, object]]) -> None:
    """``POST /populate``: create the proxies, or update those that exist (idempotent by name)."""
    request = urllib.request.Request(f"{api_url}/populate", data=json.dumps(proxies).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=API_TIMEOUT_S) as response:
            response.read()
    except (OSError, urllib.error.URLError) as error:
        detail = error.read().decode(errors="replace") if isinstance(
            error, urllib.error.HTTPError) else str(error)
        raise NetworkError(f"POST {api_url}/populate: {detail}") from None


class Links:
    """The proxies of one run on one Toxiproxy server. ``close()`` deletes every one it made."""

    def __init__(self, api_url: str, name_prefix: str = "") -> None:
        from toxiproxy import Toxiproxy  # see the imports above

        parts = urlsplit(api_url)
        self.api_url = api_url
        self.client = Toxiproxy()
        # toxiproxy-python keeps the API address in a class attribute: one server per process.
        self.client.update_api_consumer(parts.hostname or "127.0.0.1", parts.port or 8474)
        self.name_prefix = name_prefix  # keeps our proxies apart on a shared server
        self.proxies: dict[str, Proxy] = {}

    def create(self, name: str, upstream: str) -> str:
        """A proxy for ``name`` to ``upstream``; returns the HOST:PORT it listens on."""
        proxy_name = self.name_prefix + name
        try:
            proxy = self.client.create(upstream=upstream, name=proxy_name,
                                       listen="127.0.0.1:0")
        except Exception as error:  # toxiproxy-python raises bare Exception subclasses
            raise NetworkError(f"creating proxy {proxy_name} -> {upstream}: {error}") from None
        self.proxies[name] = proxy
        return str(proxy.listen)

    def _proxy(self, name: str) -> Proxy:
        try:
            return self.proxies[name]
        except KeyError:
            raise NetworkError(f"no proxy for {name!r}: it does not reach Valkey through "
                               "Toxiproxy in this run") from None

    def add_toxics(self, name: str, toxics: list[ToxicSpec]) -> None:
        proxy = self._proxy(name)
        for toxic in toxics:
            try:
                proxy.add_toxic(name=toxic.name, type=toxic.type, stream=toxic.stream,
                                toxicity=toxic.toxicity, attributes=dict(toxic.attributes))
            except Exception as error:
                raise NetworkError(f"adding toxic {toxic.name} ({toxic.type} "
                                   f"{toxic.attributes}) to {proxy.name}: {error}") from None

    def remove_toxics(self, name: str, toxics: list[ToxicSpec]) -> None:
        proxy = self._proxy(name)
        for toxic in toxics:
            try:
                proxy.destroy_toxic(toxic.name)
            except Exception as error:
                raise NetworkError(f"removing toxic {toxic.name} from {proxy.name}: "
                                   f"{error}") from None

    def set_enabled(self, name: str, enabled: bool) -> None:
        proxy = self._proxy(name)
        try:
            proxy.enable() if enabled else proxy.disable()
        except Exception as error:
            raise NetworkError(f"{'enabling' if enabled else 'disabling'} {proxy.name}: "
                               f"{error}") from None

    def close(self) -> None:
        """Delete our proxies (and with them their toxics and connections). Best effort."""
        for proxy in self.proxies.values():
            with contextlib.suppress(Exception):
                proxy.destroy()
        self.proxies.clear()
