"""What of the user's home a confined process sees: nothing, except what is on this allowlist.

Default deny (issue #31): inside a sandbox ``$HOME`` and every other home (``/home``, ``/root``) are empty
read-only directories. Bound back into them, read-only unless said otherwise:

* the started agent's own home in the run (writable; :mod:`sandbox.agent.agenthome`) and the user's
  configuration its links there lead to (``CLAUDE.md``, commands, skills: never its login);
* the toolchains found at the places on :data:`TOOLCHAINS` (version managers, ``~/.cargo/bin`` and its
  registry cache, ``~/go``'s modules, ``~/.local/bin``, user site-packages, package caches), each a
  directory that holds programs or downloaded packages and none of the credential files kept beside
  them (``~/.cargo/credentials.toml``, ``~/.m2/settings.xml``, ``~/.gradle/gradle.properties`` and
  ``~/.npmrc`` lie outside every entry);
* the user's git identity (``user.name`` and ``user.email`` only), as a generated ``~/.gitconfig``;
* what the user adds with ``allow_read`` in ``[isolation]``, and what the sandbox itself needs (its
  interpreter, the agent's executable, the run's paths).

Everything else of the home, other repositories under it included, is not there. Finding the
toolchains costs one ``stat`` per entry (and one ``listdir`` of ``~/.local/lib``): start-up grows with
the allowlist, never with the home. Standard library only (``sandbox exec``'s fast path imports it).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Sequence

#: Where toolchains live under a home (relative to it), each with the reason shown by ``sandbox doctor``.
#: A directory is bound back read-only only when it exists. Never a directory that holds a login:
#: ``~/.cargo`` itself (``credentials.toml``), ``~/.m2`` (``settings.xml``), ``~/.gradle``
#: (``gradle.properties``), ``~/.local/share/uv`` (``credentials/``) are listed by their parts.
TOOLCHAINS: tuple[tuple[str, str], ...] = (
    (".nvm", "Node.js versions (nvm)"),
    (".volta", "Node.js versions (Volta)"),
    (".fnm", "Node.js versions (fnm)"),
    (".local/share/fnm", "Node.js versions (fnm)"),
    (".bun/bin", "Bun"),
    (".bun/install/cache", "Bun's package cache"),
    (".deno/bin", "Deno"),
    (".npm/_cacache", "npm's package cache"),
    (".cache/yarn", "Yarn's package cache"),
    (".yarn/berry/cache", "Yarn's package cache"),
    (".local/share/pnpm", "pnpm and its store"),
    (".pyenv", "Python versions (pyenv)"),
    (".local/bin", "programs installed for the user (pip --user, pipx, uv tool)"),
    (".local/pipx/venvs", "pipx's environments"),
    (".local/share/pipx/venvs", "pipx's environments"),
    (".local/share/uv/python", "Python versions (uv)"),
    (".local/share/uv/tools", "uv's tools"),
    (".local/share/virtualenvs", "pipenv's environments"),
    (".virtualenvs", "virtualenvwrapper's environments"),
    (".cache/pre-commit", "pre-commit's hook environments"),
    (".cache/ms-playwright", "Playwright's browsers"),
    (".nix-profile", "Nix's user profile"),
    (".opam", "OCaml toolchains (opam)"),
    (".cache/pip", "pip's package cache"),
    (".cache/uv", "uv's package cache"),
    (".cache/pypoetry/virtualenvs", "Poetry's environments"),
    (".conda/envs", "conda environments"),
    ("miniconda3", "conda (Miniconda)"),
    ("miniforge3", "conda (Miniforge)"),
    ("anaconda3", "conda (Anaconda)"),
    (".rbenv", "Ruby versions (rbenv)"),
    (".rustup", "Rust toolchains (rustup)"),
    (".cargo/bin", "Rust programs (cargo)"),
    (".cargo/registry", "cargo's registry cache"),
    (".cargo/git", "cargo's git cache"),
    ("go/bin", "Go programs"),
    ("go/pkg/mod", "Go's module cache"),
    (".cache/go-build", "Go's build cache"),
    ("sdk", "Go versions"),
    (".m2/repository", "Maven's repository cache"),
    (".gradle/caches", "Gradle's cache"),
    (".gradle/wrapper/dists", "Gradle versions (wrapper)"),
    (".sdkman/candidates", "JVM toolchains (SDKMAN!)"),
    (".asdf/installs", "toolchains (asdf)"),
    (".asdf/shims", "toolchains (asdf)"),
    (".local/share/mise/installs", "toolchains (mise)"),
    (".local/share/mise/shims", "toolchains (mise)"),
    (".ghcup/bin", "Haskell toolchains (ghcup)"),
    (".dotnet", ".NET SDKs"),
    (".nuget/packages", "NuGet's package cache"),
    (".elan/toolchains", "Lean toolchains (elan)"),
)
#: The directories of every user's home: hidden as well, not only the caller's own.
OTHER_HOMES = ("/home", "/root", "/Users")
#: The generated git configuration's name in the repository's sandbox state (see :func:`identity_file`).
IDENTITY_FILE = "identity.gitconfig"


def toolchains(home: str) -> list[tuple[str, str]]:
    """The toolchain directories that exist under ``home`` (absolute), each with its reason."""
    out = [(os.path.join(home, rel), why) for rel, why in TOOLCHAINS if os.path.isdir(os.path.join(home, rel))]
    lib = os.path.join(home, ".local", "lib")
    with contextlib.suppress(OSError):
        for name in sorted(os.listdir(lib)):
            site = os.path.join(lib, name, "site-packages")
            if name.startswith("python") and os.path.isdir(site):
                out.append((site, "user site-packages"))
    return out


def hidden_homes(home: str | None) -> list[str]:
    """The homes to hide: the user's own and :data:`OTHER_HOMES`, outermost only (``/home`` covers
    ``/home/u``); never ``/``."""
    found = [h for h in OTHER_HOMES if os.path.isdir(h)]
    if home and os.path.isabs(home) and os.path.isdir(home):
        found.append(os.path.realpath(home))
    found = [os.path.realpath(h) for h in found]
    found = [h for h in dict.fromkeys(found) if h != "/"]
    return [h for h in found if not any(h != o and h.startswith(o.rstrip("/") + "/") for o in found)]


def git_identity(paths: Sequence[str]) -> tuple[str, str] | None:
    """``user.name`` and ``user.email`` from git configuration files, the last file that sets each
    winning (as git reads ``$XDG_CONFIG_HOME/git/config`` and then ``~/.gitconfig``); None when
    neither is set. Includes and conditional includes are not followed: nothing else is taken."""
    found: dict[str, str] = {}
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read(1024 * 1024)
        except OSError:
            continue
        found.update(_user_section(text.splitlines()))
    name, email = found.get("name", ""), found.get("email", "")
    return (name, email) if name or email else None


def _user_section(lines: Iterable[str]) -> dict[str, str]:
    """``name`` and ``email`` of the ``[user]`` sections of a git config file (a plain reading:
    quotes and trailing comments removed; a value continued on the next line is not taken)."""
    out: dict[str, str] = {}
    section = ""
    for raw in lines:
        line = raw.strip()
        if line.startswith("["):
            section = line[1:].split("]", 1)[0].strip().split(" ", 1)[0].lower()
            line = line.split("]", 1)[1].strip() if "]" in line else ""
        if section != "user" or "=" not in line:
            continue
        key, _, value = line.partition("=")
        key = key.strip().lower()
        if key in ("name", "email") and not value.rstrip().endswith("\\"):
            out[key] = _value(value)
    return out


def _value(text: str) -> str:
    """A config value without its quotes and trailing comment."""
    out, quoted = [], False
    chars = iter(text.strip())
    for c in chars:
        if c == "\\":
            out.append(next(chars, ""))
        elif c == '"':
            quoted = not quoted
        elif c in "#;" and not quoted:
            break
        else:
            out.append(c)
    return "".join(out).strip()


def identity_text(identity: tuple[str, str]) -> str:
    """A git config file that says the identity and nothing else."""

    def quote(value: str) -> str:
        clean = "".join(c for c in value if c.isprintable())
        return '"' + clean.replace("\\", "\\\\").replace('"', '\\"') + '"'

    name, email = identity
    lines = ["[user]"]
    lines += [f"\tname = {quote(name)}"] if name else []
    lines += [f"\temail = {quote(email)}"] if email else []
    return "\n".join(lines) + "\n"


def identity_file(state_dir: str, identity: tuple[str, str]) -> str | None:
    """``<state_dir>/identity.gitconfig`` holding :func:`identity_text` (rewritten only when it
    changed); None when it cannot be written (the sandbox then has no identity, as git would not)."""
    path = os.path.join(state_dir, IDENTITY_FILE)
    text = identity_text(identity).encode()
    with contextlib.suppress(OSError), open(path, "rb") as fh:
        if fh.read(len(text) + 1) == text and not os.path.islink(path):
            return path
    try:
        os.makedirs(state_dir, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444)
        try:
            os.write(fd, text)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        return None
    return path


def linked_config(agent_home: str, agent: str, names: Sequence[str]) -> list[str]:
    """The user's configuration that the run's agent home links to (``CLAUDE.md``, ``commands``, ...:
    :func:`sandbox.agent.agenthome.relink_config` made each link, at the top of the home, in its
    ``.<agent>`` directory or in ``skills/``, lead to the user's entry of the same name). Only names the adapter links,
    and only where the link leads to an entry of that name: a link the agent planted shows nothing."""
    out = []
    folders = [(agent_home, names), (os.path.join(agent_home, f".{agent}"), names)]
    skills = os.path.join(agent_home, "skills")  # Codex's: each of the user's skills linked in, made anew each session
    if not os.path.islink(skills):
        with contextlib.suppress(OSError):
            folders.append((skills, os.listdir(skills)))
    for folder, listed in folders:
        for name in listed:
            link = os.path.join(folder, name)
            try:
                target = os.readlink(link)
            except OSError:
                continue
            if os.path.isabs(target) and os.path.basename(target.rstrip("/")) == name and os.path.exists(target):
                out.append(os.path.realpath(target))
    return out
