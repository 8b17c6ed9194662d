"""A session's allowlist proxy, with each refused connection recorded in the run's ledger.

:func:`start` runs the proxy of :mod:`sandbox.confine.proxy` for one ``sandbox run`` session on
the run's ``net.sock``. Each refusal becomes a ``note`` event (:class:`sandbox.models.NetworkRefusal`)
naming the call that was running when the connection was refused (the newest one started by then and
not finished before: the agent's hooks record a call as started before its tool runs), or none when it
happened between calls; ``log`` and
``status`` show them (:func:`sandbox.fast.views.network_refusals`).

A hostile agent could loop on refused connections: past :data:`MAX_RECORDED` refusals in one
session the rest are counted, and one note at the end of the session says how many were not
recorded one by one.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from sandbox.confine.proxy import Allowlist, NetProxy, Refusal
from sandbox.confine.spawn import Policy
from sandbox.models import CallStatus, EventKind, NetworkRefusal
from sandbox.run.run import Run

#: Refusals recorded one by one per session; the rest are counted in one note at its end.
MAX_RECORDED = 100


class _Recorder:
    def __init__(self, run: Run, session: str | None) -> None:
        self.run = run
        self.session = session
        self.recorded = 0
        self.dropped = 0
        self._lock = threading.Lock()

    def __call__(self, refusal: Refusal) -> None:
        with self._lock:
            if self.recorded >= MAX_RECORDED:
                self.dropped += 1
                return
            self.recorded += 1
        # Evidence, never a reason to break the session.
        with contextlib.suppress(Exception), self.run.lock():
            state = self.run.state()
            # The calls running when the connection was refused, not when it is recorded: a refusal
            # made while 'sandbox run' was still opening the run is recorded a moment later.
            at = refusal.at
            running = [
                e
                for e in state.calls.values()
                if (e.started_at or e.created_at) <= at
                and (e.status == CallStatus.started or (e.finished_at is not None and e.finished_at >= at))
            ]
            newest = max(running, key=lambda e: e.started_at or e.created_at, default=None)
            item = NetworkRefusal(
                host=refusal.host,
                port=refusal.port,
                at=refusal.at.isoformat(),
                method=refusal.method,
                call_id=newest.call_id if newest else None,
                session=self.session,
            )
            self.run.record(
                EventKind.note,
                reason=f"network: refused {refusal.host}:{refusal.port}",
                data={"network_refused": item.model_dump(mode="json")},
                epoch=state.epoch,
            )

    def finish(self) -> None:
        if not self.dropped:
            return
        with contextlib.suppress(Exception):
            self.run.note({"network_refused_unrecorded": self.dropped, "session": self.session})


def recorder(run: Run, session: str | None) -> _Recorder:
    """The refusal callback of a proxy started before the run was opened (:mod:`sandbox.agent.early`);
    call its ``finish()`` when the proxy stopped."""
    return _Recorder(run, session)


@contextlib.contextmanager
def serving(run: Run, policy: Policy, allow: tuple[str, ...], session: str | None) -> Iterator[NetProxy | None]:
    """The session's proxy on ``policy.proxy`` while the block runs (None when the policy has none)."""
    if policy.proxy is None:
        yield None
        return
    recorder = _Recorder(run, session)
    proxy = NetProxy(policy.proxy, Allowlist(allow), recorder).start()
    try:
        yield proxy
    finally:
        proxy.stop()
        recorder.finish()
