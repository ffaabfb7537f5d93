"""The worker's response writer: the same bytes as gunicorn's own, the head sent with the body in one write."""

from __future__ import annotations

import pytest
from gunicorn import util
from gunicorn.config import Config
from gunicorn.http.parser import RequestParser
from gunicorn.http.wsgi import Response

from provider.service.worker import OneWriteResponse


class Recorder:
    """A socket that keeps what each ``sendall`` was given."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def sendall(self, data: bytes) -> None:
        self.writes.append(bytes(data))


def _request(method: str, version: str = "1.1") -> object:
    head = f"{method} /healthz HTTP/{version}\r\nHost: provider\r\n\r\n".encode()
    return next(RequestParser(Config(), [head], ("127.0.0.1", 40000)))


def _answer(
    response_class: type[Response], method: str, status: str, headers: list[tuple[str, str]], body: list[bytes]
) -> list[bytes]:
    sock = Recorder()
    response = response_class(_request(method), sock, Config())
    response.start_response(status, headers)
    for chunk in body:
        response.write(chunk)
    response.close()
    return sock.writes


CASES = {
    "a JSON body with its length": ("POST", "200 OK", [("Content-Type", "application/json"), ("Content-Length", "11")],
                                    [b'{"ok":true}']),
    "a body in two pieces": ("POST", "200 OK", [("Content-Length", "6")], [b"abc", b"def"]),
    "an empty body": ("GET", "200 OK", [("Content-Length", "0")], [b""]),
    "no body at all": ("GET", "200 OK", [("Content-Length", "0")], []),
    "HEAD: the head only": ("HEAD", "200 OK", [("Content-Length", "11")], [b'{"ok":true}']),
    "204: the head only": ("POST", "204 No Content", [], [b""]),
    "chunked (no length)": ("POST", "200 OK", [("Content-Type", "text/plain")], [b"abc", b"def"]),
    "a refusal that closes": ("POST", "401 Unauthorized", [("Content-Length", "2"), ("Connection", "close")], [b"{}"]),
}  # fmt: skip


@pytest.fixture(autouse=True)
def fixed_date(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both writers stamp the same ``Date``, so their bytes can be compared whole."""
    monkeypatch.setattr(util, "http_date", lambda *_: "Fri, 27 Nov 2026 12:00:00 GMT")


@pytest.mark.parametrize("case", list(CASES))
def test_the_bytes_on_the_wire_are_gunicorns(case: str) -> None:
    method, status, headers, body = CASES[case]
    ours = _answer(OneWriteResponse, method, status, headers, body)
    theirs = _answer(Response, method, status, headers, body)
    assert b"".join(ours) == b"".join(theirs)
    assert b"".join(ours).startswith(f"HTTP/1.1 {status}\r\n".encode())


def test_the_head_leaves_with_the_first_body_bytes() -> None:
    """One TLS record and one system call per answer, where gunicorn makes two."""
    method, status, headers, body = CASES["a JSON body with its length"]
    writes = _answer(OneWriteResponse, method, status, headers, body)
    assert len(writes) == 1
    assert writes[0].startswith(b"HTTP/1.1 200 OK\r\n") and writes[0].endswith(b'\r\n\r\n{"ok":true}')


@pytest.mark.parametrize("case", ["HEAD: the head only", "no body at all", "204: the head only"])
def test_a_head_without_body_bytes_is_still_sent_at_close(case: str) -> None:
    method, status, headers, body = CASES[case]
    writes = _answer(OneWriteResponse, method, status, headers, body)
    assert len(writes) == 1 and writes[0].endswith(b"\r\n\r\n")


def test_no_sendfile() -> None:
    """``sendfile`` would put a file's bytes on the socket before the held head."""
    response = OneWriteResponse(_request("GET"), Recorder(), Config())
    assert response.sendfile(object()) is False
