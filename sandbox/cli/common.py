"""What every command shares: lazy registration, finding the run, output, and the error edge."""

from __future__ import annotations

import codecs
import contextlib
import importlib
import inspect
import io
import json
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import click

if TYPE_CHECKING:
    from sandbox.fast.foldcache import Repository
    from sandbox.run.run import Run
    from sandbox.store.project import Project


class AgentChoice(click.Choice):  # type: ignore[type-arg]
    """A choice among the agents with hooks, read from the registry (:mod:`sandbox.agent.adapters`)
    when first needed, so that defining a command does not import it (``sandbox --help``)."""

    def __init__(self, extra: Sequence[str] = ()) -> None:
        self._extra = tuple(extra)
        super().__init__(())

    @property  # type: ignore[override]
    def choices(self) -> Sequence[str]:
        """``extra`` then the agents with hooks."""
        from sandbox.agent import adapters

        return (*self._extra, *adapters.hook_names())

    @choices.setter
    def choices(self, _value: Sequence[str]) -> None:
        """Set by click's constructor; the registry answers instead."""


class SandboxGroup(click.Group):
    """A click group whose commands are imported only when used."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands: dict[str, str] = {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command's name, lazily registered ones included."""
        names = set(super().list_commands(ctx)) | set(self.lazy_commands)
        return sorted(n for n in names if self.get_command(ctx, n) is not None)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command named ``cmd_name``, its module imported now if it was registered lazily."""
        if cmd_name in self.lazy_commands:
            module, _, attr = self.lazy_commands[cmd_name].partition(":")
            try:
                loaded = importlib.import_module(module)
            except ModuleNotFoundError as exc:
                if exc.name != module:
                    raise
                return None  # registered ahead of its module (work in progress)
            command = getattr(loaded, attr)
            assert isinstance(command, click.Command)
            return shared_options(command)
        found = super().get_command(ctx, cmd_name)
        return shared_options(found) if found is not None else None

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """A bare ``--color`` before the command's name means ``always`` (as after it, and in git):
        it never takes the command's name as its value."""
        out = list(args)
        i = 0
        while i < len(out) and out[i] != "--":
            if out[i] == "--color":
                out[i] = "--color=always"
            elif out[i] == "-C":
                i += 1  # its value
            elif not out[i].startswith("-"):
                break  # the command's name: what follows is the command's
            i += 1
        return super().parse_args(ctx, out)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list with each command's first sentence whole (wrapped, never cut mid-sentence)."""
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is None or cmd.hidden:
                continue
            text = cmd.short_help or _first_sentence(cmd.help or "")
            rows.append((name, text))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """Like click's, with "did you mean" over every command, the lazily imported ones too."""
        try:
            return super().resolve_command(ctx, args)
        except click.exceptions.NoSuchCommand:
            from sandbox.run.names import did_you_mean

            names = set(self.commands) | set(self.lazy_commands)
            hint = did_you_mean(args[0], names)
            raise click.UsageError(f"No such command {args[0]!r}.{hint}", ctx=ctx) from None

    def invoke(self, ctx: click.Context) -> Any:
        """Turn a :class:`SandboxError` into one line on stderr and its exit code."""
        from sandbox.errors import SandboxError

        try:
            return super().invoke(ctx)
        except SandboxError as exc:
            click.echo(f"sandbox: {_safe(exc.message)}", err=True)
            ctx.exit(exc.exit_code)


def _first_sentence(help_text: str) -> str:
    """The first sentence of a command's help (its first paragraph, up to a full stop), whole."""
    paragraph = " ".join(inspect.cleandoc(help_text).split("\n\n", 1)[0].split())
    end = paragraph.find(". ")
    return paragraph[: end + 1] if end >= 0 else paragraph


# -- -C DIR and --json on every command -----------------------------------------------------------------

_SHARED = "_sandbox_shared_options"


def _root_obj(ctx: click.Context) -> dict[str, object]:
    root = ctx.find_root()
    root.ensure_object(dict)
    assert isinstance(root.obj, dict)
    return root.obj


def set_directory(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """``-C DIR`` (a click callback): like git, each ``-C`` is taken relative to the one before."""
    if value:
        obj = _root_obj(ctx)
        before = obj.get("directory")
        obj["directory"] = os.path.join(before, value) if isinstance(before, str) and before else value
    return value


def set_json(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    """``--json`` (a click callback), wherever it was given: the command prints JSON."""
    if value:
        _root_obj(ctx)["json"] = True
    return value


def wants_json(ctx: click.Context) -> bool:
    """True when ``--json`` was given, before the subcommand or after it."""
    return bool(_root_obj(ctx).get("json"))


def shared_options(command: click.Command) -> click.Command:
    """Give ``command`` the options every command takes: ``-C DIR`` and ``--json``.

    One mechanism for all commands, so no command can forget them: the lazy group calls this on
    every command it hands out (once per command object). A command with its own ``--json``
    (a parameter ``as_json``) also gets it set by a ``--json`` given before the subcommand.
    """
    if getattr(command, _SHARED, False):
        return command
    opts = {opt for param in command.params for opt in getattr(param, "opts", ())}
    # A command where the flags mean something narrower says so (``sandbox hook``: see hook.py).
    help_for: dict[str, str] = getattr(command, "shared_help", {})
    if "-C" not in opts:
        command.params.append(
            click.Option(
                ["-C", "shared_directory"],
                metavar="DIR",
                type=click.Path(file_okay=False),
                expose_value=False,
                callback=set_directory,
                help=help_for.get("-C", "Run as if started in DIR (like git -C)."),
            )
        )
    if "--json" not in opts:
        command.params.append(
            click.Option(
                ["--json", "shared_json"],
                is_flag=True,
                expose_value=False,
                callback=set_json,
                help=help_for.get("--json", "Print the result as JSON."),
            )
        )
    elif command.callback is not None and any(p.name == "as_json" for p in command.params):
        command.callback = _json_from_anywhere(command.callback)
    for param in command.params:
        _complete_names(param)
        _refuse_empty_run(param)
    setattr(command, _SHARED, True)
    return command


def _complete_names(param: click.Parameter) -> None:
    """Shell completion of run ids and labels for RUN, call ids for CALL (see sandbox.cli.complete)."""
    if isinstance(param, click.Argument) and (param.name == "run_id" or param.name == "rest"):
        which = "complete_runs"  # rest: exec's and run's [RUN] -- COMMAND
    elif param.name in ("call_id", "calls") and (isinstance(param, click.Argument) or "--call" in param.opts):
        which = "complete_calls"
    else:
        return

    def complete(ctx: click.Context, incomplete: str) -> Any:
        from sandbox.cli import complete as names

        return getattr(names, which)(ctx, param, incomplete)

    # Click asks the parameter itself (Parameter.shell_complete); this one asks the run.
    setattr(param, "shell_complete", complete)  # noqa: B010


def _refuse_empty_run(param: click.Parameter) -> None:
    """RUN given but empty (``sandbox drop "$RUN"`` with RUN unset) is refused before the command
    runs; left out, it means the run we are in or the only run (see :func:`sandbox.run.names.resolve_run`)."""
    if not (isinstance(param, click.Argument) and param.name == "run_id"):
        return
    inner = param.callback

    def check(ctx: click.Context, p: click.Parameter, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            from sandbox.run.names import empty_run_name

            raise empty_run_name(value)
        return inner(ctx, p, value) if inner is not None else value

    param.callback = check


def _json_from_anywhere(callback: Any) -> Any:
    import functools

    @functools.wraps(callback)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("as_json") and wants_json(click.get_current_context()):
            kwargs["as_json"] = True
        return callback(*args, **kwargs)

    return wrapper


def base_dir(ctx: click.Context) -> str:
    """The directory the command works from (``-C DIR`` or the current directory)."""
    root = ctx.find_root()
    directory = root.obj.get("directory") if root.obj else None
    return os.path.abspath(directory or os.getcwd())


def open_project(ctx: click.Context) -> tuple[Project, str | None, str | None]:
    """The project around the working directory: (project, user workdir, run id of cwd).

    The project gets the data root new runs are placed under (see :func:`data_root`).
    """
    from sandbox.store.project import Project

    # GIT_DIR / GIT_WORK_TREE name the repository and tree as they do for git (the library reads no environment).
    git_dir, work_tree = os.environ.get("GIT_DIR") or None, os.environ.get("GIT_WORK_TREE") or None
    project, workdir, cwd_run = Project.discover(base_dir(ctx), git_dir=git_dir, work_tree=work_tree)
    project.data_root = data_root(workdir or main_workdir(project.common_dir))
    return project, workdir, cwd_run


def fast_open(ctx: click.Context, run_id: str | None) -> tuple[Repository, str] | None:
    """The repository and the id of the run named (or the one we are in) as the fast read path
    finds them (:mod:`sandbox.fast.foldcache`); None when it cannot: take the full path."""
    from sandbox.fast import foldcache

    if os.environ.get("GIT_DIR"):
        return None  # the fast path finds repositories from the directory only: GIT_DIR is the full path's
    try:
        repo, _workdir, cwd_run = foldcache.discover(base_dir(ctx))
        found = repo.resolve(run_id, cwd_run)
        repo.state(found)  # the run reads whole from its sealed cache
        return repo, found
    except foldcache.Miss:
        return None


def main_workdir(common_dir: str) -> str | None:
    """The main working tree of a repository whose common git dir is ``common_dir`` (None: bare)."""
    return os.path.dirname(common_dir) if os.path.basename(common_dir) == ".git" else None


def data_root(workdir: str | None) -> str:
    """Where runs get their home: ``data_dir`` of the user's ``.sandbox.toml``, else the XDG default.

    The one place the environment and ``~`` are read for it; the library is given the result.
    """
    from sandbox.run import config
    from sandbox.store import layout

    configured = config.load(workdir).data_dir if workdir else None
    if configured:
        expanded = os.path.expanduser(os.path.expandvars(configured))
        return os.path.abspath(os.path.join(workdir or os.getcwd(), expanded))
    return layout.user_data_root(os.environ, os.path.expanduser("~"))


def open_run(ctx: click.Context, run_id: str | None, report_problems: bool = True) -> Run:
    """The run named on the command line, or the one whose worktree we are in.

    Its ledger is read (and verified) here, so derived state that did not match the ledger is
    reported, one line each, before the command works from the rebuilt state.
    """
    from sandbox.run.names import resolve_run
    from sandbox.run.run import Run

    project, _workdir, cwd_run = open_project(ctx)
    run = Run.open(project, resolve_run(project, run_id, cwd_run))
    if not report_problems:
        run.load()
        seal_when_done(run)
        return run
    return verified(run)


def seal_when_done(run: Run) -> None:
    """Leave the run's fold cache at the ledger's tip when the command ends (see :func:`verified`)."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.call_on_close(lambda: _seal(run))


def _seal(run: Run) -> None:
    from sandbox.errors import SandboxError

    # Only a cache: a run dropped, damaged or unwritable meanwhile keeps the one it has.
    with contextlib.suppress(SandboxError, OSError):
        run.seal_cache()


def ensure_worktree(run: Run) -> str | None:
    """Make the run's worktree here when it has none in this repository (a fetched run); the line
    to show, or None (see :mod:`sandbox.runs.materialize`)."""
    from sandbox.runs.materialize import ensure

    return ensure(run)


def run_then(run_id: str | None, other: str | None, metavar: str) -> tuple[str | None, str]:
    """``[RUN] X`` arguments: with one word it is X, and the run is the one we are in (or the only one).

    Declare both arguments optional (``run_id`` first); click alone fills the first one first.
    """
    if other is not None:
        return run_id, other
    if run_id is None:
        raise click.UsageError(f"Missing argument '{metavar}'.")
    return None, run_id


def open_call(ctx: click.Context, run_id: str | None, call: str) -> tuple[Run, str]:
    """The run named (or the one we are in) and the id of its call ``call`` names (see sandbox.run.names)."""
    from sandbox.run.names import resolve_call_id

    run = open_run(ctx, run_id)
    return run, resolve_call_id(run, call)


def verified(run: Run) -> Run:
    """``run`` with its ledger read and verified; what did not match is printed, one line each.

    When the command ends, the run's fold cache is left at the ledger's tip, so the next ``list``,
    ``status``, ``log`` or ``path`` reads it without git or pydantic (:mod:`sandbox.fast.foldcache`).
    """
    run.load()
    seal_when_done(run)
    for problem in run.problems:
        click.echo(f"sandbox: {problem}", err=True)
    return run


@contextlib.contextmanager
def stdout_to_stderr(active: bool) -> Iterator[None]:
    """While active, file descriptor 1 is stderr: a child's output stays off stdout, which then
    carries only this command's JSON (``exec --json``, ``run --json``)."""
    if not active:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def emit_json(value: Any) -> None:
    """Print a JSON document on stdout."""
    text = json.dumps(value, indent=2, sort_keys=False, default=str, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a file name that is not UTF-8: keep it exact as \udcXX escapes
        text = json.dumps(value, indent=2, sort_keys=False, default=str, ensure_ascii=True)
    click.echo(text)


#: Names persisted reports use that the CLI's JSON says in its one vocabulary (see sandbox.cli.outputs).
RENAMES = {"run_id": "run", "head": "run_head", "call": "call_id", "returncode": "exit_code"}


def renamed(data: Mapping[str, object]) -> dict[str, object]:
    """``data`` (a persisted report as JSON) with its top-level keys in the CLI's vocabulary."""
    return {RENAMES.get(k, k): v for k, v in data.items()}


def dump(model: Any) -> Any:
    """A pydantic model (or list of them) as plain JSON-able data."""
    if isinstance(model, list):
        return [dump(m) for m in model]
    return model.model_dump(mode="json")


def fail(message: str, code: int = 1) -> NoReturn:
    """Print one line on stderr and exit with ``code``."""
    click.echo(f"sandbox: {message}", err=True)
    sys.exit(code)


def _crash_log(exc: BaseException) -> str:
    import datetime  # here, not at the top: `sandbox hook` must start fast
    import tempfile
    import traceback

    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    fd, path = tempfile.mkstemp(prefix=f"sandbox-crash-{stamp}-", suffix=".log")
    # backslashreplace: an argument that is not valid UTF-8 (a surrogate escape) must not crash the crash log.
    with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as fh:
        fh.write(f"sandbox {' '.join(sys.argv[1:])}\n\n")
        fh.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    return path


def _safe(message: str) -> str:
    """An error's one line, with what the agent or the user typed in it made safe for a terminal."""
    from sandbox.cli import escape

    return escape.text(message)


def _write_names_as_given(exc: UnicodeError) -> tuple[str | bytes, int]:
    """An output error handler: a path's undecodable byte (a surrogate escape) is written as the
    byte it was, as ``ls`` and ``git -c core.quotePath=false`` do; anything else the terminal's
    encoding lacks is written as a backslash escape. Never an error."""
    try:
        return codecs.lookup_error("surrogateescape")(exc)
    except UnicodeError:
        return codecs.lookup_error("backslashreplace")(exc)


def lenient_output() -> None:
    """Make stdout and stderr write any name (see :func:`_write_names_as_given`): under a UTF-8
    locale Python's stdout is strict, and one file name that is not UTF-8 would end the command."""
    codecs.register_error("sandbox-names", _write_names_as_given)
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="sandbox-names")


def run_main(cli: click.Group) -> None:
    """Run the CLI, mapping errors to one line and an exit code.

    1: refused or conflict; 2: usage; 3: unexpected (traceback written to a log file); 130: Ctrl-C.
    """
    from sandbox import faults

    lenient_output()
    faults.arm(os.environ.get("SANDBOX_FAULT"))
    try:
        rv = cli.main(standalone_mode=False, prog_name="sandbox")
    except click.exceptions.Abort:
        click.echo("sandbox: interrupted.", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        # One line, like every other error: what is wrong, and where the help is.
        message = exc.format_message().strip().replace("\n", " ")
        if isinstance(exc, click.UsageError):
            where = exc.ctx.command_path if exc.ctx is not None else "sandbox"
            message += f" (see '{where} --help')"
        click.echo(f"sandbox: {_safe(message)}", err=True)
        sys.exit(2 if isinstance(exc, click.UsageError) else exc.exit_code)
    except KeyboardInterrupt:
        click.echo("sandbox: interrupted.", err=True)
        sys.exit(130)
    except BrokenPipeError:
        from sandbox.cli.output import paging

        sys.exit(0 if paging() else 1)  # quitting the pager early is not a failure
    except Exception as exc:  # the one place unexpected errors are turned into a line and a log
        from sandbox.errors import SandboxError

        if isinstance(exc, SandboxError):
            click.echo(f"sandbox: {_safe(exc.message)}", err=True)
            sys.exit(exc.exit_code)
        path = _crash_log(exc)
        click.echo(f"sandbox: unexpected error: {type(exc).__name__}: {_safe(str(exc))} (details in {path})", err=True)
        sys.exit(3)
    sys.exit(rv if isinstance(rv, int) else 0)
