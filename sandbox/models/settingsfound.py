"""Where a run's recorded tree holds agent settings (``<run dir>/settings-found.json``, see
:mod:`sandbox.confine.settingstree`)."""

# No ``from __future__ import annotations`` here: pydantic would evaluate every field's annotation
# from its string (a compile each) when the class is made; as objects they cost nothing more
# (measured: ~20M instructions, ~4 ms of every process that imports this module). A name used
# before its class exists is quoted.

from pydantic import Field

from sandbox.models.base import FORMAT_VERSION, Model, new_list


class SettingsFound(Model):
    """The paths of one git tree whose name is an agent's project settings (``.claude``, ``.mcp.json``,
    ...: :data:`sandbox.confine.foreign.AGENT_SETTINGS`), kept so that a launch on a run from elsewhere
    reads them instead of searching the tree again; a newer tree of the run is searched from this one
    (only the subtrees that differ)."""

    version: int = FORMAT_VERSION
    tree: str = Field(description="The tree searched (the run's head's, when it was searched).")
    paths: list[str] = Field(
        default_factory=new_list,
        description="Each path of the tree so named, relative to its root, sorted; nothing inside one is listed.",
    )
