"""Hosting a run's session watcher service in a process of its own, as ``sandbox run`` would.

``python -m bench.cases.session_support GIT_DIR RUN`` serves until SIGTERM. :func:`start` launches
it and waits until a client can ping it (the watcher is then ready).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field


@dataclass
class Session:
    """A live session service process."""

    proc: subprocess.Popen[bytes]
    ready_seconds: float
    env: dict[str, str] = field(default_factory=dict)

    def stop(self) -> None:
        """Stop the service and wait for it."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start(git_dir: str, run_id: str, timeout: float = 120.0) -> Session | None:
    """Launch the service for a run; None when it did not answer within ``timeout`` seconds."""
    from sandbox import session
    from sandbox.project import Project
    from sandbox.run import Run

    run = Run.open(Project(git_dir), run_id)
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "bench.cases.session_support", git_dir, run_id])
    while time.perf_counter() - t0 < timeout:
        if proc.poll() is not None:
            return None
        client = session.client_for(run)
        if client is not None and client.ping() is not None:
            return Session(proc, time.perf_counter() - t0)
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    return None


def main() -> None:
    """Serve one run's session until SIGTERM."""
    from sandbox import session
    from sandbox.project import Project
    from sandbox.run import Run

    git_dir, run_id = sys.argv[1], sys.argv[2]
    run = Run.open(Project(git_dir), run_id)
    service = session.serve(run)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=service.stop).start())
    service.serve_forever()
    os._exit(0)


if __name__ == "__main__":
    main()
