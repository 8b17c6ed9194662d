"""What the ``sandbox mcp`` tools do, without the protocol: one :class:`Workspace` per server.

The Model Context Protocol glue (:mod:`sandbox.mcp.server`) only turns these methods into tools;
everything a tool does to a run happens here, through the library, so it can be tested and
benchmarked without the SDK. A :class:`Workspace` is the server's state
(:class:`~sandbox.mcp.state.WorkspaceState`) with one mixin per tool group:

* runs (:mod:`sandbox.mcp.runs`): ``start_run`` makes a run, ``open_run``, ``list_runs``;
* files (:mod:`sandbox.mcp.files`): ``read_file``; ``write_file`` and ``edit_file``, one recorded
  call each;
* finding (:mod:`sandbox.mcp.find`): ``list_files`` and ``search``;
* commands (:mod:`sandbox.mcp.commands`): ``run_command``, one recorded call, confined as
  ``sandbox exec`` confines a command;
* review (:mod:`sandbox.mcp.review`): ``show_log``, ``show_diff``, ``checkpoint``, ``resume_report``.

Reading tools (``read_file``, ``list_files``, ``search``, ``show_log``, ``show_diff``,
``list_runs``) change nothing and are not recorded. Inside the sandbox of ``sandbox run`` (an
agent's server, Codex's), where the run's ledger is read-only, the same calls are recorded by the
repository's host instead (:mod:`sandbox.mcp.hosted`), and commands run in that sandbox. Rewind and
the stored conversations are :mod:`sandbox.mcp.recovery_tools`.
"""

from __future__ import annotations

from sandbox.mcp.commands import CommandTools
from sandbox.mcp.files import FileTools
from sandbox.mcp.find import FindTools
from sandbox.mcp.review import ReviewTools
from sandbox.mcp.runs import RunTools


class Workspace(RunTools, FileTools, FindTools, CommandTools, ReviewTools):
    """The state of one MCP server and every tool it serves (see the module docstring).

    Tool methods are serialized (one ``threading.Lock``): a run's recorder, pygit2 objects and
    the worktree are used by one call at a time, as the agents' own tools use them.
    """
