"""Reading a verify route's request body whole, within ``MAX_BODY_BYTES``, or not at all.

:func:`read_body` returns the whole body, raises werkzeug's
``RequestEntityTooLarge`` (413) past the limit -- with or without
``Content-Length`` -- and :class:`BodyUnreadable` (400 ``request-invalid``) when
the body cannot be read whole: bad chunked encoding, a client gone mid-body, a
body slower than the deadline. Half a body is never parsed as if it were whole.

After an unreadable body, or an oversized one that could not be drained, the
request's environ carries :data:`CLOSE_CONNECTION`: the server
(:mod:`provider.service.worker`) closes the connection after the answer, since a
stream whose framing is broken is never read again.
"""

from __future__ import annotations

from typing import Any

from flask import request
from werkzeug.exceptions import RequestEntityTooLarge

from ..errors import RequestError

#: WSGI environ key: set to True, the server closes the connection after this answer.
CLOSE_CONNECTION = "manifest_provider.close_connection"
#: Bytes read from the request at a time while looking for the end of a chunked body.
_READ_SIZE = 64 * 1024
#: An oversized body is read and thrown away up to this many times the limit before
#: the 413 goes out (nginx's "lingering close"): closing a connection with unread
#: bytes in it makes the kernel reset it, and the reset can overtake the answer, so
#: the caller would see a broken connection instead of the reason. Past this, the
#: connection is closed unread.
_DRAIN_FACTOR = 4


class BodyUnreadable(RequestError):
    """The request body could not be read whole: broken framing, a client gone, a deadline passed."""


def _discard(stream: Any, most: int) -> None:
    while most > 0:
        part = stream.read(min(_READ_SIZE, most))
        if not part:
            return
        most -= len(part)


def _read(stream: Any, size: int) -> bytes:
    """One read from the WSGI input; whatever the server raises becomes :class:`BodyUnreadable`.

    gunicorn raises its own parse errors for bad chunked encoding (their text
    quotes the offending bytes: only the type is kept), ``NoMoreData`` or an
    ``OSError`` when the client goes, ``TimeoutError`` past the body's deadline.
    """
    try:
        return bytes(stream.read(size))
    except Exception as exc:  # any server's errors, none of them the caller's to see
        raise BodyUnreadable(f"the request body could not be read ({type(exc).__name__})") from None


def read_body(limit: int) -> bytes:
    """The request body, or 413 beyond ``limit`` bytes -- with or without Content-Length.

    Werkzeug's own limit stops *silently* at the limit for a chunked body (the
    truncated bytes would then fail to parse as JSON), so the body is read
    here, from the WSGI input, one chunk past the limit at most; an oversized
    one is then drained (up to :data:`_DRAIN_FACTOR` times the limit) so the 413 arrives.
    A body that ends before its ``Content-Length``, or that the server cannot
    read, is :class:`BodyUnreadable`.
    """
    length = request.content_length
    stream = request.environ["wsgi.input"]
    if length is not None and length > limit:
        if length <= _DRAIN_FACTOR * limit:
            try:
                _discard(stream, length)
            except Exception:  # the 413 goes out anyway; the connection is closed
                request.environ[CLOSE_CONNECTION] = True
        raise RequestEntityTooLarge()
    if length is not None:
        body = _read(stream, length)
        if len(body) != length:
            raise BodyUnreadable(f"the request body ended after {len(body)} of its {length} bytes")
        return body
    if not request.environ.get("wsgi.input_terminated"):
        return b""  # no length and a server that does not end the stream: nothing can be read safely
    parts: list[bytes] = []
    size = 0
    while size <= limit:
        part = _read(stream, min(_READ_SIZE, limit + 1 - size))
        if not part:
            break
        parts.append(part)
        size += len(part)
    if size > limit:
        try:
            _discard(stream, (_DRAIN_FACTOR - 1) * limit)
        except Exception:  # as above
            request.environ[CLOSE_CONNECTION] = True
        raise RequestEntityTooLarge()
    return b"".join(parts)
