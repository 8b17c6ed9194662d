"""libgit2's commit walk, in the standard library: what ``git log --topo-order tips ^hidden`` lists.

``sandbox status`` shows the commits the agent made in the run's own git directory (commits
reachable from its refs and HEAD, not from the snapshot). That directory is the agent's to write,
so reading it must never block or blow up whatever the agent put there; and the fast commands must
not pay pygit2's import. This module walks commits with :mod:`sandbox.fast.gitread` (every file
opened without blocking, regular files only, sizes bounded, every object checked against its id)
and reproduces libgit2's (v1.9) revwalk with ``GIT_SORT_TOPOLOGICAL | GIT_SORT_TIME`` and hidden
commits exactly, down to the order of commits with equal times: its limit pass (git's
interesting/uninteresting walk, which stops a few commits after only uninteresting ones are left,
so the user's history below the snapshot is not walked), its topological sort and its binary heap.
tests/fast/test_revwalk.py checks the result against pygit2 on random histories.

Parsing follows libgit2's rules too (a commit's quick parse for the walk, the full one for the
commits listed, grafts and ``shallow`` honoured, a reflog's malformed lines skipped), so the
answer is the one the pygit2 walk gave. What libgit2 would have failed on raises
:class:`~sandbox.fast.odb.GitReadError`.

Only the standard library is imported (an import-linter contract in pyproject.toml checks it).
"""

from __future__ import annotations

import os

from sandbox.fast.gitread import Repo
from sandbox.fast.odb import GitReadError, is_hex40_bytes

#: How many commits libgit2 looks at past the last interesting one before it stops (its SLOP).
SLOP = 5
#: A commit or tag bigger than this is not read (a loose object can inflate to anything).
MAX_OBJECT = 8 << 20
#: At most this many bytes of objects are read in one walk (and kept, so listed commits are not read twice).
MAX_BYTES = 128 << 20
#: At most this many commits are parsed in one walk; past it the walk gives up (GitReadError).
#: Bounds the work an agent can cause (a million commits of its own, or equal commit times, which
#: keep git's limit pass going down the whole history) to about three seconds (~32 us a commit,
#: measured); an honest walk parses the agent's commits plus a handful of the user's.
MAX_PARSED = 100_000
_INT64_MAX = (1 << 63) - 1
_SPACE = b" \t\n\v\f\r"
_PEEL_DEPTH = 100


class _Node:
    """A commit in the walk (libgit2's ``git_commit_list_node``)."""

    __slots__ = ("added", "in_degree", "oid", "parents", "seen", "time", "uninteresting")

    def __init__(self, oid: str) -> None:
        self.oid = oid
        #: None until parsed (libgit2: ``parents == NULL``).
        self.parents: list[_Node] | None = None
        self.time = 0
        self.seen = False
        self.added = False
        self.uninteresting = False
        self.in_degree = 0


def _time_cmp(a: _Node, b: _Node) -> int:
    """libgit2's ``git_commit_list_time_cmp``: newer first."""
    return 1 if a.time < b.time else -1 if a.time > b.time else 0


class _Heap:
    """libgit2's ``git_pqueue`` (a binary heap), kept as it is: its ties decide the order of
    commits with equal times, and that order must be libgit2's."""

    def __init__(self) -> None:
        self.items: list[_Node] = []

    def insert(self, item: _Node) -> None:
        items = self.items
        items.append(item)
        el = len(items) - 1
        while el > 0:
            parent_el = (el - 1) >> 1
            parent = items[parent_el]
            if _time_cmp(parent, item) <= 0:
                break
            items[el] = parent
            el = parent_el
        items[el] = item

    def pop(self) -> _Node | None:
        items = self.items
        if not items:
            return None
        top = items[0]
        last = items.pop()
        if items:
            # The last item to the top, pushed down.
            el, size = 0, len(items)
            while True:
                kid_el = 2 * el + 1
                if kid_el >= size:
                    break
                kid = items[kid_el]
                if kid_el + 1 < size and _time_cmp(kid, items[kid_el + 1]) > 0:
                    kid_el += 1
                    kid = items[kid_el]
                if _time_cmp(last, kid) <= 0:
                    break
                items[el] = kid
                el = kid_el
            items[el] = last
        return top


def _strntol64(text: bytes) -> int:
    """libgit2's ``git__strntol64`` in base 10: spaces, a sign, at least one digit; no overflow."""
    stripped = text.lstrip(_SPACE)
    sign = 1
    if stripped[:1] in (b"-", b"+"):
        sign = -1 if stripped[:1] == b"-" else 1
        stripped = stripped[1:]
    digits = len(stripped) - len(stripped.lstrip(b"0123456789"))
    if not digits:
        raise GitReadError("a signature's time is not a number")
    significant = stripped[:digits].lstrip(b"0") or b"0"
    if len(significant) > 19:  # more than int64 holds (and more than int() converts unasked)
        raise GitReadError("a signature's time overflows")
    value = sign * int(significant)
    if not -_INT64_MAX - 1 <= value <= _INT64_MAX:
        raise GitReadError("a signature's time overflows")
    return value


def _signature_time(data: bytes, start: int, end: int) -> int:
    """The time of the signature in ``data[start:end]`` (libgit2's ``git_signature__parse``): the
    last ``<`` and ``>`` frame the e-mail; a time after them is optional (0 when absent)."""
    email_start = data.rfind(b"<", start, end)
    email_end = data.rfind(b">", start, end)
    if email_start < 0 or email_end < 0 or email_end <= email_start:
        raise GitReadError("a signature has a malformed e-mail")
    if email_end + 2 < end:
        return _strntol64(data[email_end + 2 : end])
    return 0


def _signature_line(data: bytes, pos: int, header: bytes) -> tuple[int, int]:
    """A ``header`` signature line at ``pos``: (its time, the position after its newline)."""
    end = data.find(b"\n", pos)
    if end < 0:
        raise GitReadError("a signature has no newline")
    if pos + len(header) >= end or not data.startswith(header, pos):
        raise GitReadError(f"a commit has no {header.decode().strip()} line where expected")
    return _signature_time(data, pos + len(header), end), end + 1


def _oid_header(data: bytes, pos: int, header: bytes) -> str | None:
    """``header`` + 40 hex digits + newline at ``pos`` (libgit2's ``git_object__parse_oid_header``)."""
    end = pos + len(header) + 40
    if end + 1 > len(data) or not data.startswith(header, pos) or data[end] != 0x0A:
        return None
    hex_id = data[pos + len(header) : end]
    return hex_id.decode("ascii").lower() if is_hex40_bytes(hex_id) else None


def _parse_commit(data: bytes, quick: bool) -> tuple[list[str], int, int]:
    """(parents, committer time, end of the committer line) as libgit2's ``commit_parse`` reads
    them: quick (the walk: the tree line skipped unread, authors optional) or full (a well-formed
    tree line and an author line required)."""
    if quick:
        if len(data) < 46:
            raise GitReadError("a commit is truncated before its tree line")
        pos = 46
    else:
        if _oid_header(data, 0, b"tree ") is None:
            raise GitReadError("a commit has a malformed tree line")
        pos = 46
    parents: list[str] = []
    while (parent := _oid_header(data, pos, b"parent ")) is not None:
        parents.append(parent)
        pos += 48
    if not quick:
        _time, pos = _signature_line(data, pos, b"author ")
    while data.startswith(b"author ", pos):  # some tools write several; libgit2 skips the extra ones
        _time, pos = _signature_line(data, pos, b"author ")
    when, pos = _signature_line(data, pos, b"committer ")
    if len(parents) >= 1 << 16:
        raise GitReadError("a commit has more than 2^16 parents")
    return parents, when, pos


def subject(data: bytes) -> str:
    """The first line of a commit's message, at most 100 characters, as pygit2's ``Commit.message``
    decodes it: UTF-8 with bad bytes replaced, or strictly in the encoding its header names (a
    message that does not decode, or an unknown encoding, raises GitReadError). libgit2 drops the
    message's leading newlines and ends it at a NUL byte."""
    _parents, _time, pos = _parse_commit(data, quick=False)
    encoding: bytes | None = None
    end = len(data)
    while pos < end:
        if data[pos - 1] == 0x0A and data[pos] == 0x0A:
            break
        eoln = data.find(b"\n", pos)
        eoln = end if eoln < 0 else eoln
        if data.startswith(b"encoding ", pos):
            encoding = data[pos + 9 : eoln].split(b"\0", 1)[0]
        pos = eoln + 1 if eoln < end else eoln
    raw = data[pos + 1 :].split(b"\0", 1)[0].lstrip(b"\n") if pos + 1 <= end else b""
    try:
        if encoding is None:
            message = raw.decode("utf-8", "replace")
        else:
            message = raw.decode(encoding.decode("utf-8"), "strict")
    except (LookupError, UnicodeError, TypeError, ValueError) as exc:
        raise GitReadError(f"a commit's message does not decode ({exc})") from exc
    return message.split("\n", 1)[0][:100]


def _tag_target(data: bytes) -> tuple[str, str]:
    """The object an annotated tag points at and the type it declares (libgit2's ``git_tag__parse``)."""
    target = _oid_header(data, 0, b"object ")
    eol = data.find(b"\n", 48)
    kind = data[53:eol].decode("ascii", "replace") if eol > 0 and data.startswith(b"type ", 48) else ""
    if target is None or kind not in ("commit", "tree", "blob", "tag"):
        raise GitReadError("a tag has a malformed object or type line")
    return target, kind


def _grafts(repo: Repo, name: str) -> dict[str, list[str]]:
    """``info/grafts`` or ``shallow``: commit -> the parents it is read with (none, for shallow)."""
    try:
        text = repo.read_file(name)
    except FileNotFoundError:
        return {}
    grafts: dict[str, list[str]] = {}
    for line in text.split(b"\n"):
        if not line.strip() or line.startswith(b"#"):
            continue
        ids = line.split()
        if not all(is_hex40_bytes(i) for i in ids):
            raise GitReadError(f"{name} has a malformed line")
        grafts[ids[0].decode().lower()] = [i.decode().lower() for i in ids[1:]]
    return grafts


class Walker:
    """Commits of one repository, read and walked as libgit2 does (one walk per instance)."""

    def __init__(self, repo: Repo) -> None:
        self.repo = repo
        self._nodes: dict[str, _Node] = {}
        self._parsed = 0
        self._bytes = 0
        self._data: dict[str, bytes] = {}
        # Grafts first, then shallow, as libgit2's ``git_commit__parse_ext`` looks them up.
        self._grafts = [_grafts(repo, os.path.join("info", "grafts")), _grafts(repo, "shallow")]

    @property
    def parsed(self) -> int:
        """How many commits this walker has parsed (the walk's work: the tests and the bench read it)."""
        return self._parsed

    def _object(self, oid: str) -> tuple[str, bytes]:
        kind, data = self.repo.read(oid, limit=MAX_OBJECT)
        self._bytes += len(data)
        if self._bytes > MAX_BYTES:
            raise GitReadError(f"the walk read more than {MAX_BYTES} bytes of objects and gave up")
        return kind, data

    def peel(self, oid: str) -> str:
        """The commit an object is or (through annotated tags) points at; GitReadError otherwise."""
        declared = None
        for _ in range(_PEEL_DEPTH):
            kind, data = self._object(oid)
            if declared is not None and kind != declared:  # libgit2 looks a tag's target up by its type
                raise GitReadError(f"{oid} is a {kind}, not the {declared} a tag says")
            if kind == "commit":
                return oid
            if kind != "tag":
                raise GitReadError(f"{oid} is a {kind}, not a commit")
            oid, declared = _tag_target(data)
        raise GitReadError(f"{oid}: annotated tags nested deeper than {_PEEL_DEPTH}")

    def commit_data(self, oid: str) -> bytes:
        """A commit's raw content (kept: the walk's commits are read again for their messages)."""
        data = self._data.get(oid)
        if data is None:
            kind, data = self._object(oid)
            if kind != "commit":
                raise GitReadError(f"{oid} is a {kind}, not a commit")
            self._data[oid] = data
        return data

    def _node(self, oid: str) -> _Node:
        node = self._nodes.get(oid)
        if node is None:
            node = self._nodes[oid] = _Node(oid)
        return node

    def _parse(self, node: _Node) -> None:
        if node.parents is not None:
            return
        self._parsed += 1
        if self._parsed > MAX_PARSED:
            raise GitReadError(f"the walk read more than {MAX_PARSED} commits and gave up")
        parents, node.time, _end = _parse_commit(self.commit_data(node.oid), quick=True)
        for grafts in self._grafts:
            if node.oid in grafts:
                parents = grafts[node.oid]
                break
        node.parents = [self._node(p) for p in parents]

    @staticmethod
    def _mark_parents_uninteresting(commit: _Node) -> None:
        # Marks what is already parsed below ``commit``, stopping at commits already marked.
        todo = list(commit.parents or ())
        while todo:
            node: _Node | None = todo.pop()
            while node is not None:
                if node.uninteresting:
                    break
                node.uninteresting = True
                if node.parents is None:
                    break
                todo.extend(node.parents)
                node = node.parents[0] if node.parents else None

    def _add_parents(self, commit: _Node, queue: list[_Node]) -> None:
        if commit.added:
            return
        commit.added = True
        assert commit.parents is not None
        if commit.uninteresting:
            for p in commit.parents:
                p.uninteresting = True
                self._parse(p)
                self._mark_parents_uninteresting(p)
                p.seen = True
                _insert_by_date(p, queue)
            return
        for p in commit.parents:
            self._parse(p)
            if not p.seen:
                p.seen = True
                _insert_by_date(p, queue)

    def _limit(self, commits: list[_Node]) -> list[_Node]:
        """libgit2's ``limit_list``: the interesting commits, newest first, and a stop once only
        uninteresting ones (older than the last interesting one) have been seen SLOP times."""
        slop = SLOP
        time = _INT64_MAX
        queue = commits
        out: list[_Node] = []
        while queue:
            commit = queue.pop(0)
            self._add_parents(commit, queue)
            if commit.uninteresting:
                self._mark_parents_uninteresting(commit)
                slop = _still_interesting(queue, time, slop)
                if slop:
                    continue
                break
            time = commit.time
            out.append(commit)
        return out

    def walk(self, tips: list[str], hidden: list[str]) -> list[str]:
        """Commits reachable from ``tips`` and not from ``hidden``, as libgit2 lists them when the
        tips are pushed in this order, then the hidden ones hidden, sorted TOPOLOGICAL | TIME.

        Every tip and hidden id is peeled to a commit (GitReadError when one is not a commit).
        """
        if not tips:
            return []  # libgit2 walks nothing without a push (and looks nothing up)
        user_input: list[_Node] = []
        for oid, uninteresting in [*((t, False) for t in tips), *((h, True) for h in hidden)]:
            node = self._node(self.peel(oid))
            if node.uninteresting:
                continue  # hidden already
            node.uninteresting = uninteresting
            user_input.insert(0, node)  # libgit2 prepends its user input
        commits: list[_Node] = []
        for node in user_input:
            self._parse(node)
            if node.uninteresting:
                self._mark_parents_uninteresting(node)
            if not node.seen:
                node.seen = True
                commits.append(node)
        ordered = _topological(self._limit(commits))
        return [n.oid for n in ordered if not n.uninteresting]


def _insert_by_date(item: _Node, queue: list[_Node]) -> None:
    """libgit2's ``git_commit_list_insert_by_date``: before the first strictly older commit."""
    for i, p in enumerate(queue):
        if p.time < item.time:
            queue.insert(i, item)
            return
    queue.append(item)


def _still_interesting(queue: list[_Node], time: int, slop: int) -> int:
    if not queue:
        return 0
    if time <= queue[0].time:
        return SLOP
    for node in queue:
        if not node.uninteresting or node.time > time:
            return SLOP
    return slop - 1


def _topological(commits: list[_Node]) -> list[_Node]:
    """libgit2's ``sort_in_topological_order`` with GIT_SORT_TIME: children before parents, the
    newest of the ready commits first (ties as its heap breaks them)."""
    for node in commits:
        node.in_degree = 1
    for node in commits:
        for p in node.parents or ():
            if p.in_degree:
                p.in_degree += 1
    heap = _Heap()
    for node in commits:
        if node.in_degree == 1:
            heap.insert(node)
    out: list[_Node] = []
    while (ready := heap.pop()) is not None:
        for p in ready.parents or ():
            if p.in_degree == 0:
                continue
            p.in_degree -= 1
            if p.in_degree == 1:
                heap.insert(p)
        ready.in_degree = 0
        out.append(ready)
    return out


def reflog_entries(repo: Repo, ref: str) -> int:
    """How many entries libgit2 reads in a ref's reflog (``logs/<ref>``; none when it is missing):
    lines ``<old> <new> <signature>[\\t<message>]``, malformed ones skipped as libgit2 skips them."""
    try:
        data = repo.read_file(os.path.join("logs", ref))
    except FileNotFoundError:
        return 0
    count = 0
    for line in data.split(b"\n"):
        if len(line) < 82 or not is_hex40_bytes(line[:40]) or line[40:41] != b" " or not is_hex40_bytes(line[41:81]):
            continue
        tab = line.find(b"\t", 81)
        try:
            _signature_time(line, 81, len(line) if tab < 0 else tab)
        except GitReadError:
            continue
        count += 1
    return count
