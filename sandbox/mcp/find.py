"""The finding tools of ``sandbox mcp``: ``list_files`` (a directory, or the files matching a glob) and ``search``.

Neither changes anything, so neither is recorded: a ledger call per read would grow the ledger with
the model's browsing and cost a durable append (several fsyncs) on every look. Both open what they
show beneath the worktree (:mod:`sandbox.mcp.worktree`), so a symlink a command of the model's
swapped in never leads them out. A glob's walk (:class:`FileWalk`) is iterative and bounded, and
does not enter the directories the ignore rules exclude (``node_modules``, ``.venv``), which the
answer names.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Callable, Generator
from dataclasses import dataclass, field

from sandbox.errors import UsageError
from sandbox.mcp import searchgit
from sandbox.mcp.state import WorkspaceState
from sandbox.mcp.worktree import MAX_READ_BYTES, open_path, open_worktree
from sandbox.run.run import Run
from sandbox.store import beneath

#: Bounds on what one answer carries (the model's context is the scarce resource).
MAX_LIST = 1_000
MAX_SEARCH = 200
#: The most directory entries one ``list_files`` reads (its walk, or one directory) before it answers
#: with what it found.
MAX_VISIT = 100_000


class FindTools(WorkspaceState):
    """The finding tools (a mixin of :class:`sandbox.mcp.workspace.Workspace`)."""

    #: The most directory entries one ``list_files`` reads, with a pattern (the walk) or without (one
    #: directory: a model's build can put millions of files in one).
    max_visit: int = MAX_VISIT
    #: Seconds the git of one ``search`` may take before it is killed and the search refused.
    search_deadline: float = searchgit.SEARCH_DEADLINE

    def list_files(self, path: str = ".", pattern: str | None = None) -> str:
        """The entries of a directory (``pattern`` None), or the files below it matching a glob."""
        run = self.require_run()
        rel, fd = open_path(run, path, os.O_RDONLY | os.O_DIRECTORY, allow_root=True)
        try:
            if pattern is None:
                names, cut = _directory(fd, self.max_visit)
                listing = _bounded_list(names, f"{rel or '.'} is empty.")
                if cut:
                    listing += (
                        f"\n[{rel or '.'} has more than {self.max_visit} entries: the names above are drawn from the "
                        f"first {self.max_visit} entries read (in the directory's own order), so a name missing here "
                        "may still exist; give a pattern or a deeper path]"
                    )
                return sendable(listing)
            regex = glob_regex(pattern)
            found = []
            walk = FileWalk(IgnoreRules(run, rel), max_entries=self.max_visit)
            with contextlib.closing(walk.files(fd)) as files:
                for sub in files:
                    if regex.fullmatch(sub):
                        found.append(sub if not rel else f"{rel}/{sub}")
                        if len(found) > MAX_LIST:
                            break
            return sendable(_bounded_list(found, f"No file matches {pattern!r}.") + _walk_notes(walk, rel))
        finally:
            os.close(fd)

    def search(
        self,
        pattern: str,
        path: str = ".",
        glob: str | None = None,
        ignore_case: bool = False,
        max_results: int = MAX_SEARCH,
    ) -> str:
        """Lines matching a regular expression (Python's ``re``) in the tracked, new and untracked
        files not ignored by ``.gitignore``, as ``path:line:text``; at most ``max_results`` lines.

        git finds the files that may match (``git grep -l``: the fastest way over a large worktree;
        only names come out of it), and each one is then opened beneath the worktree
        (:mod:`sandbox.store.beneath`) and read here: the lines shown come from a file inside, even
        when a command of the model's flips a directory to a symlink while git reads (git opens the
        paths it walks, and would follow it). A pattern git cannot take (PCRE and Python differ a
        little) falls back to every file ``ls-files`` lists."""
        run = self.require_run()
        rel, fd = open_path(run, path, os.O_RDONLY, allow_root=True)
        os.close(fd)
        # Its git runs where the model's commands run, bounded in time (sandbox.mcp.searchgit).
        isolation = None
        if self.hosted is None and self.settings.isolation is not None:  # hosted: in the sandbox already
            isolation = self.settings.isolation(run.user_workdir)
        confined = searchgit.confinement(run, isolation)
        odd = searchgit.blocking_file(run, confined)
        if odd is not None:
            raise UsageError(f"The search cannot read the worktree's git rules: {odd} is not a regular file.")
        try:
            regex = re.compile(pattern.encode("utf-8", "surrogateescape"), re.IGNORECASE if ignore_case else 0)
        except re.error as exc:
            raise UsageError(f"The search pattern is not a regular expression: {exc}.") from None
        limit = max(1, min(max_results, 1000))
        spec = rel or "."
        pathspecs = [f":(glob){rel + '/' if rel else ''}{glob if '/' in glob else '**/' + glob}"] if glob else [spec]
        grep = ["grep", "-l", "-z", "-I", "--untracked", "--full-name", *(["-i"] if ignore_case else [])]
        code, out, err = searchgit.run_git(
            run, confined, [*grep, "-P", "-e", pattern, "--", *pathspecs], self.search_deadline
        )
        if code == 1:
            return f"No line matches {pattern!r}."
        if code != 0 and b"limit exceeded" in err:
            # PCRE gave up backtracking (its match, depth or heap limit). Python's re has no limit and
            # holds the GIL: the same pattern over every file would stop this server for ever.
            raise UsageError(
                f"The search pattern {pattern!r} backtracks past PCRE's limit on some line (nested repeats such "
                "as '(a+)+'); simplify it."
            )
        if code != 0:  # a git without PCRE, or a pattern PCRE reads otherwise: every file
            listing = ["ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *pathspecs]
            code, out, err = searchgit.run_git(run, confined, listing, self.search_deadline)
        if code != 0:
            detail = err.decode(errors="replace").strip().splitlines()
            raise UsageError(f"The search failed: {detail[-1] if detail else 'exit ' + str(code)}.")
        names = sorted({os.fsdecode(n) for n in out.split(b"\0") if n})
        lines: list[str] = []
        more = left = 0
        root = open_worktree(run)
        try:
            for done, name in enumerate(names, 1):
                for number, text in _matching_lines(root, name, regex):
                    if len(lines) < limit:
                        line = f"{name}:{number}:{text}"
                        lines.append(line if len(line) <= 400 else line[:400] + " [...]")
                    else:
                        more += 1
                if more:  # the answer is full: the files left are not read (git found they may match)
                    left = len(names) - done
                    break
        finally:
            os.close(root)
        if not lines:
            return f"No line matches {pattern!r}."
        if more:
            where = f", and maybe in {left} more files" if left else ""
            lines.append(f"[{more} more matching lines{where}; narrow the pattern, path or glob]")
        return sendable("\n".join(lines))


# -- helpers -----------------------------------------------------------------------------------


def sendable(text: str) -> str:
    """``text`` with each byte of a name that is not UTF-8 (read as a lone surrogate) shown as ``\\xNN``:
    an answer is sent as UTF-8 JSON, and one lone surrogate made the SDK fail the whole answer."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate no file name gives (the model's own text echoed): as an escape
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def glob_regex(pattern: str) -> Glob:
    """A glob as a test of ``/``-separated relative paths (its :meth:`Glob.fullmatch`).

    ``*`` and ``?`` stay within a name, ``**`` crosses directories, ``[...]`` is a class; a
    pattern without ``/`` matches a file name at any depth (``*.py`` is ``**/*.py``). The pattern
    is the model's: a pattern Python's ``re`` would backtrack on for hours (``*a*a*a*a*a*a*a*b``
    over a long name: 8 s for 7 stars over 60 characters, and ``re`` holds the GIL, so the whole
    server stops) is run as a set of states instead, one step per character (:class:`Glob`).
    """
    if "/" not in pattern and "**" not in pattern:
        pattern = "**/" + pattern
    # (kind, regex of one character): "char", "star", or "opt" (where an optional ``**/`` begins: no character)
    tokens: list[tuple[str, str]] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            # (?:.*/)?: any characters, then '/', or nothing at all
            tokens += [("opt", ""), ("star", "."), ("char", "/")]
            i += 3
            continue
        if pattern.startswith("**", i):
            tokens.append(("star", "."))
            i += 2
            continue
        if c == "*":
            tokens.append(("star", "[^/]"))
        elif c == "?":
            tokens.append(("char", "[^/]"))
        elif c == "[" and pattern.find("]", i + 2) != -1:
            end = pattern.find("]", i + 2)
            tokens.append(("char", _class(pattern[i + 1 : end], pattern)))
            i = end
        else:
            tokens.append(("char", re.escape(c)))
        i += 1
    return Glob(tokens)


def _class(body: str, pattern: str) -> str:
    """A glob's ``[...]`` (``body`` between the brackets) as a regular expression's class: ``!`` or
    ``^`` first negates, ``a-z`` is a range, every other character is itself."""
    negate = body[:1] in ("!", "^")
    body = body[1:] if negate else body
    parts, i = [], 0
    while i < len(body):
        if i + 2 < len(body) and body[i + 1] == "-":
            if body[i] > body[i + 2]:
                raise UsageError(f"The pattern {pattern!r} has a range {body[i : i + 3]!r} that runs backwards.")
            parts.append(f"{re.escape(body[i])}-{re.escape(body[i + 2])}")
            i += 3
        else:
            parts.append(re.escape(body[i]))
            i += 1
    # A negated class stays within a name, as ``?`` does.
    return "[" + ("^/" if negate else "") + "".join(parts) + "]" if parts else ("[^/]" if negate else "(?!)")


class Glob:
    """A compiled glob: Python's ``re`` where that is safe (at most two stars: a path of n characters
    costs at most n**2 steps), else the pattern's positions as bits of an integer advanced once per
    character (a Thompson simulation: steps grow with the path times the pattern, never exponentially)."""

    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens = tokens
        self.classes = [re.compile(t, re.DOTALL) for _k, t in tokens]
        stars = sum(1 for k, _t in tokens if k == "star")
        pieces = {"char": "{}", "star": "{}*", "opt": "(?:"}
        #: The glob as a regular expression (used when it has at most two stars).
        self.text = "".join(
            pieces[k].format(t) + (")?" if i > 1 and tokens[i - 2][0] == "opt" else "")
            for i, (k, t) in enumerate(tokens)
        )
        self.regex = re.compile(self.text, re.DOTALL) if stars <= 2 else None
        self._star = sum(1 << i for i, (k, _t) in enumerate(tokens) if k != "char")
        # The entry of a ``**/`` goes on into it, or past all of it (its three positions); it takes no character.
        self._opt = sum(1 << i for i, (k, _t) in enumerate(tokens) if k == "opt")
        self._accept = 1 << len(tokens)
        self._masks: dict[str, tuple[int, int]] = {}

    def fullmatch(self, path: str) -> bool:
        """True when all of ``path`` matches."""
        if self.regex is not None:
            return self.regex.fullmatch(path) is not None
        states = self._closure(1)
        for c in path:
            masks = self._masks.get(c)
            if masks is None:
                masks = self._masks[c] = self._char_masks(c)
            one, loop = masks
            states = self._closure(((states & one) << 1) | (states & loop))
            if not states:
                return False
        return bool(states & self._accept)

    def _char_masks(self, c: str) -> tuple[int, int]:
        """(the positions a character ``c`` steps past, the star positions it stays in)."""
        one = loop = 0
        for i, ((kind, _t), cls) in enumerate(zip(self.tokens, self.classes, strict=True)):
            if cls.fullmatch(c):
                if kind == "char":
                    one |= 1 << i
                elif kind == "star":
                    loop |= 1 << i
        return one, loop

    def _closure(self, states: int) -> int:
        """``states`` with every position reachable from them without a character: past a star, past an
        optional ``**/``."""
        while True:
            more = states | ((states & self._star) << 1) | ((states & self._opt) << 3)
            if more == states:
                return states
            states = more


def _matching_lines(root: int, name: str, regex: re.Pattern[bytes]) -> list[tuple[int, str]]:
    """(line number, text) of the lines of ``name`` (beneath ``root``) that ``regex`` finds; none
    for what is not a regular text file of at most :data:`MAX_READ_BYTES` (``git grep -I``), a
    symlink, a path that leads out, or into ``.git``."""
    try:
        fd = beneath.open_beneath(root, name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return []  # gone, a symlink (git grep reads none either), or leading out: nothing to show
    try:
        inside = beneath.relative(root, fd)
        st = os.fstat(fd)
        if inside is None or ".git" in inside.lower().split("/") or not stat.S_ISREG(st.st_mode):
            return []
        if st.st_size > MAX_READ_BYTES:
            return []
        os.set_blocking(fd, True)
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(MAX_READ_BYTES)
    except OSError:
        return []
    finally:
        os.close(fd)
    if b"\0" in data[:8000]:
        return []
    out = []
    for number, line in enumerate(data.split(b"\n"), 1):
        if regex.search(line):
            out.append((number, line.rstrip(b"\r").decode("utf-8", errors="replace")))
    if out and data.endswith(b"\n") and out[-1][0] > data.count(b"\n"):
        out.pop()  # the empty "line" after the last newline
    return out


def _directory(fd: int, max_entries: int) -> tuple[list[str], bool]:
    """The entries of the directory ``fd`` by name (``name/`` a directory, ``name@`` a symlink, no
    ``.git``), from at most ``max_entries`` read; True when there were more (the list is cut)."""
    names = []
    seen = 0
    with os.scandir(fd) as it:
        for entry in it:
            seen += 1
            if seen > max_entries:
                break
            if entry.name.lower() == ".git":
                continue
            names.append(entry.name + _mark(entry))
    names.sort()
    return names, seen > max_entries


def _mark(entry: os.DirEntry[str]) -> str:
    """``/`` for a directory, ``@`` for a symlink, nothing for anything else (from the entry's type:
    no stat per name unless the file system does not say)."""
    try:
        if entry.is_symlink():
            return "@"
        return "/" if entry.is_dir(follow_symlinks=False) else ""
    except OSError:
        return ""


def _walk_notes(walk: FileWalk, rel: str) -> str:
    """What the answer of a glob left out, in lines for the model: ignored directories, a cut walk."""
    notes = ""
    if walk.pruned:
        shown = ", ".join((f"{rel}/{p}" if rel else p) + "/" for p in walk.pruned[:5])
        more = f" and {len(walk.pruned) - 5} more" if len(walk.pruned) > 5 else ""
        notes += f"\n[not looked into, ignored by .gitignore: {shown}{more}; name one as path to list its files]"
    if walk.too_deep:
        notes += (
            f"\n[{walk.too_deep} directories nested more than {MAX_HELD} levels below others were not looked into; "
            "name a deeper path to list its files]"
        )
    if walk.cut is not None:
        notes += f"\n[the walk {walk.cut}; the files above are the first found; narrow the path or the pattern]"
    return notes


def _bounded_list(items: list[str], empty: str) -> str:
    if not items:
        return empty
    if len(items) > MAX_LIST:
        return "\n".join(items[:MAX_LIST]) + f"\n[more than {MAX_LIST} entries; narrow the path or the pattern]"
    return "\n".join(items)


# -- the walk of list_files --------------------------------------------------------------------

#: Deeper than this the ignore rules are not asked: libgit2's check grows with the cube of a path's
#: depth (measured: 1 ms for all of a 50-deep chain, 2 s for a 400-deep one). Such directories are
#: walked, within :data:`MAX_VISIT`.
IGNORE_DEPTH = 64
#: The most directory descriptors one walk holds (one per level that still has subdirectories to
#: visit): a tree both wide and nested deeper is cut there, in words, rather than failing on EMFILE.
MAX_HELD = 256

_SUBDIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class IgnoreRules:
    """Whether a directory of the run's worktree is excluded by its ignore rules, as the run's
    recording decides (:meth:`sandbox.run.core.RunCore.is_ignored`: libgit2's ``path_is_ignored`` on the
    host's copies of the rule files, read by descriptor: a FIFO the model swapped in would otherwise block
    this unconfined server)."""

    def __init__(self, run: Run, start: str) -> None:
        #: What asks; None when nothing is excluded (the walk starts inside an ignored directory).
        self._ask: Callable[[str], bool] | None = run.is_ignored
        #: The walk's start, relative to the worktree ("" for its top).
        self.start = start
        # Asked to look inside an ignored directory: everything below it is ignored too, and wanted.
        if start and self.excludes(""):
            self._ask = None

    def excludes(self, sub: str) -> bool:
        """True when the directory ``sub`` (relative to :attr:`start`) is ignored; False when unsure."""
        if self._ask is None:
            return False
        rel = "/".join(p for p in (self.start, sub) if p)
        return self._ask(f"{rel}/")


@dataclass
class _Dir:
    """A directory of the walk whose subdirectories are not all visited yet."""

    fd: int
    #: False for the caller's descriptor (the walk's start), which it never closes.
    owned: bool
    base: str
    depth: int
    #: True while every ``.gitignore`` from the start down to here is a plain file (or absent).
    plain: bool
    #: Subdirectory names still to visit, the next one last.
    todo: list[str]


@dataclass
class FileWalk:
    """One walk of the files below a directory, for ``list_files``.

    Iterative (an explicit stack: a tree nested deeper than Python recurses is walked, with one
    descriptor held per level that still has subdirectories to visit, so a deep chain holds one);
    never through a symlink (each subdirectory is opened with ``O_NOFOLLOW | O_DIRECTORY`` relative
    to its parent: a symlink, a loop of them, or a FIFO swapped in is not entered); not into
    ``.git`` nor into a directory the ignore rules exclude (``node_modules``, ``.venv``: skipped
    before they are read); at most ``max_entries`` entries visited. A directory's files come
    first, then its subdirectories', each by name: one tree always lists in the same order.
    """

    ignore: IgnoreRules | None = None
    max_entries: int = MAX_VISIT
    #: Directory entries read so far (files, directories, links; skipped or not).
    visited: int = 0
    #: Ignored directories not entered, relative to the start, in the order met.
    pruned: list[str] = field(default_factory=list)
    #: Why the walk stopped before the end (None: it saw everything it may see).
    cut: str | None = None
    #: Directories not entered because :data:`MAX_HELD` levels above them were still open.
    too_deep: int = 0

    def files(self, dirfd: int, base: str = "") -> Generator[str, None, None]:
        """The files below ``dirfd`` (the caller's descriptor, left open), as ``/``-separated paths
        under ``base``. Close the iterator (or exhaust it) to release the descriptors it holds."""
        read = self._read(dirfd, base)
        if read is None:
            return
        files, todo = read
        yield from files
        stack = [_Dir(dirfd, False, base, 0, True, todo)] if todo else []
        try:
            while stack and self.cut is None:
                frame = stack[-1]
                name = frame.todo.pop()
                if not frame.todo:  # its last subdirectory: let go of it before going down (a chain holds one)
                    stack.pop()
                try:
                    sub = os.open(name, _SUBDIR_FLAGS, dir_fd=frame.fd)
                except OSError:
                    sub = -1  # gone, or swapped for a symlink or a FIFO since it was listed
                finally:
                    if not frame.todo:
                        _close(frame)
                if sub < 0:
                    continue
                rel = name if not frame.base else f"{frame.base}/{name}"
                child = _Dir(sub, True, rel, frame.depth + 1, frame.plain and _plain_at(sub, ".gitignore"), [])
                try:
                    read = None if self._excluded(child) else self._read(sub, rel)
                    if read is not None:
                        files, child.todo = read
                        yield from files
                except BaseException:  # closed while yielding its files (an answer full): not on the stack yet
                    _close(child)
                    raise
                if not child.todo:
                    _close(child)
                elif len(stack) >= MAX_HELD:
                    _close(child)
                    self.too_deep += 1
                else:
                    stack.append(child)
        finally:
            for frame in stack:
                _close(frame)

    def _excluded(self, d: _Dir) -> bool:
        if self.ignore is None or not d.plain or d.depth > IGNORE_DEPTH or not self.ignore.excludes(d.base):
            return False
        self.pruned.append(d.base)
        return True

    def _read(self, fd: int, base: str) -> tuple[list[str], list[str]] | None:
        """(files under ``base``, subdirectory names in reverse) of the directory ``fd``, each by
        name; None when it cannot be read or the entry budget ran out (then :attr:`cut` says so)."""
        if self.cut is not None:
            return None
        entries = []
        try:
            with os.scandir(fd) as it:
                for entry in it:
                    self.visited += 1
                    if self.visited > self.max_entries:
                        self.cut = f"stopped after visiting {self.max_entries} entries"
                        return None
                    entries.append(entry)
        except OSError:
            return None
        files, subdirs = [], []
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.name.lower() == ".git":
                continue
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if is_dir:
                subdirs.append(entry.name)
            else:
                files.append(entry.name if not base else f"{base}/{entry.name}")
        subdirs.reverse()
        return files, subdirs


def _close(frame: _Dir) -> None:
    if frame.owned:
        os.close(frame.fd)


def _plain_at(dirfd: int, name: str) -> bool:
    """True when ``name`` in ``dirfd`` (symlinks followed, as libgit2 follows them) is a regular file or absent."""
    try:
        mode = os.stat(name, dir_fd=dirfd).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:
        return False
    return stat.S_ISREG(mode)
