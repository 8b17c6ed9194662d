"""A command's output as evidence: the tail of each stream it wrote, kept with the call.

``log --call`` saying "exit code 1" and nothing of the failing test is no evidence. Each command call
(``sandbox exec``, ``sandbox mcp``'s ``run_command``, an agent's shell tool reported by its hook)
keeps the last :data:`LIMIT` bytes of each stream: as blobs attached to the call's finish event (the
event commit's tree, as a large result is), named in the call's result under :data:`KEY`::

    {"exit_code": 1, "output_tail": {"stdout": {"bytes": 81234, "kept": 65536, "blob": "<sha>"}, ...}}

``bytes`` is how much the stream carried in all, ``kept`` how much of its end is in the blob. The
result stays small (a few hundred bytes), so it stays inline and every reader of ``exit_code`` is
unchanged; a ledger without the key is one written before output was kept. The streams are
``stdout`` and ``stderr``, or ``output`` where one pipe got both (``run_command``'s answer).

The bytes are the command's, unchanged: whoever shows them escapes them (:func:`shown`).
"""

from __future__ import annotations

import os
import threading
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    from sandbox.models import LedgerEntry
    from sandbox.run.core import RunCore

#: Bytes kept of each stream's end.
LIMIT = 64 * 1024
#: The key of a command call's result that names its output's tails.
KEY = "output_tail"
#: The key of a reported result that carries both streams in one text (``sandbox mcp`` in a sandbox).
OUTPUT_TEXT = "sandbox_output"
#: The keys of a reported command result that hold a stream's text, and the stream each is.
TEXTS = {"stdout": "stdout", "stderr": "stderr", OUTPUT_TEXT: "output", "llmContent": "output"}
#: The streams, in the order they are shown.
STREAMS = ("stdout", "stderr", "output")


class StreamTail(TypedDict):
    """One stream's tail as the call's result names it."""

    bytes: int
    kept: int
    blob: str


@dataclass
class Tail:
    """The last :data:`LIMIT` bytes written to one stream, and how many were written in all."""

    kept: bytearray = field(default_factory=bytearray)
    total: int = 0

    def feed(self, chunk: bytes) -> None:
        """Add what the stream carried next."""
        self.total += len(chunk)
        self.kept += chunk
        if len(self.kept) > LIMIT:
            del self.kept[: len(self.kept) - LIMIT]

    @classmethod
    def of(cls, data: bytes | str) -> Tail:
        """The tail of a whole stream given at once (an agent's tool result)."""
        raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
        tail = cls()
        tail.feed(raw)
        return tail

    @classmethod
    def of_file(cls, f: IO[bytes]) -> Tail:
        """The tail of a file a command wrote (``run_command``'s temporary file), read from its end."""
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - LIMIT))
        tail = cls(bytearray(f.read(LIMIT)), size)
        f.seek(0)
        return tail


def tee(fd: int, into: IO[bytes] | None, tail: Tail, clean: Callable[[bytes], bytes] | None = None) -> threading.Thread:
    """Copy what comes from ``fd`` to ``into`` (the user's terminal) as it comes, keeping its tail; a
    started thread that closes ``fd`` at the stream's end. ``clean``: what of each chunk ``into`` gets
    (the tail keeps the chunk as it came)."""

    def pump() -> None:
        sink = into
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # a pseudo-terminal whose every writer is gone says EIO: the end
                break
            if not chunk:
                break
            tail.feed(chunk)
            if sink is not None:
                try:
                    sink.write(chunk if clean is None else clean(chunk))
                except (OSError, ValueError):  # the terminal went away: keep recording
                    sink = None
        os.close(fd)

    thread = threading.Thread(target=pump, name="sandbox-tee", daemon=True)
    thread.start()
    return thread


def split(result: Any) -> tuple[Any, dict[str, Tail]]:
    """A command call's result as an agent's hook (or ``sandbox exec`` through the host) reports it: the
    streams in it taken out as tails, and the rest.

    ``stdout``/``stderr`` strings: Claude Code's Bash ``tool_response``, ``sandbox exec``'s finish.
    ``llmContent`` (with ``returnDisplay``, the same text for the screen): Gemini CLI's
    ``run_shell_command``, whose one text holds both streams. :data:`OUTPUT_TEXT`: ``sandbox mcp``'s
    ``run_command`` inside a sandbox (both streams, as one pipe got them).
    """
    if not isinstance(result, dict):
        return result, {}
    rest = dict(result)
    found: dict[str, Tail] = {}
    for key, stream in TEXTS.items():
        if stream in found or not isinstance(rest.get(key), str):
            continue
        found[stream] = Tail.of(rest.pop(key))
        # Its whole size, sent with a tail (cut by the hook, or sandbox.agent.hosted.with_output).
        total = rest.pop(f"{key}_bytes", None)
        if isinstance(total, int) and total > found[stream].total:
            found[stream].total = total
        if key == "llmContent" and isinstance(rest.get("returnDisplay"), str):
            rest.pop("returnDisplay")
    return rest, found


def attach(result: Any, output: Mapping[str, Tail]) -> tuple[Any, dict[str, bytes]]:
    """The call's result naming the tails, and the blobs to attach to its finish event (by name)."""
    import pygit2

    if not output:
        return result, {}
    named: dict[str, StreamTail] = {}
    blobs: dict[str, bytes] = {}
    for stream, tail in output.items():
        data = bytes(tail.kept)
        named[stream] = StreamTail(bytes=tail.total, kept=len(data), blob=str(pygit2.hash(data)))
        blobs[f"{stream}.tail"] = data
    base = dict(result) if isinstance(result, dict) else ({} if result is None else {"response": result})
    base[KEY] = named
    return base, blobs


def tails(result: Any) -> dict[str, StreamTail]:
    """The tails a call's result names (none for a call recorded before output was kept)."""
    found = result.get(KEY) if isinstance(result, dict) else None
    if not isinstance(found, dict):
        return {}
    out: dict[str, StreamTail] = {}
    for stream in STREAMS:
        t = found.get(stream)
        if isinstance(t, dict) and isinstance(t.get("blob"), str):
            total, kept = t.get("bytes"), t.get("kept")
            if isinstance(total, int) and isinstance(kept, int):
                out[stream] = StreamTail(bytes=total, kept=kept, blob=t["blob"])
    return out


def read(run: RunCore, entry: LedgerEntry) -> dict[str, tuple[StreamTail, bytes]]:
    """Each stream's tail of a call, with its bytes; a blob that cannot be read is left out."""
    import pygit2

    from sandbox.store import objects

    out: dict[str, tuple[StreamTail, bytes]] = {}
    for stream, t in tails(entry.result).items():
        try:
            out[stream] = (t, objects.read_blob(run.repo, t["blob"]))
        except (KeyError, ValueError, pygit2.GitError):
            continue
    return out


def shown(data: bytes) -> str:
    """Output as text safe to show: invalid UTF-8 as ``\\xNN``, control, bidi and zero-width characters
    as ``\\u....`` escapes (a terminal escape sequence or a reordering character in a test's output
    must not act on the reader's screen); newlines and tabs kept."""
    text = data.decode("utf-8", "backslashreplace")
    out = []
    for ch in text:
        if ch in "\n\t" or (ch.isprintable() and unicodedata.category(ch) != "Cf"):
            out.append(ch)
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x100:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(f"\\u{ord(ch):04x}")
    return "".join(out)


def cut_note(t: StreamTail) -> str:
    """ "" when the whole stream is kept, else a line saying how much came before the tail."""
    if t["kept"] >= t["bytes"]:
        return ""
    return f"[the first {t['bytes'] - t['kept']} of {t['bytes']} bytes are not kept]"
