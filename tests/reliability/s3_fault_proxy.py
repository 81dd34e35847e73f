"""A fault-injecting HTTP proxy on loopback in front of moto's S3 server.

The client (s3fs, through aiobotocore and aiohttp) talks to the proxy as to S3; the proxy
passes each request on to moto, or answers it with a fault instead:

* ``503 SlowDown`` and ``500 InternalError``, the request not performed;
* a reset connection (TCP RST), the request not performed;
* no answer until past the client's read timeout, then the request performed anyway (a put that
  lands late, after the client gave up on it);
* a lost answer: a put or delete performed, then the connection reset (a conditional put that
  landed and whose client, retrying, finds the object there).

Faults come in bursts on one request (the same method and URL): its retries meet the same fault
until the burst is spent, so a long burst outlasts the client's retry budget and reaches the
caller (changelake). The proxy counts requests, faults by kind and retries (requests repeating
one that met a fault). It works at the HTTP level only, so it does not depend on the versions of
s3fs, aiobotocore or botocore.
"""

from __future__ import annotations

import enum
import http.client
import random
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


class Fault(enum.StrEnum):
    """What the proxy does instead of passing a request on and its answer back."""

    SLOW_DOWN = "503 SlowDown"
    INTERNAL_ERROR = "500 InternalError"
    RESET = "connection reset"
    TIMEOUT = "answer past the timeout"
    LOST_ANSWER = "answer of a landed put lost"


_ERRORS = {
    Fault.SLOW_DOWN: (503, "SlowDown", "Please reduce your request rate."),
    Fault.INTERNAL_ERROR: (500, "InternalError", "We encountered an internal error. Please try again."),
}
# Headers that describe one hop of the connection, not the message.
_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection"})
MUTATIONS = frozenset({"PUT", "POST", "DELETE"})


@dataclass(frozen=True)
class Request:
    """What the plan sees of a request."""

    method: str
    path: str  # /bucket/key
    query: str
    headers: Mapping[str, str]

    @property
    def identity(self) -> str:
        """The request as its retries repeat it."""
        return f"{self.method} {self.path}?{self.query}"

    @property
    def conditional(self) -> bool:
        """A put only if the key is absent (``If-None-Match: *``): a commit."""
        return self.method == "PUT" and self.headers.get("if-none-match") == "*"


@dataclass
class Counts:
    """What the proxy saw and did."""

    requests: int = 0
    faults: Counter[Fault] = field(default_factory=Counter)
    retries: int = 0  # requests that repeat one that met a fault
    conditional_puts_lost: int = 0  # lost answers of conditional puts that landed

    @property
    def total_faults(self) -> int:
        return sum(self.faults.values())


# A plan decides the fault of each request (None: pass it on). It is called under the proxy's lock.
Plan = Callable[[Request], Fault | None]


@dataclass
class RandomFaults:
    """Seeded random faults: a request not in a burst starts one with probability ``rate``, of a
    kind drawn by ``weights``; the burst repeats its fault on the request's next ``length - 1``
    retries. Lengths are mostly 1 or 2 (the client's own retries absorb them) and sometimes up to
    ``max_length`` (past the client's budget, so changelake sees the failure). A conditional put
    (a commit, one request in a hundred) loses its answer at ``conditional_rate`` besides."""

    seed: int
    rate: float = 0.02
    conditional_rate: float = 0.2
    weights: Mapping[Fault, float] = field(default_factory=lambda: {
        Fault.SLOW_DOWN: 3, Fault.INTERNAL_ERROR: 3, Fault.RESET: 2, Fault.LOST_ANSWER: 3, Fault.TIMEOUT: 0.3})
    max_length: int = 12
    bursts: dict[str, list[Fault]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.random = random.Random(self.seed)

    def __call__(self, request: Request) -> Fault | None:
        burst = self.bursts.get(request.identity)
        if burst:
            fault = burst.pop()
            if not burst:
                del self.bursts[request.identity]
            return fault
        if request.conditional and self.random.random() < self.conditional_rate:
            fault = Fault.LOST_ANSWER
        elif self.random.random() < self.rate:
            kinds = [k for k in self.weights if k is not Fault.LOST_ANSWER or request.method in MUTATIONS]
            fault = self.random.choices(kinds, [self.weights[k] for k in kinds])[0]
        else:
            return None
        draw = self.random.random()
        length = 1 if draw < 0.6 else 2 if draw < 0.8 else self.random.randint(3, self.max_length)
        if fault is Fault.TIMEOUT:
            length = min(length, 2)  # each costs the client's whole read timeout
        if length > 1:
            self.bursts[request.identity] = [fault] * (length - 1)
        return fault


@dataclass
class TargetedFaults:
    """``fault`` for the first ``times`` requests that ``matches`` accepts; nothing else."""

    matches: Callable[[Request], bool]
    fault: Fault
    times: int
    hits: list[Request] = field(default_factory=list)

    def __call__(self, request: Request) -> Fault | None:
        if len(self.hits) < self.times and self.matches(request):
            self.hits.append(request)
            return self.fault
        return None


class FaultProxy:
    """The proxy: ``endpoint_url`` is where the client goes; ``plan`` can be replaced at any time
    (``None``: no faults). ``delay`` is how long a TIMEOUT fault holds a request: more than the
    client's read timeout."""

    def __init__(self, upstream: str, *, delay: float) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.delay = delay
        self.plan: Plan | None = None
        self.counts = Counts()
        self.lock = threading.Lock()
        self._faulted: set[str] = set()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="s3-fault-proxy", daemon=True)

    @property
    def endpoint_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    @contextmanager
    def faults(self, plan: Plan | None) -> Iterator[Counts]:
        """Run a block under ``plan``, with fresh counts (yielded)."""
        with self.lock:
            previous, self.plan = self.plan, plan
            self.counts = Counts()
            self._faulted.clear()
        try:
            yield self.counts
        finally:
            with self.lock:
                self.plan = previous

    def decide(self, request: Request) -> Fault | None:
        with self.lock:
            self.counts.requests += 1
            if request.identity in self._faulted:
                self.counts.retries += 1
            fault = self.plan(request) if self.plan is not None else None
            if fault is None:
                self._faulted.discard(request.identity)
            else:
                self._faulted.add(request.identity)
                self.counts.faults[fault] += 1
                if fault is Fault.LOST_ANSWER and request.conditional:
                    self.counts.conditional_puts_lost += 1
            return fault

    def forward(self, request: Request, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        """Pass the request on to moto: its status, reason, headers and body."""
        connection = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            url = request.path + (f"?{request.query}" if request.query else "")
            headers = {k: v for k, v in request.headers.items() if k not in _HOP}
            connection.request(request.method, url, body=body, headers=headers)
            response = connection.getresponse()
            data = response.read()
            return response.status, response.reason, response.getheaders(), data
        finally:
            connection.close()


def _handler_for(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the client's connection pool expects

        def setup(self) -> None:
            super().setup()
            # An answer goes out as headers, then body: without this, Nagle's algorithm holds the
            # body until the client's delayed ACK (40 ms a request).
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, format: str, *args: object) -> None:  # one line per request otherwise
            pass

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks = []
                while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
                while self.rfile.readline().strip():  # trailers
                    pass
                return b"".join(chunks)
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _reset(self) -> None:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True

        def _answer(self, status: int, reason: str, headers: list[tuple[str, str]], body: bytes) -> None:
            self.send_response_only(status, reason)
            length = str(len(body))
            for name, value in headers:
                if name.lower() == "content-length" and self.command == "HEAD":
                    length = value  # a HEAD answer's length is the object's
                elif name.lower() not in _HOP:
                    self.send_header(name, value)
            self.send_header("Content-Length", length)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            self.wfile.flush()

        def _error(self, fault: Fault) -> None:
            status, code, message = _ERRORS[fault]
            xml = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message>'
                   f"<Resource>{self.path}</Resource><RequestId>fault</RequestId></Error>").encode()
            self._answer(status, code, [("Content-Type", "application/xml")], xml)

        def _serve(self) -> None:
            parts = urlsplit(self.path)
            body = self._body()
            request = Request(self.command, parts.path, parts.query,
                              {k.lower(): v for k, v in self.headers.items()})
            fault = proxy.decide(request)
            if fault in _ERRORS:
                self._error(fault)
            elif fault is Fault.RESET:
                self._reset()
            elif fault is Fault.TIMEOUT:
                time.sleep(proxy.delay)
                proxy.forward(request, body)  # it lands late; the client has given up on it
                self._reset()
            elif fault is Fault.LOST_ANSWER:
                proxy.forward(request, body)
                self._reset()
            else:
                self._answer(*proxy.forward(request, body))

        do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _serve

    return Handler
