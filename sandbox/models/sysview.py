"""The system view's cache (``<data dir>/system-view.json``, see :mod:`sandbox.confine.sysview`)."""

# No ``from __future__ import annotations`` here: pydantic would evaluate every field's annotation
# from its string (a compile each) when the class is made; as objects they cost nothing more
# (measured: ~20M instructions, ~4 ms of every process that imports this module). A name used
# before its class exists is quoted.

from pydantic import Field

from sandbox.models.base import FORMAT_VERSION, Model


class SystemViewCache(Model):
    """What a walk of the system directories found, kept so that a start only ``lstat``s directories.

    Written and read by :mod:`sandbox.confine.sysview` with the standard library (``sandbox exec``'s fast
    path); this model is its schema (a test validates what that module writes against it). Rows are
    arrays, not objects: the file is read at every confined start (~330 directories here).
    """

    version: int = FORMAT_VERSION
    roots: list[str] = Field(description="The system directories walked whole (where each leads).")
    skip: list[str] = Field(description="Directories not walked: hidden whole inside anyway.")
    walked_ns: int = Field(
        description="When the full walk was made (ns since the epoch); older than ten minutes: walked afresh."
    )
    dirs: list[tuple[str, int, int, int, int]] = Field(
        description="Each directory listed, '/' first: path, device, inode, ctime (ns), number of entries."
    )
    racy: list[str] = Field(
        description="Directories changed shortly before they were listed: listed again at each start."
    )
    private: list[tuple[str, str, int, int, int, int, int, int]] = Field(
        description="Each entry others cannot read: path (where a link leads), the directory it was found in, device, "
        "inode, mode, owner, group, ctime (ns)."
    )
