"""A real project still works inside a run (issue #31 item 9): npm installs from its cache with the
network off, and cargo builds offline with the user's toolchain, through a real ``sandbox exec``
(bubblewrap, the home an allowlist). The virtualenv case is tests/run/test_venvcopy.py.

The npm registry is our own, on 127.0.0.1, and serves only while the user's ``npm install`` on the
host fills the cache: inside, the network is off and the cache (read-only) is all there is.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import json
import os
import pwd
import shutil
import subprocess
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import make_repo, sandbox_cmd

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


def tarball() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in {
            "package/package.json": '{"name": "padleft", "version": "1.0.0", "main": "index.js"}\n',
            "package/index.js": 'module.exports = (s) => "padded:" + s;\n',
        }.items():
            info = tarfile.TarInfo(name)
            info.size = len(text)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(text.encode()))
    return buf.getvalue()


@pytest.fixture
def registry() -> Iterator[str]:
    """An npm registry of one package on 127.0.0.1; its base URL."""
    tgz = tarball()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
            base = f"http://127.0.0.1:{self.server.server_address[1]}"
            if self.path.rstrip("/") == "/padleft":
                dist = {
                    "tarball": f"{base}/padleft/-/padleft-1.0.0.tgz",
                    "integrity": "sha512-" + base64.b64encode(hashlib.sha512(tgz).digest()).decode(),
                    "shasum": hashlib.sha1(tgz).hexdigest(),  # noqa: S324 (npm's field)
                }
                version = {"name": "padleft", "version": "1.0.0", "main": "index.js", "dist": dist}
                doc = {"name": "padleft", "dist-tags": {"latest": "1.0.0"}, "versions": {"1.0.0": version}}
                body, kind = json.dumps(doc).encode(), "application/json"
            elif self.path == "/padleft/-/padleft-1.0.0.tgz":
                body, kind = tgz, "application/octet-stream"
            else:
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed")
def test_npm_installs_from_its_cache_with_the_network_off(tmp_path: Path, registry: str) -> None:
    home = tmp_path / "userhome"
    home.mkdir()
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "npm_config_update_notifier": "false"}
    # The user's own install on the host: it fills ~/.npm/_cacache and writes the lock file.
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "package.json").write_text('{"name": "app", "version": "1.0.0", "dependencies": {"padleft": "1.0.0"}}\n')
    subprocess.run(
        ["npm", "install", "--registry", registry, "--no-audit", "--no-fund"],
        cwd=scratch,
        env={**os.environ, **env},
        check=True,
        capture_output=True,
        timeout=300,
    )
    root = make_repo(
        tmp_path / "repo",
        {
            "package.json": (scratch / "package.json").read_text(),
            "package-lock.json": (scratch / "package-lock.json").read_text(),
            "main.js": 'console.log(require("padleft")("x"));\n',
            ".gitignore": "node_modules/\n",
        },
    )
    started = sandbox_cmd("start", "--json", cwd=root, env=env)
    assert started.returncode == 0, started.stderr.decode()
    run_id = json.loads(started.stdout)["run"]
    script = f"npm ci --offline --registry {registry} --no-audit --no-fund && node main.js"
    proc = sandbox_cmd("exec", run_id, "--network", "off", "--", "sh", "-c", script, cwd=root, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
    assert "padded:x" in proc.stdout.decode()


def _real_home() -> Path:
    return Path(pwd.getpwuid(os.getuid()).pw_dir)


@pytest.mark.skipif(
    shutil.which("cargo") is None or not (_real_home() / ".rustup").is_dir(),
    reason="no cargo with a rustup toolchain in this user's home",
)
def test_cargo_builds_offline_with_the_users_toolchain(tmp_path: Path) -> None:
    # The user's real home: the toolchain (~/.rustup, ~/.cargo/bin) lives there; the sandbox's data
    # goes to the test's own directory, so nothing is left in that home.
    env = {"HOME": str(_real_home()), "XDG_DATA_HOME": str(tmp_path / "data"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    root = make_repo(
        tmp_path / "crate",
        {
            "Cargo.toml": '[package]\nname = "hello"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n',
            "src/main.rs": 'fn main() {\n    println!("built inside");\n}\n',
            ".gitignore": "target/\n",
        },
    )
    started = sandbox_cmd("start", "--json", cwd=root, env=env)
    assert started.returncode == 0, started.stderr.decode()
    run_id = json.loads(started.stdout)["run"]
    proc = sandbox_cmd(
        "exec", run_id, "--network", "off", "--", "cargo", "run", "--offline", "-q", cwd=root, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
    assert "built inside" in proc.stdout.decode()
