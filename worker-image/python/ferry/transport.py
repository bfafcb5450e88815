"""HTTP/1.1 with keep-alive for the worker protocol: a job costs no TCP handshake.

A worker talks to one platform (or one agent sidecar) all its life, several small requests per job
(job-take, job-done, job-stream, progress, ping, the job-stop poll). `Connections` keeps the idle
connections of each host and hands one to whichever thread asks; a thread gives it back once the
answer is read in full, so a long poll holds its own connection and never blocks another request.

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
seen before sending (a non-blocking peek finds EOF) and never cost a request; a close that races
the request fails before a single byte of answer. A request that failed on a *new* connection, or
after part of an answer arrived, is the caller's failure as before (its own retry rules apply).

With a proxy configured for the scheme (http_proxy / https_proxy, as urllib reads them) requests go
through urllib as they always did.
"""

import os
import socket
import threading
import time
import urllib.parse

IDLE_REUSE_SEC = 4.0  # under Node's default keepAliveTimeout (5 s)
MAX_IDLE_PER_HOST = 32  # a worker with max_concurrency N has up to N + 3 requests in flight
MAX_HEAD_BYTES = 64 * 1024
_READ_BYTES = 256 * 1024


class ResponseError(ConnectionError):
    """The server's answer is not HTTP/1.x as expected, or was cut short."""


class _Closed(ConnectionResetError):
    """The server closed the connection before answering (a stale keep-alive connection)."""


class _Conn:
    __slots__ = ("sock", "buf", "answered")

    def __init__(self, sock):
        self.sock = sock
        self.buf = bytearray()
        self.answered = False  # some bytes of the current answer have arrived

    def fill(self):
        chunk = self.sock.recv(_READ_BYTES)
        if not chunk:
            return False
        self.answered = True
        self.buf += chunk
        return True

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def closed_by_peer(self):
        """A peek without blocking: EOF (or stray bytes) means this idle connection is unusable."""
        if type(self.sock) is not socket.socket:
            return False  # TLS: no peek; a stale connection costs the retry instead
        try:
            self.sock.setblocking(False)
            try:
                self.sock.recv(1, socket.MSG_PEEK)
            finally:
                self.sock.setblocking(True)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True
        return True  # b"" (EOF) or bytes nobody asked for


class Connections:
    """Idle keep-alive connections by (scheme, host, port); safe to use from any thread."""

    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()
        self._idle = {}  # (scheme, host, port) -> [(conn, last_used), ...]
        self._proxied = {}
        self._tls = None
        self._opener = None  # urllib's, for requests through a proxy
        self.opened = 0  # connections made so far (tests and benchmarks read it)

    def request(self, method, url, body=None, headers=None, timeout=30.0):
        """(status, body bytes) of one request; OSError (ResponseError for a bad answer) on failure."""
        parts = urllib.parse.urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"unsupported URL {url!r}")
        if self._through_proxy(scheme, parts.netloc):
            return self._urllib_request(method, url, body, headers or {}, timeout)
        key = (scheme, parts.hostname, parts.port or (443 if scheme == "https" else 80))
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        head = _request_head(method, target, parts.netloc.rpartition("@")[2], headers, body)
        conn, reused = self._take(key, timeout)
        try:
            try:
                status, data, keep = _exchange(conn, head, body, method, timeout)
            except (_Closed, BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
                if not reused or conn.answered:
                    raise
                conn.close()
                conn = self._new(key, timeout)
                status, data, keep = _exchange(conn, head, body, method, timeout)
        except BaseException:
            conn.close()
            raise
        if keep:
            self._give_back(key, conn)
        else:
            conn.close()
        return status, data

    def close(self):
        with self._lock:
            idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn, _ in conns:
                conn.close()

    # -- the pool --------------------------------------------------------------------------------

    def _take(self, key, timeout):
        now = self._clock()
        unusable = []
        found = None
        with self._lock:
            conns = self._idle.get(key)
            while conns:
                conn, last_used = conns.pop()
                if now - last_used < IDLE_REUSE_SEC:
                    found = conn
                    break
                unusable.append(conn)
        for conn in unusable:
            conn.close()
        if found is not None and not found.closed_by_peer():
            return found, True
        if found is not None:
            found.close()
        return self._new(key, timeout), False

    def _new(self, key, timeout):
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
        return _Conn(sock)

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
                return resp.status, resp.read()
        except urllib.error.HTTPError as err:
            try:
                data = err.read()
            except OSError:
                data = b""
            finally:
                err.close()
            return err.code, data

    def _give_back(self, key, conn):
        with self._lock:
            conns = self._idle.setdefault(key, [])
            if len(conns) < MAX_IDLE_PER_HOST:
                conns.append((conn, self._clock()))
                return
        conn.close()

    def _through_proxy(self, scheme, netloc):
        proxied = self._proxied.get((scheme, netloc))
        if proxied is None:
            proxied = _proxy_configured(scheme, netloc)
            self._proxied[(scheme, netloc)] = proxied
        return proxied


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


def _exchange(conn, head, body, method, timeout):
    """One request and its whole answer: (status, body, whether the connection can be reused)."""
    conn.sock.settimeout(timeout)
    conn.answered = False
    conn.buf.clear()
    if body and len(body) <= 64 * 1024:
        conn.sock.sendall(head + body)  # one write: no second packet for a small body
    else:
        conn.sock.sendall(head)
        if body:
            conn.sock.sendall(body)
    while True:
        version, status, headers = _read_head(conn)
        if not 100 <= status < 200:
            break
    connection = headers.get(b"connection", b"").lower()
    keep = (version == b"HTTP/1.1" and b"close" not in connection) or (
        version == b"HTTP/1.0" and b"keep-alive" in connection
    )
    if status in (204, 304) or method == "HEAD":
        data = b""
    elif b"chunked" in headers.get(b"transfer-encoding", b"").lower():
        data = _read_chunked(conn)
    elif b"content-length" in headers:
        try:
            length = int(headers[b"content-length"])
        except ValueError:
            raise ResponseError(f"bad Content-Length {headers[b'content-length']!r}") from None
        if length < 0:
            raise ResponseError(f"bad Content-Length {length}")
        data = _read_exact(conn, length)
    else:
        while conn.fill():
            pass
        data = bytes(conn.buf)
        conn.buf.clear()
        keep = False
    if conn.buf:
        keep = False  # bytes past the answer: the connection's framing cannot be trusted
    return status, data, keep


def _read_head(conn):
    start = 0
    while True:
        end = conn.buf.find(b"\r\n\r\n", start)
        if end >= 0:
            break
        if len(conn.buf) > MAX_HEAD_BYTES:
            raise ResponseError("answer head over 64 KiB")
        start = max(0, len(conn.buf) - 3)
        if not conn.fill():
            if conn.answered:
                raise ResponseError("connection closed in the middle of an answer head")
            raise _Closed("server closed the connection without an answer")
    head = bytes(conn.buf[:end])
    del conn.buf[: end + 4]
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


def _read_exact(conn, length):
    while len(conn.buf) < length:
        if not conn.fill():
            raise ResponseError(f"connection closed after {len(conn.buf)} of {length} body bytes")
    data = bytes(conn.buf[:length])
    del conn.buf[:length]
    return data


def _read_line(conn):
    while True:
        end = conn.buf.find(b"\r\n")
        if end >= 0:
            line = bytes(conn.buf[:end])
            del conn.buf[: end + 2]
            return line
        if len(conn.buf) > MAX_HEAD_BYTES or not conn.fill():
            raise ResponseError("bad chunked body")


def _read_chunked(conn):
    out = bytearray()
    while True:
        size_text = _read_line(conn).split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise ResponseError(f"bad chunk size {size_text[:20]!r}") from None
        if size == 0:
            while _read_line(conn):  # trailers, up to the empty line
                pass
            return bytes(out)
        out += _read_exact(conn, size)
        if _read_line(conn):
            raise ResponseError("chunk not followed by CRLF")


def _proxy_configured(scheme, netloc):
    """Whether urllib would send a request for this scheme and host through a proxy."""
    wanted = scheme + "_proxy"
    if not any(name.lower() == wanted for name in os.environ):
        return False  # the common case, without importing urllib.request
    import urllib.request

    return scheme in urllib.request.getproxies() and not urllib.request.proxy_bypass(netloc)
