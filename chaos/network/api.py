"""Toxiproxy's HTTP API over one collection of proxies (its ``api.go`` and ``proxy_collection.go``).

The routes on :8474 — ``/version``, ``/reset``, ``/populate``,
``/proxies[/{proxy}[/toxics[/{toxic}]]]`` — with their methods (POST and PATCH both update),
status codes (201 proxy created or populated, 200 toxic created, 204 deletes and reset,
400/404/409, and 500 when a listener cannot bind), compact JSON in Go's field order, and errors
as ``{"error": "...", "status": N}`` with Toxiproxy's messages. Like Go's ``http.Error`` those
error bodies end in a newline and are sent as ``text/plain``. A User-Agent starting with
``Mozilla/`` gets 403 (Toxiproxy's browser guard). ``GET /version`` answers
``{"version": "2.12.0"}`` plus a newline, as a 2.12.0 release build does.

Messages for malformed JSON follow Go's ``encoding/json`` wording approximately, not byte for
byte. Nothing a client sends makes the API answer 500, except Toxiproxy's own ``listen tcp …``
when a proxy's listener cannot bind.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any

from chaos.network.addresses import resolve_tcp_address
from chaos.network.api_errors import (
    ERR_INVALID_TOXIC_TYPE,
    ERR_PROXY_EXISTS,
    ERR_PROXY_NOT_FOUND,
    ERR_TOXIC_EXISTS,
    ERR_TOXIC_NOT_FOUND,
    ApiError,
    api_error,
    bad_request_body,
    missing_field,
)
from chaos.network.gojson import (
    decode_body,
    expect_bool,
    expect_float32,
    expect_str,
    go_json,
    go_kind,
    object_fields,
    type_error,
)
from chaos.network.http_protocol import (
    DEFAULT_LIMITS,
    HttpLimits,
    Request,
    Response,
    serve_connection,
)
from chaos.network.proxy import Proxy
from chaos.network.toxics.registry import TOXIC_KINDS, decode_attributes
from chaos.network.toxics.toxic import Direction, Toxic
from chaos.network.version import TOXIPROXY_VERSION

log = logging.getLogger("chaos.network.server")

Handler = Callable[..., Awaitable[Response]]


def json_response(value: Any, status: int = 200) -> Response:
    return Response(status, go_json(value))


def error_response(error: ApiError) -> Response:
    # api.go's apiError goes through Go's http.Error: text/plain, newline-terminated.
    body = go_json({"error": error.message, "status": error.status}) + b"\n"
    return Response(error.status, body, "text/plain; charset=utf-8")


class ToxiproxyApi:
    """Toxiproxy's API handlers over one collection of proxies, all on one event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, seed: int | None = None,
                 limits: HttpLimits = DEFAULT_LIMITS) -> None:
        self.loop = loop
        self.limits = limits
        self.rng = random.Random(seed)
        self.proxies: dict[str, Proxy] = {}
        # Handlers await (binding a listener), so one lock keeps each API call atomic, as
        # Toxiproxy's collection and proxy mutexes do.
        self.lock = asyncio.Lock()
        self.routes: list[tuple[tuple[str, ...], dict[str, Handler]]] = [
            (("reset",), {"POST": self.reset}),
            (("proxies",), {"GET": self.proxy_index, "POST": self.proxy_create}),
            (("populate",), {"POST": self.populate}),
            (("proxies", "*"), {"GET": self.proxy_show, "POST": self.proxy_update,
                                "PATCH": self.proxy_update, "DELETE": self.proxy_delete}),
            (("proxies", "*", "toxics"), {"GET": self.toxic_index, "POST": self.toxic_create}),
            (("proxies", "*", "toxics", "*"), {"GET": self.toxic_show,
                                               "POST": self.toxic_update,
                                               "PATCH": self.toxic_update,
                                               "DELETE": self.toxic_delete}),
            (("version",), {"GET": self.version}),
        ]

    async def handle(self, request: Request) -> Response:
        if request.headers.get("user-agent", "").startswith("Mozilla/"):
            return Response(403, b"User agent not allowed\n", "text/plain; charset=utf-8")
        segments = tuple(request.path.split("/")[1:]) if request.path.startswith("/") else ()
        for pattern, methods in self.routes:
            if len(pattern) != len(segments) or not all(
                    want == "*" and got or want == got for want, got in zip(pattern, segments,
                                                                            strict=True)):
                continue
            handler = methods.get(request.method)
            if handler is None:
                return Response(405, b"", None)
            arguments = [got for want, got in zip(pattern, segments, strict=True) if want == "*"]
            async with self.lock:
                try:
                    return await handler(request, *arguments)
                except ApiError as error:
                    return error_response(error)
                except Exception as error:  # a bug here must not take the API down
                    log.exception("%s %s failed", request.method, request.path)
                    return error_response(ApiError(f"internal error: {error}", 500))
        return Response(404, b"404 page not found\n", "text/plain; charset=utf-8")

    def proxy(self, name: str) -> Proxy:
        try:
            return self.proxies[name]
        except KeyError:
            raise api_error(ERR_PROXY_NOT_FOUND) from None

    # --- /version, /reset -----------------------------------------------------------------
    async def version(self, request: Request) -> Response:
        body = f'{{"version": "{TOXIPROXY_VERSION}"}}\n'.encode()
        return Response(200, body, "application/json;charset=utf-8")

    async def reset(self, request: Request) -> Response:
        for proxy in list(self.proxies.values()):
            await proxy.start()
            proxy.reset_toxics()
        return Response(204, b"", None)

    # --- proxies --------------------------------------------------------------------------
    async def proxy_index(self, request: Request) -> Response:
        return json_response({name: self.proxies[name].to_json() for name in sorted(self.proxies)})

    def parse_proxy(self, value: Any, defaults: dict[str, Any], where: str) -> dict[str, Any]:
        fields = object_fields(value, ("name", "listen", "upstream", "enabled"), where)
        parsed = dict(defaults)
        for name, item in fields.items():
            if name == "enabled":
                parsed[name] = expect_bool(item, f"Proxy.{name}")
            else:
                parsed[name] = expect_str(item, f"Proxy.{name}")
        return parsed

    async def proxy_create(self, request: Request) -> Response:
        spec = self.parse_proxy(decode_body(request.body),
                                {"name": "", "listen": "", "upstream": "", "enabled": True},
                                "toxiproxy.Proxy")
        if not spec["name"]:
            raise missing_field("name")
        if not spec["upstream"]:
            raise missing_field("upstream")
        if spec["name"] in self.proxies:
            raise api_error(ERR_PROXY_EXISTS)
        proxy = self.new_proxy(spec)
        if spec["enabled"]:
            await proxy.start()
        self.proxies[proxy.name] = proxy
        return json_response(proxy.to_json(), 201)

    def new_proxy(self, spec: dict[str, Any]) -> Proxy:
        return Proxy(spec["name"], spec["listen"], spec["upstream"], self.loop, self.rng)

    async def differs(self, proxy: Proxy, listen: str, upstream: str) -> bool:
        try:
            resolved = await resolve_tcp_address(listen)
        except (OSError, ValueError) as error:
            raise ApiError(str(error), 500) from None
        return proxy.listen != resolved or proxy.upstream != upstream

    async def populate(self, request: Request) -> Response:
        created: list[Proxy] = []
        try:
            value = decode_body(request.body)
            if not isinstance(value, list):
                raise bad_request_body(
                    f"json: cannot unmarshal {go_kind(value)} into Go "
                    "value of type []toxiproxy.Proxy")
            specs = [self.parse_proxy(item, {"name": "", "listen": "", "upstream": "",
                                             "enabled": True}, "toxiproxy.Proxy")
                     for item in value]
            for number, spec in enumerate(specs, 1):
                if not spec["name"]:
                    raise missing_field(f"name at proxy {number}")
                if not spec["upstream"]:
                    raise missing_field(f"upstream at proxy {number}")
            for spec in specs:
                existing = self.proxies.get(spec["name"])
                if existing is not None:
                    if not await self.differs(existing, spec["listen"], spec["upstream"]):
                        created.append(existing)  # same addresses: left exactly as it is
                        continue
                    existing.stop()
                proxy = self.new_proxy(spec)
                if spec["enabled"]:
                    await proxy.start()
                self.proxies[proxy.name] = proxy
                created.append(proxy)
        except ApiError as error:
            body = {"error": error.message, "status": error.status,
                    "proxies": [p.to_json() for p in created] or None}
            return json_response(body, error.status)
        return json_response({"proxies": [p.to_json() for p in created] or None}, 201)

    async def proxy_show(self, request: Request, name: str) -> Response:
        return json_response(self.proxy(name).to_json())

    async def proxy_update(self, request: Request, name: str) -> Response:
        proxy = self.proxy(name)
        spec = self.parse_proxy(decode_body(request.body),
                                {"name": proxy.name, "listen": proxy.listen,
                                 "upstream": proxy.upstream, "enabled": proxy.enabled},
                                "toxiproxy.Proxy")
        if await self.differs(proxy, spec["listen"], spec["upstream"]):
            proxy.stop()  # a new address drops every connection, as in Toxiproxy
            proxy.listen, proxy.upstream = spec["listen"], spec["upstream"]
        if spec["enabled"] != proxy.enabled:
            if spec["enabled"]:
                await proxy.start()
            else:
                proxy.stop()
        return json_response(proxy.to_json())

    async def proxy_delete(self, request: Request, name: str) -> Response:
        self.proxy(name).stop()
        del self.proxies[name]
        return Response(204, b"", None)

    # --- toxics ---------------------------------------------------------------------------
    async def toxic_index(self, request: Request, name: str) -> Response:
        return json_response([toxic.to_json() for toxic in self.proxy(name).toxics()])

    async def toxic_create(self, request: Request, name: str) -> Response:
        proxy = self.proxy(name)
        value = decode_body(request.body)
        fields = object_fields(value, ("name", "type", "stream", "toxicity", "attributes"),
                               "toxics.ToxicWrapper")
        toxic_name = expect_str(fields.get("name", ""), "ToxicWrapper.name")
        type_name = expect_str(fields.get("type", ""), "ToxicWrapper.type")
        stream = expect_str(fields.get("stream", "downstream"), "ToxicWrapper.stream")
        toxicity = expect_float32(fields.get("toxicity", 1.0), "ToxicWrapper.toxicity")
        if "attributes" in fields and not isinstance(fields["attributes"], dict):
            raise type_error(fields["attributes"], "ToxicWrapper.attributes",
                             "toxics.NoopToxic")
        direction = Direction.parse(stream)
        toxic_name = toxic_name or f"{type_name}_{stream}"
        kind = TOXIC_KINDS.get(type_name)
        if kind is None:
            raise api_error(ERR_INVALID_TOXIC_TYPE)
        if proxy.find_toxic(toxic_name) is not None:
            raise api_error(ERR_TOXIC_EXISTS)
        attributes = dict.fromkeys(kind.attributes, 0)
        if "attributes" in fields:
            decode_attributes(fields["attributes"], kind, attributes)
        toxic = Toxic(toxic_name, kind, stream, direction, toxicity, attributes)
        proxy.add_toxic(toxic)
        return json_response(toxic.to_json())  # 200: Toxiproxy sets no 201 here

    def toxic(self, proxy: Proxy, name: str) -> Toxic:
        toxic = proxy.find_toxic(name)
        if toxic is None:
            raise api_error(ERR_TOXIC_NOT_FOUND)
        return toxic

    async def toxic_show(self, request: Request, name: str, toxic_name: str) -> Response:
        return json_response(self.toxic(self.proxy(name), toxic_name).to_json())

    async def toxic_update(self, request: Request, name: str, toxic_name: str) -> Response:
        proxy = self.proxy(name)
        toxic = self.toxic(proxy, toxic_name)
        fields = object_fields(decode_body(request.body), ("attributes", "toxicity"),
                               "toxics.ToxicWrapper")
        attributes = dict(toxic.attributes)
        if "attributes" in fields:
            decode_attributes(fields["attributes"], toxic.kind, attributes)
        toxicity = expect_float32(fields.get("toxicity", toxic.toxicity), "toxicity")
        toxic.attributes, toxic.toxicity = attributes, toxicity
        proxy.update_toxic(toxic)
        return json_response(toxic.to_json())

    async def toxic_delete(self, request: Request, name: str, toxic_name: str) -> Response:
        proxy = self.proxy(name)
        proxy.remove_toxic(self.toxic(proxy, toxic_name))
        return Response(204, b"", None)

    # --- serving ---------------------------------------------------------------------------
    async def serve_http(self, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter) -> None:
        await serve_connection(reader, writer, self.handle, self.limits)

    def shutdown(self) -> None:
        for proxy in self.proxies.values():
            proxy.stop()
