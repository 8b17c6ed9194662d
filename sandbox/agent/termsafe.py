"""What a command's output may do to the user's terminal: draw, not act (``sandbox exec`` on a terminal).

A terminal does more with escape sequences than draw: OSC 52 writes the clipboard, OSC 0/2 set the
window title, OSC 8 hides a link behind text, DCS and APC strings drive terminal extensions, ``CSI 6n``
or ``ESC Z`` and ENQ make it *type* an answer into whatever reads it next (the user's shell, once the
command has ended), ``ESC c`` resets it. A command of the agent's is no more trusted than its files, so
when ``sandbox exec`` copies a command's output to a terminal (:mod:`sandbox.agent.outputs`), it goes
through :class:`TerminalFilter`, which keeps what a program needs to draw (colours and other SGR
attributes, cursor movement and erasing, scroll regions, hiding the cursor, the alternate screen,
character sets for line drawing: what progress bars and test runners write) and drops every other
sequence whole:

- OSC, DCS, APC, PM and SOS strings, up to their terminator (BEL, ST, CAN or SUB), or, unterminated,
  up to :data:`STRING_LIMIT` bytes (then the rest is shown as text: the terminal never saw the opener);
- CSI sequences other than the kept ones (reports, window operations, mode changes but a few, erasing
  the scrollback);
- ESC sequences other than cursor save/restore, index and keypad and charset selection;
- the C0 controls that are not drawing (ENQ, SO/SI, ...) and the C1 controls written in UTF-8.

Only the opener of a sequence ever reaches the terminal whole or not at all, so the terminal is never
left inside a string we let through. Output that goes to a file or a pipe is not filtered (a patch must
apply; the bytes stay exact), and the call keeps the command's own bytes as its evidence (escaped when
shown). Standard library only.
"""

from __future__ import annotations

import re

#: How long an unterminated OSC/DCS/APC/PM/SOS string is swallowed before the rest is shown as text.
STRING_LIMIT = 64 * 1024
#: How long a CSI sequence may be (parameters and all) before it is dropped as garbage.
_CSI_LIMIT = 256

#: The CSI final bytes kept with plain numeric parameters: cursor movement and position, erasing,
#: inserting and deleting, scrolling and scroll regions, cursor save/restore, SGR (``m``).
_CSI_KEPT = frozenset(b"ABCDEFGHIJKLMPSTXZ@`adefmrsu")
#: The private modes kept (``CSI ? N h/l``): cursor shown, autowrap, blinking, the alternate screen.
_MODES_KEPT = frozenset({"25", "7", "12", "47", "1047", "1048", "1049"})
#: ESC and one final byte kept: save/restore cursor, keypad modes, index, next line, reverse index.
_ESC_KEPT = frozenset(b"78=>DEM")

# A token where a sequence or a control starts, matched at the first byte that is not plain text.
_SPECIAL = re.compile(rb"[\x00-\x06\x0e-\x1a\x1c-\x1f\x1b]|\xc2[\x80-\x9f]|\xc2\Z")
_CSI = re.compile(rb"\x1b\[([\x30-\x3f]*)([\x20-\x2f]*)([\x40-\x7e])")
_ESC = re.compile(rb"\x1b([\x20-\x2f]*)([\x30-\x7e])")
_STRING_OPENERS = frozenset(b"]P_^X")
_STRING_END = re.compile(rb"\x07|\x1b\\|\x18|\x1a")
_PLAIN_PARAMS = re.compile(rb"[0-9;:]*")
_MODE_PARAMS = re.compile(rb"\?[0-9;]+")


class TerminalFilter:
    """A stream's filter (see the module): :meth:`feed` each chunk as it comes, in order; a sequence
    split between chunks is held until it is whole."""

    def __init__(self) -> None:
        self._held = b""  # the start of a sequence not yet whole
        self._in_string = 0  # > 0: inside a dropped string, that many bytes swallowed so far
        self._string_esc = False  # the last byte swallowed was ESC (ST may follow)

    def feed(self, chunk: bytes) -> bytes:
        """What of ``chunk`` (with what was held) may reach the terminal now."""
        data = self._held + chunk
        self._held = b""
        out = bytearray()
        pos = 0
        end = len(data)
        while pos < end:
            if self._in_string:
                pos = self._swallow(data, pos)
                continue
            found = _SPECIAL.search(data, pos)
            if found is None:
                out += data[pos:]
                break
            out += data[pos : found.start()]
            pos = found.start()
            kept, pos, held = self._sequence(data, pos)
            if held:
                self._held = data[pos:]
                break
            out += kept
        return bytes(out)

    def _swallow(self, data: bytes, pos: int) -> int:
        """Drop a string's bytes up to its end; where the scan stopped."""
        if self._string_esc and data[pos : pos + 1] == b"\\":
            self._in_string, self._string_esc = 0, False
            return pos + 1
        stop = _STRING_END.search(data, pos)
        upto = stop.start() if stop else len(data)
        self._in_string += upto - pos
        if stop is not None:
            self._in_string, self._string_esc = 0, False
            return stop.end()
        self._string_esc = data.endswith(b"\x1b")
        if self._in_string > STRING_LIMIT:
            self._in_string, self._string_esc = 0, False  # the rest is text: the opener never went out
        return upto

    def _sequence(self, data: bytes, pos: int) -> tuple[bytes, int, bool]:
        """The special token at ``pos``: (what to keep of it, where the text goes on, whether it is
        incomplete and held for the next chunk)."""
        first = data[pos]
        if first != 0x1B:
            if first == 0xC2:  # C1 in UTF-8 (or its first byte at the chunk's end)
                return (b"", pos, True) if pos + 1 >= len(data) else (b"", pos + 2, False)
            return b"", pos + 1, False  # a C0 control that does not draw
        if pos + 1 >= len(data):
            return b"", pos, True
        second = data[pos + 1]
        if second == 0x5B:  # CSI
            csi = _CSI.match(data, pos)
            if csi is None:
                tail = data[pos + 2 : pos + _CSI_LIMIT]
                if len(data) - pos < _CSI_LIMIT and re.fullmatch(rb"[\x20-\x3f]*", tail):
                    return b"", pos, True  # not whole yet
                return b"", pos + 2, False
            params, inter, final = csi.groups()
            return (csi.group() if _csi_kept(params, inter, final) else b""), csi.end(), False
        if second in _STRING_OPENERS:
            self._in_string = 1
            return b"", pos + 2, False
        esc = _ESC.match(data, pos)
        if esc is None:
            if re.fullmatch(rb"\x1b[\x20-\x2f]*", data[pos:]) and len(data) - pos < _CSI_LIMIT:
                return b"", pos, True
            return b"", pos + 1, False
        inter, final = esc.groups()
        charset = len(inter) == 1 and inter in b"()*+"
        kept = charset or (not inter and final[0] in _ESC_KEPT)
        return (esc.group() if kept else b""), esc.end(), False


def _csi_kept(params: bytes, inter: bytes, final: bytes) -> bool:
    if inter:
        return False
    if final == b"J" and params not in (b"", b"0", b"1", b"2"):
        return False  # 3J erases the terminal's scrollback: what the user saw before
    if final[0] in _CSI_KEPT:
        return _PLAIN_PARAMS.fullmatch(params) is not None
    if final in (b"h", b"l") and _MODE_PARAMS.fullmatch(params):
        return all(mode in _MODES_KEPT for mode in params[1:].decode("ascii").split(";"))
    return False
