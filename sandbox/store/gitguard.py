"""The run's git as *your* git reads it: nothing the agent wrote runs when you use git in a worktree.

``sandbox start`` suggests ``cd <worktree>``. There your own, unconfined ``git status``, ``git diff``,
``git commit`` (and an editor's git integration, a shell prompt's helper) read the run's git, and
git runs what its configuration and hooks name: an fsmonitor, a pager, an external diff, a textconv,
a filter, an included file's settings, a pre-commit hook. Whoever writes those runs programs as you.

The rule is about *where git reads them from*, not about a list of keys: everything that decides which
configuration and which hooks your git reads is written by the sandbox (unconfined) and is read-only
to every confined process (bound read-only inside bubblewrap, :func:`guarded_paths`):

- the worktree's ``.git`` file, which names the git directory;
- that directory's ``commondir``, which names the directory holding the configuration and hooks:
  made ``../git`` (the directory itself) so that no agent can create one naming a directory of its own;
- ``config``: what the run inherited from your repository, plus ``diff.ignoreSubmodules=all``
  (:data:`SETTINGS`): a gitlink the agent stages, whose ``.git`` file names a repository it wrote,
  would otherwise make ``git status`` and ``git diff`` run git in there, with that configuration; and
  ``lfs.storage``, the run's own Git LFS storage (:mod:`sandbox.store.lfsstore`): by default git-lfs
  stores into the git dir, where it would hard-link your stored contents for the agent to rewrite;
- ``hooks/``.

Everything else of the run's git directory (objects, refs, index, HEAD, logs) stays the agent's to
write: git names no program there. Inside the sandbox the agent's own settings go to
:data:`AGENT_CONFIG` in the run's git directory through ``GIT_CONFIG_GLOBAL`` (what ``git config
--global`` writes), which only the sandboxed git is told about; it includes your global
configuration, so the agent's git works as yours did. ``git config`` of the repository's own file is
refused inside (read-only).

Not covered: a directory of the worktree with a ``.git`` of the agent's (a nested repository) is
that repository to a git started in it; a gitlink the agent staged whose directory holds such a
``.git`` makes ``git add -A`` (and plumbing such as ``git diff-files``) run git in there (no setting
of the superproject turns that off; :func:`findings` names it); and a ``core.hooksPath`` you set to
a directory of your tree (``.husky``) names hooks the agent can edit, as it could in any change
you apply.
:func:`findings` is what ``sandbox status`` reports: every program-running setting, hook or pointer
in the run's git that the sandbox did not put there (a run made before this rule, or whose agent
ran unconfined). Standard library only (``sandbox status`` reads it on its fast path).
"""

from __future__ import annotations

import os
import stat

from sandbox.store import gitcli

#: Settings of every run's own config (besides what it inherits): see the module docstring.
SETTINGS = (("diff.ignoreSubmodules", "all"),)
#: The git dir's ``commondir``: names the directory itself.
COMMONDIR = "commondir"
#: In the run's git dir: the agent's own git settings inside the sandbox (``GIT_CONFIG_GLOBAL``).
AGENT_CONFIG = "agent.gitconfig"
#: What the agent's settings file starts as: the user's global configuration, included (git expands
#: ``~`` itself and skips a missing file), so the agent's git reads what it read before.
AGENT_CONFIG_TEXT = "[include]\n\tpath = ~/.gitconfig\n\tpath = ~/.config/git/config\n"

#: Keys (lowercase) whose values git runs, or that make git read more configuration or another tree.
#: Only for reporting: the protection is where git reads, not which keys it finds. Matched without
#: ``re`` (:func:`program_key`; ``status`` reads them on its quick path, and ``import re`` is 6 ms).
_PROGRAM_EXACT = frozenset(
    {
        *(
            f"core.{name}"
            for name in (
                "fsmonitor",
                "pager",
                "editor",
                "sshcommand",
                "askpass",
                "hookspath",
                "gitproxy",
                "alternaterefscommand",
                "worktree",
            )
        ),
        "diff.external",
        "sequence.editor",
        "gpg.program",
        "credential.helper",
        "include.path",
        "uploadpack.packobjectshook",
        "extensions.worktreeconfig",
        "web.browser",
        "diff.ignoresubmodules",
        "status.submodulesummary",
        "submodule.recurse",
    }
)
#: ``SECTION.<anything>.NAME``: the section, and the names that run a program there.
_PROGRAM_NAMED = {
    "diff": ("textconv", "command"),
    "difftool": ("cmd", "path"),
    "mergetool": ("cmd", "path"),
    "merge": ("driver",),
    "filter": ("clean", "smudge", "process"),
    "gpg": ("program",),
    "credential": ("helper",),
    "includeif": ("path",),
    "remote": ("uploadpack", "receivepack"),
    "browser": ("cmd", "path"),
    "man": ("cmd", "path"),
    "submodule": ("update",),
}
#: Every key of these sections.
_PROGRAM_SECTIONS = ("pager.", "alias.")


def program_key(key: str) -> bool:
    """Whether git runs the value of config ``key`` (lowercase), or reads more configuration or another
    tree for it (as a regular expression anchored with ``^...$`` would say: one final newline allowed)."""
    if key.endswith("\n"):
        key = key[:-1]
    if "\n" in key:
        return False
    if key in _PROGRAM_EXACT or key.startswith(_PROGRAM_SECTIONS):
        return True
    section, dot, rest = key.partition(".")
    names = _PROGRAM_NAMED.get(section) if dot else None
    return names is not None and any(rest.endswith("." + name) for name in names)


_MAX_CONFIG = 1 << 20  # a config larger than this is reported, not read


def guarded_paths(worktree: str, git_dir: str) -> list[str]:
    """The paths that decide what configuration and hooks the user's git reads in ``worktree``:
    bound read-only inside the sandbox (those missing are skipped; :func:`guard` makes them)."""
    return [
        os.path.join(worktree, ".git"),
        *(os.path.join(git_dir, name) for name in ("config", "hooks", COMMONDIR)),
        # The object directories it borrows (the user's): named by the host, never by the agent.
        os.path.join(git_dir, "objects", "info", "alternates"),
    ]


def guard(git_dir: str, lfs: list[tuple[str, str]] | None = None) -> None:
    """Make what :func:`guarded_paths` binds exist in a run's own git dir: ``hooks/``, ``commondir``
    (``../git``), :data:`SETTINGS` and the ``lfs`` settings each the last of its key in ``config`` (a run
    made before them, a moved repository: :func:`set_last`, one read of the config), and the agent's
    settings file. Nothing is written through a link, no file there is replaced (a run's git an agent
    changed unconfined is reported by :func:`findings`, not repaired)."""
    hooks = os.path.join(git_dir, "hooks")
    if not os.path.lexists(hooks):
        os.mkdir(hooks)
    if "lfs.storage" in set_last(os.path.join(git_dir, "config"), [*SETTINGS, *(lfs or ())]):
        from sandbox.store import lfsstore

        lfsstore.unlink_shared(git_dir)  # a run made before: what the host's checkout linked from your store
    # Relative (the home moves as a whole); not ".", which libgit2 cannot open.
    common = f"../{os.path.basename(os.path.normpath(git_dir))}\n"
    for name, text in ((COMMONDIR, common), (AGENT_CONFIG, AGENT_CONFIG_TEXT)):
        try:
            fd = os.open(os.path.join(git_dir, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        except FileExistsError:
            continue
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)


def entry_text(key: str, value: str) -> str:
    """git config file text for one ``key`` (``section[.subsection].name``) set to ``value``."""
    section, _, name = key.rpartition(".")
    head, dot, sub = section.partition(".")
    quoted_sub = sub.replace("\\", "\\\\").replace('"', '\\"')
    header = f'[{head} "{quoted_sub}"]' if dot else f"[{head}]"
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return f'{header}\n\t{name} = "{escaped}"\n'


def set_last(config: str, settings: list[tuple[str, str]]) -> list[str]:
    """Append each ``(key, value)`` of ``settings`` to ``config`` (a regular file only) that is not already
    the file's last setting of its key (git takes the last): a run made before the settings, or whose
    repository moved. One read when nothing is to be done (a confined command's start). The keys appended."""
    data = _read_regular(config)
    if data is None:
        return []
    lower = data.lower()
    todo = []
    for key, value in settings:
        entry = entry_text(key, value).encode("utf-8", "surrogateescape")
        at = data.rfind(entry)
        if at < 0 or f"\t{key.rpartition('.')[2].lower()} =".encode() in lower[at + len(entry) :]:
            todo.append((key, entry))
    if not todo:
        return []
    fd = os.open(config, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return []
        os.write(fd, (b"\n" if data and not data.endswith(b"\n") else b"") + b"".join(e for _k, e in todo))
    finally:
        os.close(fd)
    return [k for k, _e in todo]


def _read_regular(path: str, limit: int = _MAX_CONFIG) -> bytes | None:
    """A regular file's bytes (not following a link, never blocking on a FIFO); None if not one."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        return os.read(fd, limit + 1)
    finally:
        os.close(fd)


def config_entries(data: bytes) -> list[tuple[str, str]] | None:
    """The (key, value) pairs of git config text, parsed by git (no include followed, nothing run);
    None when git cannot parse it."""
    code, listed = gitcli.read(
        ["config", "--no-includes", "--file", "-", "--list", "-z"],
        "/",
        {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull},
        input=data,
    )
    if code != 0:
        return None
    out = []
    for item in listed.split(b"\0"):
        if item:
            key, _, value = item.decode("utf-8", "surrogateescape").partition("\n")
            out.append((key.lower(), value))
    return out


def findings(worktree: str, git_dir: str, common_dir: str) -> list[str]:
    """What in the run's git would run a program (or read another configuration) for the user's git
    in ``worktree`` and was not put there by the sandbox: one phrase each (of agent origin: escape
    before printing). Empty when the run's git holds the rule of this module."""
    from sandbox.store import gitfiles

    # The index's gitlinks are listed by a git of their own, side by side with the config's parse. That git
    # opens the run's HEAD, config, refs and index by name: one the agent made a FIFO would block it, so
    # they are checked plain first, and a swap after the check costs this listing its deadline, no more.
    index = os.path.join(git_dir, "index")
    plain = gitfiles.plain_files_only(git_dir) and gitfiles.plain_or_absent(index)
    links = _gitlinks_started(worktree, git_dir) if plain and os.path.isfile(index) else None
    try:
        out = _findings(worktree, git_dir, common_dir)
    finally:
        listed, late = _listed(links)
    if not plain:
        out.append("a file of its git directory (HEAD, config, a ref, a pack or the index) is not a regular file")
    elif late:
        out.append(f"its index could not be listed within {LIST_DEADLINE:g} s (a file of its git dir blocks git)")
    return out + [
        f"submodule {path} has a repository of its own (git add -A there runs git in it)"
        for path in _gitlinks(worktree, listed)
    ]


#: Seconds the listing of a run's index may take before ``status`` goes on without it.
LIST_DEADLINE = 10.0


def _listed(links: gitcli.Started | None) -> tuple[bytes, bool]:
    """(what the index listing wrote, True when it was stopped at :data:`LIST_DEADLINE`)."""
    if links is None:
        return b"", False
    try:
        return links.result(timeout=LIST_DEADLINE)[1], False
    except Exception as exc:
        import subprocess  # only now: status's quick path loads no subprocess (gitcli raises its TimeoutExpired)

        if isinstance(exc, subprocess.TimeoutExpired):
            return b"", True
        raise


def _findings(worktree: str, git_dir: str, common_dir: str) -> list[str]:
    out: list[str] = []
    pointer = _read_regular(os.path.join(worktree, ".git"), 4096)
    expected = os.path.realpath(git_dir)
    if pointer is not None and pointer.startswith(b"gitdir: "):
        named = os.path.join(worktree, os.fsdecode(pointer[8:].strip()))
        if os.path.realpath(named) != expected:
            out.append(f"the worktree's .git names another git directory ({named})")
    elif os.path.lexists(os.path.join(worktree, ".git")):
        out.append("the worktree's .git is not the file the sandbox wrote")
    common = _read_regular(os.path.join(git_dir, COMMONDIR), 4096)
    # A run made before homes is a linked worktree: its commondir names your repository's (read-only inside).
    allowed = (expected, os.path.realpath(common_dir))
    if common is not None and os.path.realpath(os.path.join(git_dir, os.fsdecode(common.strip()))) not in allowed:
        out.append(f"commondir names another directory ({os.fsdecode(common.strip())})")
    elif common is None and os.path.lexists(os.path.join(git_dir, COMMONDIR)):
        out.append("commondir is not a regular file")
    out += _config_findings(os.path.join(git_dir, "config"), os.path.join(common_dir, "config"))
    out += _hook_findings(os.path.join(git_dir, "hooks"), os.path.join(common_dir, "hooks"))
    return out


def _gitlinks_started(worktree: str, git_dir: str) -> gitcli.Started:
    """``git ls-files --stage`` of the run's index, started (:func:`_gitlinks` reads what it lists)."""
    return gitcli.started(
        [f"--git-dir={git_dir}", "ls-files", "--stage", "-z"],
        worktree,
        {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull},
    )


def _gitlinks(worktree: str, listed: bytes) -> list[str]:
    """The gitlinks ``listed`` (the run's index) whose path in the worktree holds a ``.git``: ``git
    status`` and ``git diff`` leave them alone (``diff.ignoreSubmodules``), ``git add -A`` and ``git
    diff-files`` do not."""
    out = []
    for item in listed.split(b"\0"):
        if item.startswith(b"160000 "):
            path = os.fsdecode(item.partition(b"\t")[2])
            if os.path.lexists(os.path.join(worktree, path, ".git")):
                out.append(path)
    return out


def _config_findings(path: str, user_config: str) -> list[str]:
    if not os.path.lexists(path):
        return []  # a linked worktree's admin dir (a run made before homes) has none of its own
    data = _read_regular(path)
    entries = config_entries(data) if data is not None else None
    if entries is None:
        return ["its config is not a regular file git can read"]
    ours = {(k.lower(), v) for k, v in SETTINGS}
    found = [(key, value) for key, value in entries if program_key(key) and (key, value) not in ours]
    if not found:
        return []  # the common case: one git process, not two
    yours = set(config_entries(_read_regular(user_config) or b"") or [])
    return [f"config sets {key} = {value}" for key, value in found if (key, value) not in yours]


def _hook_findings(hooks: str, user_hooks: str) -> list[str]:
    if os.path.islink(hooks):
        return ["its hooks directory is a link"]
    try:
        names = sorted(os.listdir(hooks))
    except OSError:
        return []
    out = []
    for name in names:
        if name.endswith(".sample"):
            continue
        mine = _read_regular(os.path.join(hooks, name))
        if mine is None or mine != _read_regular(os.path.join(user_hooks, name)):
            out.append(f"hook {name} (not a copy of yours)")
    return out
