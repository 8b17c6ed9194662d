"""The environment a confined process inherits: an allowlist of variable names, never our secrets.

Everything not named (``SSH_AUTH_SOCK``, ``DBUS_*``, ``DISPLAY``, ``*_TOKEN``, ``AWS_*``, ...) is dropped;
the sandbox's own variables are set after the filter (:func:`sandbox.confine.spawn.spawn`).
Standard library only (``sandbox exec``'s fast path imports it).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping, Sequence

#: Set inside every sandbox: a ``sandbox exec`` run by the agent knows it is already confined.
CONFINED_ENV = "SANDBOX_CONFINED"
#: The bearer token of ``sandbox mcp --http`` (when the user fixes it): never handed to a confined
#: process, which could otherwise drive that server (loopback reaches it).
MCP_TOKEN_ENV = "SANDBOX_MCP_TOKEN"
#: Variables of ours a confined process never inherits.
WITHHELD_ENV = (MCP_TOKEN_ENV,)

#: The variables a confined process inherits from the caller's environment (``fnmatch`` patterns).
#: Everything else (``SSH_AUTH_SOCK``, ``DBUS_*``, ``DISPLAY``, ``WAYLAND_*``, ``*_TOKEN``, ``AWS_*``,
#: ...) is dropped unless the agent's own names (its ``ENV`` in :mod:`sandbox.agent.adapters`) or ``env_allow`` name it.
DEFAULT_ENV_ALLOW = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "HOSTNAME",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TERM",
    "COLORTERM",
    "TERM_PROGRAM",
    "COLUMNS",
    "LINES",
    "NO_COLOR",
    "FORCE_COLOR",
    "TZ",
    "EDITOR",
    "VISUAL",
    "PAGER",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
    "PYTHONPATH",
    "PYTHONUNBUFFERED",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONIOENCODING",
    "VIRTUAL_ENV",
    "GIT_AUTHOR_*",
    "GIT_COMMITTER_*",
    "GIT_CONFIG_NOSYSTEM",
    # Never GIT_CONFIG_COUNT / GIT_CONFIG_KEY_n / GIT_CONFIG_VALUE_n: config given by variables carries
    # http.extraHeader tokens and credential helpers as easily as anything else.
    *(
        "SANDBOX_RUN",  # the run an agent's own `sandbox exec` / `sandbox mcp` works on
        "SANDBOX_SESSION",  # the agent session's token (sandbox.agent.procs)
        "SANDBOX_HOOK_AUTOSTART",  # whether the agent's hooks may start the repository's host
        "SANDBOX_FAULT",  # the test suite's crash points
    ),
)


def filter_env(env: Mapping[str, str], allow: Sequence[str]) -> dict[str, str]:
    """The variables of ``env`` that a confined process inherits: those ``allow`` names, never :data:`WITHHELD_ENV`."""
    passes = env_matcher(allow)
    return {k: v for k, v in env.items() if k not in WITHHELD_ENV and passes(k)}


def env_matcher(allow: Sequence[str]) -> Callable[[str], bool]:
    """A test of a variable's name against ``allow``, with :func:`fnmatch.fnmatchcase`'s meaning.

    Names and ``PREFIX*`` patterns (nearly all of them) are matched without a regular expression:
    ``fnmatch`` compiles one per pattern, ~2 ms of every ``sandbox exec`` for the default list.
    """
    exact: set[str] = set()
    prefixes: list[str] = []
    others: list[str] = []
    for pattern in allow:
        if not any(c in pattern for c in "*?["):
            exact.add(pattern)
        elif pattern.endswith("*") and not any(c in pattern[:-1] for c in "*?["):
            prefixes.append(pattern[:-1])
        else:
            others.append(pattern)
    starts = tuple(prefixes)
    return lambda name: name in exact or name.startswith(starts) or any(fnmatch.fnmatchcase(name, p) for p in others)


def renumber_git_config(env: dict[str, str]) -> None:
    """Make the ``GIT_CONFIG_KEY_n``/``VALUE_n`` pairs left in ``env`` (the sandbox's own, set after the
    filter: ``core.hooksPath``) consecutive from 0, with ``GIT_CONFIG_COUNT`` to match: the user's pairs
    numbered before them were dropped, and git refuses a count that names a missing key."""
    pairs = []
    for name in sorted((k for k in env if k.startswith("GIT_CONFIG_KEY_")), key=lambda k: (len(k), k)):
        n = name[len("GIT_CONFIG_KEY_") :]
        value = env.pop(f"GIT_CONFIG_VALUE_{n}", None)
        key = env.pop(name)
        if value is not None:
            pairs.append((key, value))
    for name in [k for k in env if k.startswith("GIT_CONFIG_VALUE_")]:
        del env[name]
    env.pop("GIT_CONFIG_COUNT", None)
    for i, (key, value) in enumerate(pairs):
        env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"] = key, value
    if pairs:
        env["GIT_CONFIG_COUNT"] = str(len(pairs))
