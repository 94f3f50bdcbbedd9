"""A total deadline per HTTP request, for the served teacher.

httpx's timeouts are per operation: a read timeout of 3 s waits 3 s for each read, so a server
that sends one byte every 1.5 s keeps a request alive for as long as it likes (httpx has no total
timeout: encode/httpx#1450). Here every socket operation of a request (connect, each write, each
read, of the headers and of the body) waits at most the time left until the request's deadline,
and none starts after it: the request ends with httpx's own timeout error, which the openai
client raises as `APITimeoutError`, within `timeout_s` of its start.

The deadline is per thread (`deadline(seconds)` around a request): the teacher runs one request
per thread at a time, and a connection is only ever used by the thread that holds it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpcore2
import httpx2

_local = threading.local()


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Every socket operation of this thread's requests inside the block ends by `seconds` from
    now."""
    previous = getattr(_local, "deadline", None)
    _local.deadline = time.monotonic() + seconds
    try:
        yield
    finally:
        _local.deadline = previous


def _clamp(timeout: float | None, error: type[Exception]) -> float | None:
    """`timeout`, cut to the time left before this thread's deadline; `error` once it passed."""
    end = getattr(_local, "deadline", None)
    if end is None:
        return timeout
    left = end - time.monotonic()
    if left <= 0:
        raise error("the request's deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore2.NetworkStream):
    def __init__(self, stream: httpcore2.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _clamp(timeout, httpcore2.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _clamp(timeout, httpcore2.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore2.NetworkStream:  # fmt: skip
        inner = self._stream.start_tls(
            ssl_context, server_hostname, _clamp(timeout, httpcore2.ConnectTimeout)
        )
        return _DeadlineStream(inner)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _DeadlineBackend(httpcore2.NetworkBackend):
    def __init__(self, backend: httpcore2.NetworkBackend) -> None:
        self._backend = backend

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None,
                    socket_options: Any = None) -> httpcore2.NetworkStream:  # fmt: skip
        stream = self._backend.connect_tcp(
            host, port, _clamp(timeout, httpcore2.ConnectTimeout), local_address, socket_options
        )
        return _DeadlineStream(stream)

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Any = None) -> httpcore2.NetworkStream:  # fmt: skip
        stream = self._backend.connect_unix_socket(
            path, _clamp(timeout, httpcore2.ConnectTimeout), socket_options
        )
        return _DeadlineStream(stream)

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def deadline_transport(**kwargs: Any) -> httpx2.HTTPTransport:
    """httpx's own transport (`kwargs` as `httpx2.HTTPTransport` takes them), its connections
    made through a backend that honours `deadline`. httpx builds its connection pool without a
    way to pass a network backend, so the pool's backend is wrapped after construction; if a new
    httpx version moves it, this fails here, loudly, not with a request that hangs."""
    transport = httpx2.HTTPTransport(**kwargs)
    pool = getattr(transport, "_pool", None)
    if not isinstance(getattr(pool, "_network_backend", None), httpcore2.NetworkBackend):
        raise RuntimeError(
            f"httpx2 {httpx2.__version__}: the transport's pool has no network backend to wrap; "
            "the served teacher's deadline needs pipeline/teach/teachers/deadline.py updated"
        )
    pool._network_backend = _DeadlineBackend(pool._network_backend)
    return transport
