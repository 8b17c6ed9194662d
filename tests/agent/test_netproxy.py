"""The allowlist proxy (sandbox.confine.proxy) on its own: entries, defaults, settings, both request forms."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sandbox.agent.adapters import agent_of, default_allowlist
from sandbox.confine.proxy import Allowlist, AllowlistError, NetProxy, Refusal
from sandbox.run import config


def test_allowlist_entries() -> None:
    allow = Allowlist(["api.example.com", "127.0.0.1:8080", "*.corp.example", "[::1]:9000", "any.example:*"])
    assert allow.allows("API.example.com.", 443) and allow.allows("api.example.com", 80)
    assert not allow.allows("api.example.com", 8443)  # a bare host is the web ports only
    assert not allow.allows("evil-api.example.com", 443) and not allow.allows("example.com", 443)
    assert allow.allows("127.0.0.1", 8080) and not allow.allows("127.0.0.1", 8081)
    assert allow.allows("a.b.corp.example", 443) and not allow.allows("corp.example", 443)
    assert allow.allows("::1", 9000) and allow.allows("[::1]", 9000)
    assert allow.allows("any.example", 1) and allow.allows("any.example", 65535)
    assert not Allowlist([]).allows("localhost", 80)
    for bad in ("host:0", "host:99999", "host:x", "http://host/", "a b", "[::1", "*.", "user@host"):
        with pytest.raises(AllowlistError):
            Allowlist([bad])


def test_default_allowlist_is_the_agents_endpoints_and_its_base_url() -> None:
    assert agent_of("/usr/bin/claude") == "claude" and agent_of("codex") == "codex"
    assert agent_of("python3", "gemini") == "gemini" and agent_of("python3", None) is None
    env = {"ANTHROPIC_BASE_URL": "http://127.0.0.1:4000/v1", "OPENAI_BASE_URL": "https://o.example"}
    assert default_allowlist("claude", env) == ["api.anthropic.com", "console.anthropic.com", "127.0.0.1:4000"]
    codex = default_allowlist("codex", env, ["pypi.org"])
    assert codex == ["api.openai.com", "chatgpt.com", "auth.openai.com", "o.example:443", "pypi.org"]
    assert "generativelanguage.googleapis.com" in default_allowlist("gemini", {})
    assert default_allowlist(None, env, ["x.example"]) == ["x.example"]  # an unknown agent: the settings only
    with pytest.raises(AllowlistError):
        default_allowlist(None, {}, ["not a host"])


def test_settings(tmp_path: Path) -> None:
    (tmp_path / ".sandbox.toml").write_text('[network]\nallow = ["pypi.org"]\n[isolation]\nnetwork_run = true\n')
    cfg = config.load(str(tmp_path))
    assert cfg.network_allow == ["pypi.org"] and cfg.network_run == "on"
    (tmp_path / "plain").mkdir()
    assert config.load(str(tmp_path / "plain")).network_run == "allow"  # the default of sandbox run
    (tmp_path / ".sandbox.toml").write_text('[isolation]\nnetwork_run = "sometimes"\n')
    with pytest.raises(config.ConfigError, match="network_run must be"):
        config.load(str(tmp_path))
    (tmp_path / ".sandbox.toml").write_text("[network]\ndeny = []\n")
    with pytest.raises(config.ConfigError, match="unknown network setting 'deny'"):
        config.load(str(tmp_path))
    (tmp_path / ".sandbox.toml").write_text("[network]\nallow = 'pypi.org'\n")
    with pytest.raises(config.ConfigError, match="network.allow must be an array"):
        config.load(str(tmp_path))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = f"{self.path} {self.headers.get('Connection')}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def origin() -> Iterator[int]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def _ask(path: str, request: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(path)
        s.sendall(request)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
            if request.startswith(b"CONNECT") and data.startswith(b"HTTP/1.1 200") and b"\r\n\r\n" in data:
                s.sendall(b"GET /in-tunnel HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                request = b""
        return data


def test_proxy_forwards_the_allowed_and_reports_the_refused(tmp_path: Path, origin: int) -> None:
    refused: list[Refusal] = []
    got = threading.Event()

    def on_refused(r: Refusal) -> None:
        refused.append(r)
        got.set()

    path = str(tmp_path / "net.sock")
    with NetProxy(path, Allowlist([f"127.0.0.1:{origin}"]), on_refused):
        assert os.stat(path).st_mode & 0o777 == 0o600
        plain = _ask(path, f"GET http://127.0.0.1:{origin}/a?b=1 HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        # One request per connection: whatever the client asked, the origin is told to close.
        assert plain.startswith(b"HTTP/1.1 200") and plain.endswith(b"/a?b=1 close")
        tunnel = _ask(path, f"CONNECT 127.0.0.1:{origin} HTTP/1.1\r\n\r\n".encode())
        assert tunnel.startswith(b"HTTP/1.1 200 Connection established") and tunnel.endswith(b"/in-tunnel close")
        other = origin + 1 if origin < 65535 else origin - 1
        denied = _ask(path, f"CONNECT 127.0.0.1:{other} HTTP/1.1\r\n\r\n".encode())
        assert denied.startswith(b"HTTP/1.1 403") and b"not in this run's network allowlist" in denied
        assert got.wait(10)
        assert [(r.host, r.port, r.method) for r in refused] == [("127.0.0.1", other, "CONNECT")]
        assert _ask(path, b"GET /origin-form HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 400")
        assert _ask(path, b"GET https://127.0.0.1/ HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 400")
        assert _ask(path, b"nonsense\r\n\r\n").startswith(b"HTTP/1.1 400")
        # The host is the URL's, not what its user part or the Host header say.
        smuggled = _ask(path, f"GET http://127.0.0.1:{origin}@evil.example/ HTTP/1.1\r\n\r\n".encode())
        assert smuggled.startswith(b"HTTP/1.1 403")
        assert _ask(path, b"CONNECT evil.example:443 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").startswith(b"HTTP/1.1 403")
    assert not os.path.exists(path)


def test_proxy_socket_path_longer_than_sun_path(tmp_path: Path, origin: int) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    path = str(deep / "net.sock")
    with NetProxy(path, Allowlist([f"127.0.0.1:{origin}"])):
        dir_fd = os.open(deep, os.O_PATH | os.O_DIRECTORY)
        try:
            reply = _ask(
                f"/proc/self/fd/{dir_fd}/net.sock", f"GET http://127.0.0.1:{origin}/ HTTP/1.1\r\n\r\n".encode()
            )
        finally:
            os.close(dir_fd)
        assert reply.startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize(
    "request_line",
    [
        b"CONNECT a\x00b.corp.example:443 HTTP/1.1",
        b"GET http://a\x00b.corp.example/ HTTP/1.1",
        b"CONNECT a\xffb.corp.example:443 HTTP/1.1",
        b"CONNECT " + b"x" * 64 + b".corp.example:443 HTTP/1.1",
        b"CONNECT a b.corp.example:443 HTTP/1.1",
        b"GET http://x.corp.example:99999/ HTTP/1.1",
        b"CONNECT :443 HTTP/1.1",
        b"CONNECT [::1 HTTP/1.1",
    ],
    ids=["nul-connect", "nul-get", "latin1", "long-label", "space", "bad-port", "no-host", "open-bracket"],
)
def test_proxy_answers_400_to_what_it_cannot_parse(
    tmp_path: Path, request_line: bytes, capfd: pytest.CaptureFixture[str]
) -> None:
    path = str(tmp_path / "net.sock")
    with NetProxy(path, Allowlist(["*.corp.example:*"])):
        reply = _ask(path, request_line + b"\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 400"), reply
    assert "Traceback" not in capfd.readouterr().err
