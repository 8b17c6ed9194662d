"""The finding tools of ``sandbox mcp``: ``list_files`` (a directory, or the files matching a glob) and ``search``.

Neither changes anything, so neither is recorded: a ledger call per read would grow the ledger with
the model's browsing and cost a durable append (several fsyncs) on every look. Both open what they
show beneath the worktree (:mod:`sandbox.mcp.worktree`), so a symlink a command of the model's
swapped in never leads them out.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator

from sandbox.errors import UsageError
from sandbox.mcp.state import WorkspaceState
from sandbox.mcp.worktree import MAX_READ_BYTES, open_path, open_worktree
from sandbox.store import beneath

#: Bounds on what one answer carries (the model's context is the scarce resource).
MAX_LIST = 1_000
MAX_SEARCH = 200


class FindTools(WorkspaceState):
    """The finding tools (a mixin of :class:`sandbox.mcp.workspace.Workspace`)."""

    def list_files(self, path: str = ".", pattern: str | None = None) -> str:
        """The entries of a directory (``pattern`` None), or the files below it matching a glob."""
        run = self.require_run()
        rel, fd = open_path(run, path, os.O_RDONLY | os.O_DIRECTORY, allow_root=True)
        try:
            if pattern is None:
                names = []
                for name in sorted(os.listdir(fd)):
                    if name.lower() == ".git":
                        continue
                    kind = _kind_at(fd, name)
                    names.append(name + ("/" if kind == "dir" else "@" if kind == "link" else ""))
                return _bounded_list(names, f"{rel or '.'} is empty.")
            regex = glob_regex(pattern)
            found = []
            for sub in _walk_files(fd, ""):
                if regex.fullmatch(sub):
                    found.append(sub if not rel else f"{rel}/{sub}")
                    if len(found) > MAX_LIST:
                        break
            return _bounded_list(found, f"No file matches {pattern!r}.")
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
        from sandbox.store import gitcli, gitfiles

        run = self.require_run()
        rel, fd = open_path(run, path, os.O_RDONLY, allow_root=True)
        os.close(fd)
        # git grep --untracked and ls-files read every .gitignore, info/exclude and core.excludesFile:
        # one the model made a FIFO would block this (unconfined) server for ever (sandbox.store.gitfiles).
        odd = None if gitfiles.repository_plain(run.worktree) else ".git"
        odd = odd or gitfiles.tree_rules_plain(run.worktree, (".gitignore",))
        if odd is not None:
            raise UsageError(f"The search cannot read the worktree's ignore rules: {odd} is not a regular file.")
        try:
            regex = re.compile(pattern.encode("utf-8", "surrogateescape"), re.IGNORECASE if ignore_case else 0)
        except re.error as exc:
            raise UsageError(f"The search pattern is not a regular expression: {exc}.") from None
        limit = max(1, min(max_results, 1000))
        spec = rel or "."
        pathspecs = [f":(glob){rel + '/' if rel else ''}{glob if '/' in glob else '**/' + glob}"] if glob else [spec]
        grep = ["grep", "-l", "-z", "-I", "--untracked", "--full-name", *(["-i"] if ignore_case else [])]
        proc = gitcli.git([*grep, "-P", "-e", pattern, "--", *pathspecs], run.worktree, check=False)
        if proc.returncode == 1:
            return f"No line matches {pattern!r}."
        if proc.returncode != 0:  # a git without PCRE, or a pattern PCRE reads otherwise: every file
            listing = ["ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *pathspecs]
            proc = gitcli.git(listing, run.worktree, check=False)
        if proc.returncode != 0:
            detail = proc.stderr.decode(errors="replace").strip().splitlines()
            raise UsageError(f"The search failed: {detail[-1] if detail else 'exit ' + str(proc.returncode)}.")
        names = sorted({os.fsdecode(n) for n in proc.stdout.split(b"\0") if n})
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
        return "\n".join(lines)


# -- helpers -----------------------------------------------------------------------------------


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A glob as a regular expression over ``/``-separated relative paths.

    ``*`` and ``?`` stay within a name, ``**`` crosses directories, ``[...]`` is a class; a
    pattern without ``/`` matches a file name at any depth (``*.py`` is ``**/*.py``).
    """
    if "/" not in pattern and "**" not in pattern:
        pattern = "**/" + pattern
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = pattern.find("]", i + 1)
            if end == -1:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : end]
                out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
                i = end
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out))


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


def _kind_at(dirfd: int, name: str) -> str:
    try:
        st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except OSError:
        return "file"
    if stat.S_ISLNK(st.st_mode):
        return "link"
    return "dir" if stat.S_ISDIR(st.st_mode) else "file"


def _walk_files(dirfd: int, base: str) -> Iterator[str]:
    """Every file below the directory ``dirfd`` (not ``.git``), as ``/``-separated paths, a
    directory's files before its subdirectories, by name; each subdirectory opened with
    ``O_NOFOLLOW | O_DIRECTORY`` relative to its parent (a symlink or FIFO swapped in is skipped)."""
    try:
        with os.scandir(dirfd) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError:
        return
    subdirs = []
    for entry in entries:
        if entry.name.lower() == ".git":
            continue
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            continue
        if is_dir:
            subdirs.append(entry.name)
        else:
            yield entry.name if not base else f"{base}/{entry.name}"
    for name in subdirs:
        try:
            sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirfd)
        except OSError:
            continue
        try:
            yield from _walk_files(sub, name if not base else f"{base}/{name}")
        finally:
            os.close(sub)


def _bounded_list(items: list[str], empty: str) -> str:
    if not items:
        return empty
    if len(items) > MAX_LIST:
        return "\n".join(items[:MAX_LIST]) + f"\n[more than {MAX_LIST} entries; narrow the path or the pattern]"
    return "\n".join(items)
