"""The project's sandbox settings: ``.sandbox.toml``, ``[tool.sandbox]`` and ``.worktreeinclude``.

Settings are read from the *user's* working tree, never from a run's worktree, so an agent cannot
loosen its own policy by editing them. ``.sandbox.toml`` wins over ``[tool.sandbox]`` in
``pyproject.toml``; both have the same keys::

    include = [".env", "config/*.local.json"]   # ignored paths copied into each new worktree
    link = ["node_modules", ".venv"]            # ignored directories symlinked instead (shared!)
    data_dir = "~/sandboxes"  # where runs get their home (default: $XDG_DATA_HOME/sandbox, else
                              # ~/.local/share/sandbox); keyed by repository below it

    [hooks]
    strict = false            # true: a hook that cannot record blocks the agent's tool call
    autostart = true          # false: a hook finding no host records in-process (no `sandbox serve`)
    allow_edits = false       # true: the sandbox answers the agent's permission question for file
                              # edits inside the run's worktree (see hooks/README.md); false: the agent asks

    [isolation]               # OS confinement of `sandbox run` / `sandbox exec` (see sandbox.confine.spawn)
    isolate = true            # false: no confinement (the flags --isolate on|off win over this)
    network_run = "allow"     # `sandbox run`: "allow" (through the allowlist below), true (all), false
    network_exec = false      # `sandbox exec`: no network unless --network on
    agent_state = ["~/.claude/", "~/.claude.json"]   # replaces the default list of agent state paths
    writable = ["~/.cache/pip/"]                      # more paths the agent may write
    deny_read = ["~/work/secrets/"]                  # more paths masked inside (see docs/confinement.md)
    allow_read = ["~/.npmrc"]                        # taken out of the masked set (or bound back below it)
    env_allow = ["AWS_PROFILE", "MY_*"]              # more inherited variables the agent may see
    unix_sockets = ["/run/user/1000/podman/podman.sock"]   # sockets kept reachable inside
    tmpfs_size = "1G"         # the private /tmp and /dev/shm (bytes, or with K/M/G)
    max_processes = 1024      # processes and threads (pids cgroup where possible, RLIMIT_NPROC)
    max_open_files = 1024     # open files per process (RLIMIT_NOFILE)
    max_file_size = "16G"     # the largest file a process may write (RLIMIT_FSIZE)
    max_memory = "8G"         # all its processes together (memory cgroup where possible)
    max_call_size = "2G"      # what one call may add to the worktree (default 256M)
    max_read_size = "256M"    # the largest agent file read into memory to record it (default 256M)

    [network]                 # `sandbox run --network allow` (its default): hosts the agent may reach
    allow = ["pypi.org", "files.pythonhosted.org", "registry.npmjs.org:443", "*.internal.example:*"]

    [[tools]]                 # how agent tools are recorded (first match wins; fnmatch on the name)
    match = "mcp__memory__*"
    kind = "read"             # write | command | read | external | unknown
    idempotency = "idempotent"
    replay = "auto"
    # deny = "why"            # refuse every call of these tools at the hook (the agent is told why)

``.worktreeinclude`` (gitignore syntax, as Claude Code reads it) adds to ``include``.
TOML is parsed with :mod:`tomllib` (Python 3.11+), ``tomli`` when installed, else a small parser
that reads the subset above (tables, arrays of tables, strings, booleans, integers, string arrays).
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from sandbox.errors import SandboxError

#: What one call may add to the worktree when ``max_call_size`` is not set (issue #31: a call wrote 512 MiB
#: into the worktree and as much into your object store). Ignored files (``node_modules``, build output)
#: do not count; a larger call is recorded failed, in one line naming the setting, its files kept.
DEFAULT_MAX_CALL_SIZE = 256 * 1024**2

CONFIG_FILE = ".sandbox.toml"
PYPROJECT = "pyproject.toml"
WORKTREEINCLUDE = ".worktreeinclude"
MAX_CONFIG_BYTES = 1024 * 1024
KINDS = ("write", "command", "read", "external", "unknown")


class ConfigError(SandboxError):
    """A settings file is malformed."""

    exit_code = 2


@dataclass
class ToolRule:
    """How calls of the tools matching ``match`` are recorded."""

    match: str
    kind: str | None = None
    idempotency: str | None = None
    replay: str | None = None
    #: When set, every call of these tools is refused before it runs, with this reason.
    deny: str | None = None


@dataclass
class Config:
    """The project's sandbox settings (all optional)."""

    include: list[str] = field(default_factory=list)
    link: list[str] = field(default_factory=list)
    strict: bool = False
    autostart: bool = True
    allow_edits: bool = False
    tools: list[ToolRule] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    isolate: bool = True
    #: ``allow`` (the allowlist proxy), ``on`` or ``off``; ``true``/``false`` in the file are on/off.
    network_run: str = "allow"
    network_exec: bool = False
    #: ``[network] allow``: hosts added to the allowlist of ``--network allow``.
    network_allow: list[str] = field(default_factory=list)
    #: None: :data:`sandbox.agent.agentstate.DEFAULT_AGENT_STATE`.
    agent_state: list[str] | None = None
    writable: list[str] = field(default_factory=list)
    #: The data root as written (``~`` and ``$VARS`` are expanded by the CLI, not here).
    data_dir: str | None = None
    deny_read: list[str] = field(default_factory=list)
    allow_read: list[str] = field(default_factory=list)
    env_allow: list[str] = field(default_factory=list)
    unix_sockets: list[str] = field(default_factory=list)
    #: Sizes and counts of [isolation] as given (None: the default of :class:`sandbox.confine.spawn.Limits`).
    limits: dict[str, int] = field(default_factory=dict)


def load(workdir: str) -> Config:
    """Read the settings of the user's working tree ``workdir`` (defaults when there are none)."""
    cfg = Config()
    table: dict[str, object] | None = None
    own = os.path.join(workdir, CONFIG_FILE)
    if os.path.isfile(own):
        table = _load_toml(own)
        cfg.sources.append(CONFIG_FILE)
    else:
        pyproject = os.path.join(workdir, PYPROJECT)
        if os.path.isfile(pyproject):
            tool = _load_toml(pyproject).get("tool", {})
            if isinstance(tool, dict) and isinstance(tool.get("sandbox"), dict):
                table = tool["sandbox"]
                cfg.sources.append(f"{PYPROJECT} [tool.sandbox]")
    if table is not None:
        _apply(cfg, table, cfg.sources[-1])
    include_file = os.path.join(workdir, WORKTREEINCLUDE)
    if os.path.isfile(include_file):
        cfg.include.extend(read_patterns(include_file))
        cfg.sources.append(WORKTREEINCLUDE)
    return cfg


def read_patterns(path: str) -> list[str]:
    """The patterns of a gitignore-syntax file (comments and blank lines dropped)."""
    out = []
    for line in _read_text(path).splitlines():
        line = line.rstrip("\r")
        if not line.strip() or line.startswith("#"):
            continue
        out.append(line)
    return out


def _apply(cfg: Config, table: dict[str, object], where: str) -> None:
    cfg.include.extend(_str_list(table.get("include", []), f"{where}: include"))
    cfg.link.extend(_str_list(table.get("link", []), f"{where}: link"))
    data_dir = table.get("data_dir")
    if data_dir is not None and (not isinstance(data_dir, str) or not data_dir.strip()):
        raise ConfigError(f"{where}: data_dir must be a non-empty string (a directory).")
    cfg.data_dir = data_dir
    hooks = table.get("hooks", {})
    if not isinstance(hooks, dict):
        raise ConfigError(f"{where}: 'hooks' must be a table.")
    strict = hooks.get("strict", False)
    if not isinstance(strict, bool):
        raise ConfigError(f"{where}: hooks.strict must be true or false.")
    cfg.strict = strict
    autostart = hooks.get("autostart", True)
    if not isinstance(autostart, bool):
        raise ConfigError(f"{where}: hooks.autostart must be true or false.")
    cfg.autostart = autostart
    allow_edits = hooks.get("allow_edits", False)
    if not isinstance(allow_edits, bool):
        raise ConfigError(f"{where}: hooks.allow_edits must be true or false.")
    cfg.allow_edits = allow_edits
    _apply_isolation(cfg, table.get("isolation", {}), where)
    _apply_network(cfg, table.get("network", {}), where)
    rules = table.get("tools", [])
    if not isinstance(rules, list):
        raise ConfigError(f"{where}: 'tools' must be an array of tables ([[tools]]).")
    for rule in rules:
        if not isinstance(rule, dict) or not isinstance(rule.get("match"), str):
            raise ConfigError(f"{where}: each [[tools]] entry needs a 'match' string.")
        kind = rule.get("kind")
        if kind is not None and kind not in KINDS:
            raise ConfigError(f"{where}: tool kind {kind!r} is not one of {', '.join(KINDS)}.")
        idem, replay = rule.get("idempotency"), rule.get("replay")
        if idem is not None and idem not in ("idempotent", "conditional", "non_idempotent"):
            raise ConfigError(f"{where}: idempotency {idem!r} is not idempotent, conditional or non_idempotent.")
        if replay is not None and replay not in ("auto", "ask", "never"):
            raise ConfigError(f"{where}: replay {replay!r} is not auto, ask or never.")
        deny = rule.get("deny")
        if deny is not None and (not isinstance(deny, str) or not deny.strip()):
            raise ConfigError(f"{where}: a tool rule's 'deny' must be a non-empty reason string.")
        cfg.tools.append(ToolRule(rule["match"], kind, idem, replay, deny))


def _apply_isolation(cfg: Config, table: Any, where: str) -> None:
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: 'isolation' must be a table.")
    run_net = table.get("network_run", cfg.network_run)
    if isinstance(run_net, bool):
        run_net = "on" if run_net else "off"
    if run_net not in ("on", "off", "allow"):
        raise ConfigError(f'{where}: isolation.network_run must be "allow", true or false.')
    cfg.network_run = run_net
    for key in ("isolate", "network_exec"):
        value = table.get(key, getattr(cfg, key))
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: isolation.{key} must be true or false.")
        setattr(cfg, key, value)
    if "agent_state" in table:
        cfg.agent_state = _str_list(table["agent_state"], f"{where}: isolation.agent_state")
    cfg.writable.extend(_str_list(table.get("writable", []), f"{where}: isolation.writable"))
    for key in ("deny_read", "allow_read", "env_allow", "unix_sockets"):
        entries = _str_list(table.get(key, []), f"{where}: isolation.{key}")
        # A relative path would be taken from wherever sandbox is started: a secret masked from the
        # repository's root would stay readable from a subdirectory.
        relative = [e for e in entries if key != "env_allow" and not e.startswith(("/", "~/")) and e != "~"]
        if relative:
            raise ConfigError(
                f"{where}: isolation.{key} entry {relative[0]!r} is not absolute; write /abs/path or ~/path."
            )
        getattr(cfg, key).extend(entries)
    for key in LIMIT_KEYS:
        if key in table:
            cfg.limits[key] = _size(
                table[key], f"{where}: isolation.{key}", count=key in ("max_processes", "max_open_files")
            )
    unknown = sorted(set(table) - {*ISOLATION_KEYS, *LIMIT_KEYS})
    if unknown:
        raise ConfigError(f"{where}: unknown isolation setting {unknown[0]!r}.")


def _apply_network(cfg: Config, table: Any, where: str) -> None:
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: 'network' must be a table.")
    cfg.network_allow.extend(_str_list(table.get("allow", []), f"{where}: network.allow"))
    unknown = sorted(set(table) - {"allow"})
    if unknown:
        raise ConfigError(f"{where}: unknown network setting {unknown[0]!r}.")


ISOLATION_KEYS = (
    "isolate",
    "network_run",
    "network_exec",
    "agent_state",
    "writable",
    "deny_read",
    "allow_read",
    "env_allow",
    "unix_sockets",
)
LIMIT_KEYS = (
    "tmpfs_size",
    "max_processes",
    "max_open_files",
    "max_file_size",
    "max_memory",
    "max_call_size",
    "max_read_size",
)
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def _size(value: Any, what: str, count: bool = False) -> int:
    """A positive size (an integer of bytes, or ``"512M"``-like text), or a count."""
    if isinstance(value, bool):
        value = None
    if isinstance(value, str) and not count:
        m = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)(?:i?B)?\s*", value, re.IGNORECASE)
        value = int(m.group(1)) * _UNITS[m.group(2).upper()] if m else None
    if not isinstance(value, int) or value <= 0 or value >= 2**62:
        kind = "a positive whole number" if count else 'a positive size in bytes or with a unit ("512M", "2G")'
        raise ConfigError(f"{what} must be {kind}.")
    return value


def _str_list(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{what} must be an array of strings.")
    return list(value)


def _read_text(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"Cannot read {path} ({exc.strerror}).") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path} is larger than 1 MiB; that is not a settings file.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not UTF-8 text.") from None


def _load_toml(path: str) -> dict[str, object]:
    text = _read_text(path)
    loads: Any
    decode_error: Any
    if sys.version_info >= (3, 11):
        import tomllib

        loads, decode_error = tomllib.loads, tomllib.TOMLDecodeError
    else:
        try:
            import tomli  # type: ignore[import-not-found,unused-ignore]  # only if already installed
        except ImportError:
            return parse_toml_subset(text, path)
        loads, decode_error = tomli.loads, tomli.TOMLDecodeError
    try:
        data: dict[str, object] = loads(text)
    except decode_error as exc:
        raise ConfigError(f"{path} is not valid TOML ({exc}).") from None
    return data


# -- a small TOML subset, for Python 3.10 without tomli ----------------------------------------

# Patterns, not compiled ones: compiled on first use (re caches them), so a process that reads no
# settings file, or has tomllib, does not pay for them (~2 ms of every command's start-up).
_KEY = r'(?:[A-Za-z0-9_-]+|"[^"]*")'
_HEADER = rf"^\[(\[)?\s*({_KEY}(?:\s*\.\s*{_KEY})*)\s*\]?\]\s*(?:#.*)?$"
_ASSIGN = rf"^({_KEY}(?:\s*\.\s*{_KEY})*)\s*=\s*(.*)$"
_STRING = r'"((?:[^"\\]|\\.)*)"|\'([^\']*)\''


def parse_toml_subset(text: str, where: str = "TOML") -> dict[str, object]:
    """Parse the TOML subset the settings use; anything else is a :class:`ConfigError`."""
    root: dict[str, object] = {}
    current = root
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        if not line or line.startswith("#"):
            continue
        header = re.match(_HEADER, line)
        if header and line.startswith("["):
            keys = _split_key(header.group(2))
            if header.group(1):
                parent = _descend(root, keys[:-1], where)
                items = parent.setdefault(keys[-1], [])
                if not isinstance(items, list):
                    raise ConfigError(f"{where}: [[{header.group(2)}]] clashes with a value.")
                current = {}
                items.append(current)
            else:
                current = _descend(root, keys, where)
            continue
        assign = re.match(_ASSIGN, line)
        if not assign:
            raise ConfigError(f"{where}: cannot read line {i}: {line[:60]!r}.")
        value_text = assign.group(2)
        while value_text.lstrip().startswith("[") and value_text.count("[") > value_text.count("]") and i < len(lines):
            value_text += " " + lines[i].strip()
            i += 1
        keys = _split_key(assign.group(1))
        _descend(current, keys[:-1], where)[keys[-1]] = _value(value_text.strip(), where, i)
    return root


def _split_key(text: str) -> list[str]:
    return [k.strip().strip('"') for k in re.findall(rf"{_KEY}", text)]


def _descend(table: dict[str, object], keys: list[str], where: str) -> dict[str, object]:
    for key in keys:
        nxt = table.setdefault(key, {})
        if isinstance(nxt, list) and nxt and isinstance(nxt[-1], dict):
            nxt = nxt[-1]
        if not isinstance(nxt, dict):
            raise ConfigError(f"{where}: key {key!r} is both a value and a table.")
        table = nxt
    return table


def _value(text: str, where: str, line: int) -> Any:
    text = re.sub(r"\s+#[^\"']*$", "", text).strip()
    if text in ("true", "false"):
        return text == "true"
    if re.fullmatch(r"[+-]?\d+", text):
        return int(text)
    if text.startswith("["):
        body = text[1 : text.rindex("]")] if "]" in text else ""
        return [m.group(1) if m.group(1) is not None else m.group(2) for m in re.finditer(_STRING, body)]
    m = re.fullmatch(_STRING, text)
    if m:
        return (m.group(1) if m.group(1) is not None else m.group(2)).replace('\\"', '"').replace("\\\\", "\\")
    raise ConfigError(f"{where}: line {line}: unsupported value {text[:40]!r} (install tomli for full TOML).")
