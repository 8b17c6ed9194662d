"""A virtualenv copied into a run's worktree, made to point at its copy instead of the user's.

``include = [".venv"]`` (or ``.worktreeinclude``) copies the user's ignored virtualenv into a new
worktree. A virtualenv names its own place in absolute paths: every script in ``bin/`` starts with
``#!/path/to/yours/.venv/bin/python``, ``activate`` sets ``VIRTUAL_ENV`` to it, and an editable
install of the project (``pip install -e .``) puts the project's directory into a ``.pth`` file or
an ``__editable__`` finder in ``site-packages``. Copied as they are, the copy's ``pytest`` or ``pip``
runs the user's interpreter on the user's files: inside a sandbox they are hidden (``not found``),
and outside it ``.venv/bin/pip install`` in the worktree would change the user's virtualenv.

:func:`retarget` rewrites those paths in the copy: the virtualenv's own directory to the copy's,
and the user's working tree to the run's worktree in the editable-install files. Only small text
files in ``bin/`` and the top of ``site-packages`` are read; nothing else of the copy changes. The
copy is the sandbox's own (ignored, never recorded), so it is rewritten in place.
"""

from __future__ import annotations

import glob
import os
import re
import stat

#: Scripts and ``.pth`` files bigger than this are not virtualenv scripts: left alone.
MAX_SCRIPT = 256 << 10


def retarget(copied: str, old: str, new: str, user_workdir: str, worktree: str) -> int:
    """Rewrite the virtualenvs at ``copied`` (the copy of ``old``, now at ``new``) or directly below
    it to point at themselves and at ``worktree`` instead of ``user_workdir``; how many files changed."""
    changed = 0
    for venv in _venvs(copied):
        rel = os.path.relpath(venv, copied)
        was, now = os.path.normpath(os.path.join(old, rel)), os.path.normpath(os.path.join(new, rel))
        for script in sorted(os.listdir(os.path.join(venv, "bin"))):
            changed += _rewrite(os.path.join(venv, "bin", script), [(was, now)])
        moves = [(was, now), (user_workdir, worktree)]
        for lib in _site_packages(venv):
            for name in sorted(os.listdir(lib)):
                if name.endswith((".pth", ".egg-link")) or (name.startswith("__editable__") and name.endswith(".py")):
                    done = _rewrite(os.path.join(lib, name), moves)
                    if done and name.endswith(".py"):  # its bytecode names the old paths too
                        for cached in glob.glob(os.path.join(glob.escape(lib), "__pycache__", name[:-3] + ".*.pyc")):
                            os.unlink(cached)
                    changed += done
    return changed


def _site_packages(venv: str) -> list[str]:
    """The virtualenv's ``site-packages`` directories, each once (``lib64`` is often a link to ``lib``)."""
    found = glob.glob(os.path.join(glob.escape(venv), "lib*", "python*", "site-packages"))
    return [p for p in sorted(found) if not any(os.path.islink(os.path.join(venv, part)) for part in _parts(venv, p))]


def _parts(venv: str, path: str) -> list[str]:
    rel = os.path.relpath(path, venv).split(os.sep)
    return [os.path.join(*rel[: i + 1]) for i in range(len(rel))]


def _venvs(root: str) -> list[str]:
    """``root`` if it is a virtualenv (a ``pyvenv.cfg`` and a ``bin/``), else those directly below it."""

    def is_venv(path: str) -> bool:
        return os.path.isfile(os.path.join(path, "pyvenv.cfg")) and os.path.isdir(os.path.join(path, "bin"))

    if os.path.islink(root) or not os.path.isdir(root):
        return []
    if is_venv(root):
        return [root]
    out = []
    with os.scandir(root) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False) and is_venv(entry.path):
                out.append(entry.path)
    return sorted(out)


def _rewrite(path: str, moves: list[tuple[str, str]]) -> int:
    """Replace each old absolute path (as a whole path or a prefix of one) by its new one in a small
    text file, read and written through one descriptor that followed no link; 1 when it changed."""
    table = {os.fsencode(was): os.fsencode(now) for was, now in moves if was != now}
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return 0  # a link (python -> python3), a directory: nothing to rewrite
    with os.fdopen(fd, "r+b") as fh:
        st = os.fstat(fh.fileno())
        if not table or not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SCRIPT:
            return 0
        data = fh.read(MAX_SCRIPT + 1)
        if b"\0" in data or len(data) > MAX_SCRIPT:
            return 0
        # One pass, longest path first: a worktree under the user's tree (``.git/sandbox/homes``)
        # is never rewritten twice.
        alternatives = b"|".join(re.escape(was) for was in sorted(table, key=len, reverse=True))
        pattern = re.compile(rb"(?:" + alternatives + rb")(?=[/\"'\s:;]|$)", re.MULTILINE)
        out = pattern.sub(lambda match: table[match.group(0)], data)
        if out == data:
            return 0
        fh.seek(0)
        fh.write(out)
        fh.truncate()
    return 1
