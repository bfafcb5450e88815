"""HTTP/1.1 with keep-alive for the worker protocol: a job costs no TCP handshake, and its hot calls
no thread hop.

A worker talks to one platform (or one agent sidecar) all its life, several small requests per job
(job-take, job-done, job-stream, progress, ping, the job-stop poll). Two front ends share one codec:

- `Connections`, blocking, for any thread (ping, the job-stop poll, progress, job-stream, log
  shipping, the first job-take sent before asyncio is imported). It keeps the idle connections of
  each host and hands one to whichever thread asks; a thread gives it back once the answer is read
  in full, so a long poll holds its own connection and never blocks another request.
- `LoopConnections`, for the event loop (job-take and job-done in queue_runtime.py): non-blocking
  connections driven by asyncio protocols, so a request costs no thread wake-up, no GIL hand-off and
  no self-pipe write to get back to the loop. The server closing an idle connection is seen as it
  happens (connection_lost), not by a peek before each request. Only opening a connection goes
  through a thread (DNS and connect are blocking calls); https and a configured proxy go through
  the blocking front end in a thread, as before (the platform and the agent sidecar speak plain
  HTTP on the hot path).

What both share, each rule in one place: the request head (`_request_head`), how a body is written
(`_outgoing`), the answer parser (`_answer`, sans-IO: fed the bytes read, whatever read them), the
idle pool (`_Idle`: LIFO, used < IDLE_REUSE_SEC ago), and when a failed request is retried on a new
connection (`_retry_on_new_connection`).

    request ──▶ idle connection (LIFO, used < IDLE_REUSE_SEC ago, not closed by the server)?
                        │ none                                        │
                        ▼                                             ▼
                 new connection ──▶ one write (head + body) ──▶ read the whole answer
                                                                 │ ok, keep-alive: back to idle
                                                                 │ closed before any answer on a
                                                                 ▼ reused connection: once more, new

Why not http.client: its request path costs ~10x the CPU of this one per request (headers go
through the email package; head and body leave in two writes), and at a few hundred jobs/s that
CPU is the runtime's largest cost. The subset of HTTP/1.1 spoken here is what a worker needs from
its platform: GET/POST with a Content-Length body; answers with Content-Length, chunked, or
read-to-close bodies; 1xx answers skipped; keep-alive per RFC 9112 §9.3.

Why a reused connection gets one silent second try: the server may close an idle keep-alive
connection at any moment (Node's http server after 5 s, Fastify after 72 s). Most such closes are
seen before sending (the blocking front end polls the socket, the loop's is told by asyncio) and
never cost a request; a close that races the request fails before a single byte of answer. A
request that failed on a *new* connection, or after part of an answer arrived, is the caller's
failure as before (its own retry rules apply).

Timeouts: the blocking front end's `timeout` bounds each wait for the server (socket timeout); the
loop's bounds the whole exchange. Either way a server that stops answering fails the request with
TimeoutError (an OSError) after `timeout` seconds.

With a proxy configured for the scheme (http_proxy / https_proxy, as urllib reads them) requests go
through urllib as they always did.
"""

import os
import select
import socket
import threading
import time
import urllib.parse

IDLE_REUSE_SEC = 4.0  # under Node's default keepAliveTimeout (5 s)
MAX_IDLE_PER_HOST = 32  # a worker with max_concurrency N has up to N + 3 requests in flight
MAX_HEAD_BYTES = 64 * 1024
_READ_BYTES = 256 * 1024
_ONE_WRITE_MAX_BYTES = 64 * 1024


class ResponseError(ConnectionError):
    """The server's answer is not HTTP/1.x as expected, or was cut short."""


class _Closed(ConnectionResetError):
    """The server closed the connection before answering (a stale keep-alive connection)."""


_STALE_ERRORS = (_Closed, BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


def _retry_on_new_connection(exc, reused, answered):
    """Whether a failed request goes once more on a new connection: only when a *reused* connection
    turned out closed before any byte of the answer (the server closed it while it was idle)."""
    return reused and not answered and isinstance(exc, _STALE_ERRORS)


class _Idle:
    """Idle keep-alive connections by (scheme, host, port): LIFO, dropped once IDLE_REUSE_SEC old.
    Holds any connection object with close() and usable(); safe to use from any thread."""

    def __init__(self, clock):
        self._clock = clock
        self._lock = threading.Lock()
        self._conns = {}  # key -> [(conn, last_used), ...]
        # Once closed, a connection given back is closed: a request still out at close() (a long
        # poll in a thread) would otherwise leave it in a pool nothing closes again.
        self._closed = False

    def take(self, key):
        """The most recently used connection still fit for a request, or None."""
        now = self._clock()
        unusable = []
        found = None
        with self._lock:
            conns = self._conns.get(key)
            while conns:
                conn, last_used = conns.pop()
                if now - last_used < IDLE_REUSE_SEC:
                    found = conn
                    break
                unusable.append(conn)
        for conn in unusable:
            conn.close()
        if found is not None and not found.usable():
            found.close()
            found = None
        return found

    def give_back(self, key, conn):
        with self._lock:
            conns = self._conns.setdefault(key, [])
            if not self._closed and len(conns) < MAX_IDLE_PER_HOST:
                conns.append((conn, self._clock()))
                return
        conn.close()

    def close(self):
        with self._lock:
            self._closed = True
            idle, self._conns = self._conns, {}
        for conns in idle.values():
            for conn, _ in conns:
                conn.close()


class _Conn:
    """A blocking connection."""

    __slots__ = ("sock", "answered", "timeout")

    def __init__(self, sock, timeout):
        self.sock = sock
        self.answered = False  # some bytes of the current answer have arrived
        self.timeout = timeout  # the socket's, so an unchanged one costs no syscall

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def usable(self):
        """An idle connection is unusable once the server closed it (or sent bytes nobody asked for):
        either makes it readable. One poll without blocking and without changing the socket's mode."""
        if type(self.sock) is not socket.socket:
            return True  # TLS: no peek; a stale connection costs the retry instead
        try:
            if _poll is not None:
                poller = _poll()
                poller.register(self.sock, select.POLLIN)
                return not poller.poll(0)
            return not select.select([self.sock], [], [], 0)[0]
        except (OSError, ValueError):
            return False

    def exchange(self, head, body, method, timeout):
        """One request and its whole answer: (status, body, headers, whether the connection can be
        reused)."""
        if timeout != self.timeout:
            self.sock.settimeout(timeout)
            self.timeout = timeout
        self.answered = False
        for part in _outgoing(head, body):
            self.sock.sendall(part)
        reader = _answer(method)
        chunk = None
        while True:
            try:
                reader.send(chunk)
            except StopIteration as end:
                return end.value
            chunk = self.sock.recv(_READ_BYTES)
            if chunk:
                self.answered = True


_poll = getattr(select, "poll", None)


class Connections:
    """The blocking front end: keep-alive connections for any thread."""

    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self._idle = _Idle(clock)
        self._proxied = {}
        self._tls = None
        self._opener = None  # urllib's, for requests through a proxy
        self._lock = threading.Lock()
        self.opened = 0  # connections made so far, by both front ends (tests and benchmarks read it)

    def request(self, method, url, body=None, headers=None, timeout=30.0):
        """(status, body bytes, answer headers) of one request; OSError (ResponseError for a bad
        answer) on failure. The headers: a dict of lower-case name bytes to value bytes."""
        scheme, key, head = self._route(method, url, headers, body)
        if head is None:
            return self._urllib_request(method, url, body, headers or {}, timeout)
        conn = self._idle.take(key)
        reused = conn is not None
        if conn is None:
            conn = self._new(key, timeout)
        try:
            try:
                status, data, answer_headers, keep = conn.exchange(head, body, method, timeout)
            except OSError as exc:
                if not _retry_on_new_connection(exc, reused, conn.answered):
                    raise
                conn.close()
                conn = self._new(key, timeout)
                status, data, answer_headers, keep = conn.exchange(head, body, method, timeout)
        except BaseException:
            conn.close()
            raise
        if keep:
            self._idle.give_back(key, conn)
        else:
            conn.close()
        return status, data, answer_headers

    def close(self):
        self._idle.close()

    # -- shared with LoopConnections -------------------------------------------------------------

    def _route(self, method, url, headers, body):
        """(scheme, pool key, request head); the head is None when a proxy must carry the request."""
        parts = urllib.parse.urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"unsupported URL {url!r}")
        key = (scheme, parts.hostname, parts.port or (443 if scheme == "https" else 80))
        if self._through_proxy(scheme, parts.netloc):
            return scheme, key, None
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        return scheme, key, _request_head(method, target, parts.netloc.rpartition("@")[2], headers, body)

    def _connect(self, key, timeout):
        """A new connected socket (TLS-wrapped for https)."""
        scheme, host, port = key
        sock = socket.create_connection((host, port), timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if scheme == "https":
                sock = self._tls_context().wrap_socket(sock, server_hostname=host)
        except BaseException:
            sock.close()
            raise
        with self._lock:
            self.opened += 1
        return sock

    # -- the blocking pool -------------------------------------------------------------------------

    def _new(self, key, timeout):
        return _Conn(self._connect(key, timeout), timeout)

    def _tls_context(self):
        if self._tls is None:
            import ssl  # only for https: the platform and the agent sidecar speak plain HTTP

            self._tls = ssl.create_default_context()
        return self._tls

    def _urllib_request(self, method, url, body, headers, timeout):
        import urllib.error
        import urllib.request

        if self._opener is None:
            self._opener = urllib.request.build_opener()  # reads the proxy variables now
        req = urllib.request.Request(url, data=body, headers=headers, method=method)
        try:
            with self._opener.open(req, timeout=timeout) as resp:
                return resp.status, resp.read(), _header_bytes(resp.headers)
        except urllib.error.HTTPError as err:
            try:
                data = err.read()
            except OSError:
                data = b""
            finally:
                err.close()
            return err.code, data, _header_bytes(err.headers)

    def _through_proxy(self, scheme, netloc):
        proxied = self._proxied.get((scheme, netloc))
        if proxied is None:
            proxied = _proxy_configured(scheme, netloc)
            self._proxied[(scheme, netloc)] = proxied
        return proxied


class LoopConnections:
    """The event loop's front end: `await request(...)` from the loop that created it.

    `connections` (a Connections) decides the route and counts connections; `blocking(fn, *args)`
    runs fn in a thread and returns an awaitable of its result: it opens connections, and carries
    the requests that go through a proxy or over TLS (the blocking front end does those).
    """

    def __init__(self, loop, connections, blocking):
        self._loop = loop
        self._connections = connections
        self._blocking = blocking
        self._idle = _Idle(connections._clock)
        self.connecting = 0  # requests waiting for a new connection (opened in a thread): not sent yet

    async def request(self, method, url, body=None, headers=None, timeout=30.0):
        """(status, body bytes, answer headers) of one request, as Connections.request; OSError
        (ResponseError for a bad answer, TimeoutError past `timeout`) on failure. Cancelling it closes
        the connection: nothing waits for the answer."""
        scheme, key, head = self._connections._route(method, url, headers, body)
        if head is None or scheme != "http":
            return await self._blocking(self._connections.request, method, url, body, headers, timeout)
        conn = self._idle.take(key)
        reused = conn is not None
        if conn is None:
            self.connecting += 1
            try:
                conn = await self._new(key, timeout)
            finally:
                self.connecting -= 1
        try:
            try:
                status, data, answer_headers, keep = await conn.exchange(head, body, method, timeout)
            except OSError as exc:
                if not _retry_on_new_connection(exc, reused, conn.answered):
                    raise
                conn.close()
                conn = await self._new(key, timeout)
                status, data, answer_headers, keep = await conn.exchange(head, body, method, timeout)
        except BaseException:
            conn.close()
            raise
        if keep:
            self._idle.give_back(key, conn)
        else:
            conn.close()
        return status, data, answer_headers

    def close(self):
        self._idle.close()

    async def _new(self, key, timeout):
        opening = _Opening(self._connections, key, timeout)
        try:
            sock = await self._blocking(opening._connect)
        except BaseException:
            opening.abandon()
            raise
        try:
            _transport, conn = await self._loop.create_connection(lambda: _LoopConn(self._loop), sock=sock)
        except BaseException:
            sock.close()
            raise
        return conn


class _Opening:
    """A connection a thread opens for the loop. The thread connects whether or not the request is
    still wanted: cancelled meanwhile (the job-take in flight when the worker stops), the request
    leaves, and the socket is closed wherever it is, never dropped open. The thread checks as well,
    since the loop that would have received the socket may be closed by then."""

    __slots__ = ("_connections", "_key", "_timeout", "_lock", "_sock", "_abandoned")

    def __init__(self, connections, key, timeout):
        self._connections = connections
        self._key = key
        self._timeout = timeout
        self._lock = threading.Lock()
        self._sock = None  # the socket opened, for abandon() to close
        self._abandoned = False

    def _connect(self):
        """In the thread: the connected socket, unless the request was abandoned meanwhile."""
        sock = self._connections._connect(self._key, self._timeout)
        with self._lock:
            if not self._abandoned:
                self._sock = sock
                return sock
        sock.close()
        raise ConnectionAbortedError("request cancelled while its connection was opened")

    def abandon(self):
        """On the loop, when the request left before the socket reached it."""
        with self._lock:
            self._abandoned = True
            sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()


class _LoopConn:
    """A connection of the event loop: an asyncio protocol that feeds what arrives to the answer
    parser of the request in flight. Bytes or a close while idle make it unusable at once."""

    def __init__(self, loop):
        self._loop = loop
        self._transport = None
        self._reader = None  # the answer parser of the request in flight
        self._answer = None  # its future
        self._timer = None
        self.lost = False
        self.answered = False

    # asyncio.Protocol

    def connection_made(self, transport):
        self._transport = transport

    def data_received(self, data):
        if self._reader is None:
            self.close()  # bytes nobody asked for: the connection's framing cannot be trusted
            return
        self.answered = True
        self._feed(data)

    def eof_received(self):
        return False  # close our side too

    def connection_lost(self, exc):
        self.lost = True
        if self._reader is None:
            return
        if exc is not None:
            self._settle(None, exc if isinstance(exc, OSError) else ConnectionResetError(str(exc)))
        else:
            self._feed(b"")

    def pause_writing(self):
        pass  # a big body is buffered by the transport; the answer comes after it anyway

    def resume_writing(self):
        pass

    # the request

    def usable(self):
        return not self.lost

    def close(self):
        self.lost = True
        if self._transport is not None:
            self._transport.abort()

    async def exchange(self, head, body, method, timeout):
        """One request and its whole answer: (status, body, headers, whether the connection can be
        reused)."""
        if self.lost:
            raise _Closed("server closed the connection without an answer")
        self.answered = False
        self._reader = _answer(method)
        self._reader.send(None)
        self._answer = answer = self._loop.create_future()
        self._timer = self._loop.call_later(timeout, self._time_out, answer, timeout)
        for part in _outgoing(head, body):
            self._transport.write(part)
        try:
            return await answer
        finally:
            self._reader = None
            self._timer.cancel()

    def _feed(self, data):
        try:
            self._reader.send(data)
        except StopIteration as end:
            self._settle(end.value, None)
        except Exception as exc:  # noqa: BLE001 - the request's failure, raised where it awaits
            self._settle(None, exc)

    def _settle(self, value, exc):
        self._reader = None
        answer = self._answer
        if answer is None or answer.done():
            return
        if exc is not None:
            answer.set_exception(exc)
        else:
            answer.set_result(value)

    def _time_out(self, answer, timeout):
        if answer is self._answer:
            self._settle(None, TimeoutError(f"no answer within {timeout:g} s"))


# -- the codec, shared by both front ends ------------------------------------------------------------


def _request_head(method, target, host, headers, body):
    if not (target.isascii() and target.isprintable()) or " " in target:
        raise ValueError(f"URL path contains a space or a control character: {target!r}")
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}", "Accept-Encoding: identity"]
    for name, value in (headers or {}).items():
        if "\r" in value or "\n" in value:
            raise ValueError(f"header {name} contains a line break")
        lines.append(f"{name}: {value}")
    if body is not None or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body) if body is not None else 0}")
    lines.append("\r\n")
    return "\r\n".join(lines).encode("latin-1")


def _outgoing(head, body):
    """What to write: a small body in the same write as the head (no second packet)."""
    if not body:
        return (head,)
    if len(body) <= _ONE_WRITE_MAX_BYTES:
        return (head + body,)
    return (head, body)


class _Buffer:
    __slots__ = ("data", "answered")

    def __init__(self):
        self.data = bytearray()
        self.answered = False


def _answer(method):
    """The reader of one HTTP/1.x answer, sans-IO: a generator, primed with send(None), that is sent
    each chunk read from the connection (b"" at end of stream) and yields while it needs more. It
    returns (status, body, headers, whether the connection can be reused), or raises ResponseError
    (_Closed when the stream ended before any byte of the answer)."""
    buf = _Buffer()
    while True:
        version, status, headers = yield from _read_head(buf)
        if not 100 <= status < 200:
            break
    connection = headers.get(b"connection", b"").lower()
    keep = (version == b"HTTP/1.1" and b"close" not in connection) or (
        version == b"HTTP/1.0" and b"keep-alive" in connection
    )
    if status in (204, 304) or method == "HEAD":
        data = b""
    elif b"chunked" in headers.get(b"transfer-encoding", b"").lower():
        data = yield from _read_chunked(buf)
    elif b"content-length" in headers:
        try:
            length = int(headers[b"content-length"])
        except ValueError:
            raise ResponseError(f"bad Content-Length {headers[b'content-length']!r}") from None
        if length < 0:
            raise ResponseError(f"bad Content-Length {length}")
        data = yield from _read_exact(buf, length)
    else:
        while (yield from _fill(buf)):
            pass
        data = bytes(buf.data)
        buf.data.clear()
        keep = False
    if buf.data:
        keep = False  # bytes past the answer: the connection's framing cannot be trusted
    return status, data, headers, keep


def _header_bytes(message):
    """An http.client answer's headers (urllib's, through a proxy) as _read_head gives them."""
    return {name.lower().encode("latin-1"): value.encode("latin-1", "replace")
            for name, value in message.items()}


def _fill(buf):
    chunk = yield
    if not chunk:
        return False
    buf.answered = True
    buf.data += chunk
    return True


def _read_head(buf):
    start = 0
    while True:
        end = buf.data.find(b"\r\n\r\n", start)
        if end >= 0:
            break
        if len(buf.data) > MAX_HEAD_BYTES:
            raise ResponseError("answer head over 64 KiB")
        start = max(0, len(buf.data) - 3)
        if not (yield from _fill(buf)):
            if buf.answered:
                raise ResponseError("connection closed in the middle of an answer head")
            raise _Closed("server closed the connection without an answer")
    head = bytes(buf.data[:end])
    del buf.data[: end + 4]
    status_line, *lines = head.split(b"\r\n")
    parts = status_line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise ResponseError(f"not an HTTP/1.x status line: {status_line[:100]!r}")
    headers = {}
    for line in lines:
        name, sep, value = line.partition(b":")
        if not sep:
            raise ResponseError(f"bad header line: {line[:100]!r}")
        headers[name.strip().lower()] = value.strip()
    return parts[0], int(parts[1]), headers


def _read_exact(buf, length):
    while len(buf.data) < length:
        if not (yield from _fill(buf)):
            raise ResponseError(f"connection closed after {len(buf.data)} of {length} body bytes")
    data = bytes(buf.data[:length])
    del buf.data[:length]
    return data


def _read_line(buf):
    while True:
        end = buf.data.find(b"\r\n")
        if end >= 0:
            line = bytes(buf.data[:end])
            del buf.data[: end + 2]
            return line
        if len(buf.data) > MAX_HEAD_BYTES or not (yield from _fill(buf)):
            raise ResponseError("bad chunked body")


def _read_chunked(buf):
    out = bytearray()
    while True:
        size_text = (yield from _read_line(buf)).split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise ResponseError(f"bad chunk size {size_text[:20]!r}") from None
        if size == 0:
            while (yield from _read_line(buf)):  # trailers, up to the empty line
                pass
            return bytes(out)
        out += yield from _read_exact(buf, size)
        if (yield from _read_line(buf)):
            raise ResponseError("chunk not followed by CRLF")


def _proxy_configured(scheme, netloc):
    """Whether urllib would send a request for this scheme and host through a proxy."""
    wanted = scheme + "_proxy"
    if not any(name.lower() == wanted for name in os.environ):
        return False  # the common case, without importing urllib.request
    import urllib.request

    return scheme in urllib.request.getproxies() and not urllib.request.proxy_bypass(netloc)
