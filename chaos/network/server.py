"""A Toxiproxy-2.x-compatible server in pure asyncio: the same HTTP API, JSON, toxics and codes.

Why it exists (docs/design.md §3): every worker reaches Valkey through a Toxiproxy proxy of its
own so that a network fault (latency, partition, reset …) can target one worker. The real
``toxiproxy-server`` is used when present, but no registry these machines reach carries it, so
the toolkit ships this stand-in. It is driven by the same ``toxiproxy-python`` client, and its
conformance tests (``tests/test_toxiproxy.py``) pass against either server.

It is laid out as Toxiproxy 2.12.0's Go source is, whose behaviour it follows:

* :mod:`chaos.network.toxics` — the toxics (``toxics/``): what a toxic is and how it runs on a
  link (``toxic.py``), one module per kind, and the registry of them;
* :mod:`chaos.network.link` — one direction of one connection: its chain of toxics (``link.go``);
* :mod:`chaos.network.proxy` — a proxy: its listener, connections, links and toxic list
  (``proxy.go``, ``toxic_collection.go``);
* :mod:`chaos.network.api` — the HTTP routes, JSON bodies and status codes (``api.go``), over
  :mod:`~chaos.network.http_protocol`, :mod:`~chaos.network.gojson`,
  :mod:`~chaos.network.addresses` and :mod:`~chaos.network.api_errors`;
* this module — the entry point (``cmd/server``): :func:`serve` (blocking, SIGINT/SIGTERM stop
  it), ``python -m chaos.network.server`` (:func:`main`, which also takes toxiproxy-server's own
  ``-host``/``-port`` flags) and :class:`ToxiproxyServer`, a background-thread handle for tests.

Deliberate differences, where Toxiproxy crashes or hangs, are told in the module of the toxic
concerned (``bandwidth``, ``slicer``, ``slow_close``); the API bounds what a client may cost
(:class:`~chaos.network.http_protocol.HttpLimits`), which Toxiproxy does not.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from chaos.network.addresses import join_host_port
from chaos.network.api import ToxiproxyApi
from chaos.network.http_protocol import DEFAULT_LIMITS, MAX_HEADER_BYTES, HttpLimits
from chaos.network.version import TOXIPROXY_VERSION

__all__ = ["DEFAULT_PORT", "TOXIPROXY_VERSION", "HttpLimits", "ToxiproxyServer", "main", "serve",
           "tcp_port"]

DEFAULT_PORT = 8474


async def run_server(host: str, port: int, stop: asyncio.Event,
                     on_ready: Callable[[int], None], seed: int | None = None,
                     limits: HttpLimits = DEFAULT_LIMITS) -> None:
    """Serve the API on ``host:port`` (0 = a free port) until ``stop`` is set, then close every
    listener and connection."""
    loop = asyncio.get_running_loop()
    api = ToxiproxyApi(loop, seed, limits)
    server = await asyncio.start_server(api.serve_http, host, port, limit=MAX_HEADER_BYTES,
                                        reuse_address=True)
    try:
        bound_port = int(server.sockets[0].getsockname()[1])
        on_ready(bound_port)
        await stop.wait()
    finally:
        server.close()
        api.shutdown()
        # Let aborted transports run their connection_lost callbacks before the loop closes.
        await asyncio.sleep(0)
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's event loop where it is installed (its transports cost a proxied chunk fewer
    Python calls: the proxy's overhead on every worker's round trip), else asyncio's own."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def run_loop(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        runner.run(main())


def serve(host: str = "127.0.0.1", port: int = DEFAULT_PORT, *, seed: int | None = None) -> None:
    """Run the server in the foreground until SIGINT or SIGTERM. Prints one line to stderr when
    it listens: ``toxiproxy-compatible server listening on HOST:PORT``."""

    async def main_task() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)

        def announce(bound_port: int) -> None:
            print(f"toxiproxy-compatible server listening on {join_host_port(host, bound_port)}",
                  file=sys.stderr, flush=True)

        await run_server(host, port, stop, announce, seed)

    run_loop(main_task)


class ToxiproxyServer:
    """The server on its own event loop in a background thread, for tests and embedding.

    ``start()`` returns once the API listens; ``port`` and ``url`` then tell where.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *,
                 seed: int | None = None, limits: HttpLimits = DEFAULT_LIMITS) -> None:
        self.host = host
        self.port = port
        self.seed = seed
        self.limits = limits
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        return f"http://{join_host_port(self.host, self.port)}"

    def start(self, timeout: float = 10.0) -> ToxiproxyServer:
        ready = threading.Event()

        def on_ready(bound_port: int) -> None:
            self.port = bound_port
            ready.set()

        async def main_task() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            await run_server(self.host, self.port, self._stop, on_ready, self.seed,
                             self.limits)

        def run() -> None:
            try:
                run_loop(main_task)
            except BaseException as error:  # reported by start()
                self._error = error
                ready.set()

        self._thread = threading.Thread(target=run, name="toxiproxy-server", daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise RuntimeError(f"toxiproxy-compatible server not listening after {timeout}s")
        if self._error is not None:
            raise RuntimeError(f"toxiproxy-compatible server failed: {self._error}")
        return self

    def stop(self, timeout: float = 10.0) -> None:
        if self._thread is None:
            return
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)
        self._thread = None

    def __enter__(self) -> ToxiproxyServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def tcp_port(text: str) -> int:
    """An argparse type: a TCP port number, 0 (any free one) to 65535."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port number (0-65535)")
    return port


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m chaos.network.server",
        description=f"A Toxiproxy {TOXIPROXY_VERSION}-compatible server (HTTP API and toxics).")
    # -host/-port too: toxiproxy-server's own flags, so this can stand in for its image
    parser.add_argument("--host", "-host", default="127.0.0.1",
                        help="API address (default 127.0.0.1)")
    parser.add_argument("--port", "-port", type=tcp_port, default=DEFAULT_PORT,
                        help=f"API port (default {DEFAULT_PORT}; 0 picks a free one)")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed for toxicity rolls, jitter and slicing")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    try:
        serve(args.host, args.port, seed=args.seed)
    except OSError as error:
        print(f"toxiproxy-compatible server: {error}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
