"""The click group whose commands are imported only when used, and the options every command shares
(``-C DIR``, ``--json``)."""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Sequence
from typing import Any

import click

from sandbox.cli.edge import refused


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
            ctx.exit(refused(exc))
            ctx.exit(exc.exit_code)


def _first_sentence(help_text: str) -> str:
    """The first sentence of a command's help (its first paragraph, up to a full stop), whole."""
    paragraph = " ".join(inspect.cleandoc(help_text).split("\n\n", 1)[0].split())
    end = paragraph.find(". ")
    return paragraph[: end + 1] if end >= 0 else paragraph


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
