"""The file tools of ``sandbox mcp``: ``read_file``, ``write_file``, ``edit_file``.

``write_file`` and ``edit_file`` are one ``write_file`` / ``edit_file`` call each, written with the
recorder's confined write helper (``started`` durable before the file is touched, the finish costs
O(1 path)); inside the sandbox of ``sandbox run`` the repository's host records them instead
(:mod:`sandbox.mcp.hosted`). ``read_file`` changes nothing and is not recorded. Every path goes
through :mod:`sandbox.mcp.worktree`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TypedDict

from sandbox.errors import SandboxError, UsageError
from sandbox.mcp.hosted import HostLedger, Recorded
from sandbox.mcp.state import WorkspaceState
from sandbox.mcp.worktree import open_path, read_fd, relative, write_path
from sandbox.run.run import Run
from sandbox.store import paths

#: Bounds on what ``read_file`` answers (the model's context is the scarce resource).
MAX_READ_LINES = 2_000
MAX_LINE_CHARS = 2_000


class Written(TypedDict):
    """What ``write_file`` answers."""

    call_id: str
    path: str
    bytes: int
    changed: bool


class Edited(TypedDict):
    """What ``edit_file`` answers."""

    call_id: str
    path: str
    replacements: int


class FileTools(WorkspaceState):
    """The file tools (a mixin of :class:`sandbox.mcp.workspace.Workspace`)."""

    def read_file(self, path: str, offset: int = 1, limit: int | None = None) -> str:
        """Lines ``offset``.. (1-based, at most ``limit``) of a text file, numbered like ``cat -n``."""
        run = self.require_run()
        if offset < 1:
            raise UsageError("offset is the first line to read, counted from 1.")
        limit = MAX_READ_LINES if limit is None else limit
        if limit < 1:
            raise UsageError("limit is the number of lines to read; give at least 1.")
        rel, fd = open_path(run, path, os.O_RDONLY)
        data = read_fd(rel, fd)
        if b"\0" in data[:8192]:
            return f"{rel} is a binary file ({len(data)} bytes); it is not shown."
        lines = data.decode("utf-8", errors="replace").splitlines()
        if not lines:
            return f"{rel} is empty."
        if offset > len(lines):
            raise UsageError(f"{rel} has {len(lines)} lines; offset {offset} is past its end.")
        end = min(len(lines), offset - 1 + min(limit, MAX_READ_LINES))
        out = []
        for number in range(offset, end + 1):
            line = lines[number - 1]
            if len(line) > MAX_LINE_CHARS:
                line = line[:MAX_LINE_CHARS] + f" [... {len(line) - MAX_LINE_CHARS} more characters]"
            out.append(f"{number:>6}\t{line}")
        if end < len(lines):
            out.append(f"[{len(lines) - end} more lines: read with offset={end + 1}]")
        return "\n".join(out)

    def write_file(
        self,
        path: str,
        content: str,
        request_id: str | int | None = None,
        client_call: str | None = None,
        agent_session: str | None = None,
    ) -> Written:
        """Write ``content`` to ``path`` (created with its directories) as one recorded call.

        ``client_call``, ``agent_session``: the client's id of the tool call and its session (from
        the request's ``_meta``), recorded with the call.
        """
        with self.lock:
            run = self.require_run()
            rel = relative(run, path)
            paths.check_parents(run.worktree, rel)  # refused before anything is recorded
            data = content.encode("utf-8")
            spec = {"path": rel, "bytes": len(data)}
            call_id = self.call_id_for(request_id, client_call)
            done = self._record_write(
                run, "write_file", spec, rel, data, call_id, agent_session, ("idempotent", "auto")
            )
            return {"call_id": done.call_id, "path": rel, "bytes": len(data), "changed": bool(done.files)}

    def edit_file(
        self,
        path: str,
        old_string: str,
        new_string: str,
        replace_all: bool = False,
        request_id: str | int | None = None,
        client_call: str | None = None,
        agent_session: str | None = None,
    ) -> Edited:
        """Replace ``old_string`` by ``new_string`` in ``path`` as one recorded call.

        The agents' Edit semantics: ``old_string`` must occur exactly once unless ``replace_all``,
        must differ from ``new_string``, and the file must exist. Nothing is recorded when the
        edit is refused (it changes nothing).
        """
        with self.lock:
            run = self.require_run()
            if old_string == "":
                raise UsageError("old_string is empty; to create or overwrite a whole file use write_file.")
            if old_string == new_string:
                raise UsageError("old_string and new_string are the same; the edit would change nothing.")
            rel, fd = open_path(run, path, os.O_RDONLY)
            text = read_fd(rel, fd).decode("utf-8", errors="surrogateescape")
            count = text.count(old_string)
            if count == 0:
                raise SandboxError(
                    f"old_string was not found in {rel}; read the file and copy the text exactly "
                    "(whitespace and indentation included)."
                )
            if count > 1 and not replace_all:
                raise SandboxError(
                    f"old_string occurs {count} times in {rel}; give more surrounding text to make it unique, "
                    "or set replace_all to replace every occurrence."
                )
            updated = text.replace(old_string, new_string) if replace_all else text.replace(old_string, new_string, 1)
            spec = {"path": rel, "old_string": old_string, "new_string": new_string, "replace_all": replace_all}
            call_id = self.call_id_for(request_id, client_call)
            new = updated.encode("utf-8", errors="surrogateescape")
            done = self._record_write(run, "edit_file", spec, rel, new, call_id, agent_session, ("conditional", "ask"))
            return {"call_id": done.call_id, "path": rel, "replacements": count if replace_all else 1}

    def _record_write(
        self,
        run: Run,
        tool: str,
        spec: Mapping[str, object],
        rel: str,
        data: bytes,
        call_id: str,
        agent_session: str | None,
        policy: tuple[str, str],
    ) -> Recorded:
        """Write ``rel`` as one recorded call (by the run's recorder, or by the host inside a sandbox);
        a call whose same input the user denied is refused and recorded ``not_run``."""
        summary = f"{'write' if tool == 'write_file' else 'edit'} {rel}"
        if self.hosted is not None:
            return self._write_through_host(self.hosted, run, tool, spec, rel, data, call_id, agent_session, policy)
        self.refuse_if_denied(run, tool, spec, call_id, agent_session, summary)
        with run.tool_call(
            tool,
            spec,
            call_id=call_id,
            idempotency=policy[0],
            replay=policy[1],
            summary=summary,
            agent_session=agent_session,
        ) as call:
            write_path(run, call, rel, data)
        assert call.entry is not None
        return Recorded(call.entry.call_id, call.entry.status.value, len(call.entry.files))

    @staticmethod
    def _write_through_host(
        hosted: HostLedger,
        run: Run,
        tool: str,
        spec: Mapping[str, object],
        rel: str,
        data: bytes,
        call_id: str,
        agent_session: str | None,
        policy: tuple[str, str],
    ) -> Recorded:
        """Write ``rel`` as one call the host records: started before the file is touched (a denied
        input is refused there), finished with exactly that path (failed with the reason when the
        write was refused)."""
        verb = "write" if tool == "write_file" else "edit"
        hosted.start(
            tool,
            spec,
            call_id=call_id,
            kind="write",
            idempotency=policy[0],
            replay=policy[1],
            summary=f"{verb} {rel}",
            agent_session=agent_session,
            paths=[rel],
        )
        try:
            write_path(run, None, rel, data)
        except SandboxError as exc:
            hosted.finish(
                tool,
                spec,
                call_id=call_id,
                kind="write",
                succeeded=False,
                agent_session=agent_session,
                paths=[rel],
                error=f"{type(exc).__name__}: {exc.message}",
            )
            raise
        return hosted.finish(
            tool, spec, call_id=call_id, kind="write", succeeded=True, agent_session=agent_session, paths=[rel]
        )
