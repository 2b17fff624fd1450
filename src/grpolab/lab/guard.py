"""Who may talk to the web lab: requests must name an accepted Host, and browsers' cross-origin requests are refused.

Listening on 127.0.0.1 stops other machines, but not other web pages: a page on any site can make the browser
send requests to localhost (CSRF), and a DNS-rebinding site can make its own name resolve to 127.0.0.1 and then
read the answers. Both carry the attacker's name, in the Origin header or in the Host header, so the lab answers
only requests whose Host is one of its own names and whose Origin (when the browser sends one) is too.

By default the accepted names are the loopback ones. `grpolab lab --host ADDR` adds ADDR (and, for a wildcard
address, the machine's host name); `--allow-host NAME` adds any other name users type into their browser.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARDS = frozenset({"0.0.0.0", "::", ""})


def accepted_names(host: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The Host names the lab answers to when it listens on `host` (loopback names always)."""
    names = set(LOOPBACK_NAMES) | {normal_name(n) for n in extra}
    if host in WILDCARDS:
        names.add(normal_name(socket.gethostname()))
    else:
        names.add(normal_name(host))
    return frozenset(n for n in names if n)


def normal_name(name: str) -> str:
    """A host name as compared: lower case, no brackets around IPv6, no trailing dot."""
    return name.strip().strip("[]").rstrip(".").lower()


def host_name(header: str) -> str:
    """The name part of a Host header ("localhost:7860" -> "localhost", "[::1]:7860" -> "::1")."""
    header = header.strip()
    if header.startswith("["):
        return normal_name(header[1 : header.find("]")] if "]" in header else header)
    if header.count(":") == 1:
        header = header.split(":", 1)[0]
    return normal_name(header)


def origin_name(header: str) -> str:
    """The host name of an Origin header ("http://localhost:7860" -> "localhost"; "null" -> "")."""
    try:
        return normal_name(urlsplit(header.strip()).hostname or "")
    except ValueError:
        return ""


def refusal(headers: dict[str, str], names: frozenset[str]) -> str | None:
    """Why a request with these (lower-case) headers is refused, or None when it may pass."""
    host = host_name(headers.get("host", ""))
    if host not in names:
        return f"Host {host or '(none)'!r} is not a name of this grpolab lab ({', '.join(sorted(names))})"
    origin = headers.get("origin")
    if origin is not None and origin_name(origin) not in names:
        return f"cross-origin request from {origin!r} refused"
    return None


class HostOriginGuard:
    """ASGI middleware: 403 for HTTP requests (and close for WebSockets) that `refusal` names a reason for."""

    def __init__(self, app: Any, names: frozenset[str]):
        self.app = app
        self.names = names

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        why = refusal(headers, self.names)
        if why is None:
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
        else:
            body = f"403 Forbidden: {why}. Start the lab with --allow-host NAME to accept another name.\n".encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 403,
                    "headers": [
                        (b"content-type", b"text/plain; charset=utf-8"),
                        (b"content-length", b"%d" % len(body)),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
