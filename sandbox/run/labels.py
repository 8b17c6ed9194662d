"""What a label may be: the name a person gives a run (``start --label``) or a checkpoint.

A label names a run on the command line (see :mod:`sandbox.run.names`) and is shown in every listing,
so it must be one line a terminal shows as it is. Standard library only, and imports nothing of the
run: the run, its checkpoints and ``fork`` all check here.
"""

from __future__ import annotations

import re

from sandbox import escape
from sandbox.errors import UsageError

#: The longest label of a run or a checkpoint.
MAX_LABEL = 200
#: A run label of this shape reads as a run id or its prefix (``c5a4``): it could shadow another run.
ID_SHAPED = re.compile(r"^[0-9a-f]+$")


def id_shaped(label: str) -> bool:
    """True when ``label`` could be read as a run id or a prefix of one (hex digits only)."""
    return bool(ID_SHAPED.match(label))


def check_label(label: str, what: str) -> str:
    """``label``, when it can name a ``what`` ("run", "checkpoint") on the command line and in every
    listing: one line of 1 to :data:`MAX_LABEL` characters, not blank, not starting with ``-`` (it
    would read as an option), no control characters, valid UTF-8. Else a :class:`UsageError`."""
    encodable = True
    try:
        label.encode("utf-8")
    except UnicodeEncodeError:
        encodable = False
    if (
        not encodable
        or not label.strip()
        or len(label) > MAX_LABEL
        or label.startswith("-")
        or escape.suspicious(label)
    ):
        raise UsageError(
            f"A {what} label must be one line of 1 to {MAX_LABEL} characters, not blank, not starting "
            f"with '-', without control, bidi or zero-width characters; {_shown(label)} is not."
        )
    if what == "run" and id_shaped(label):
        raise UsageError(
            f"A run label must not look like a run id: {_shown(label)} (only the digits 0-9 and letters a-f) could "
            "be read as another run's id; add a word or a dash."
        )
    return label


def _shown(text: str) -> str:
    """``text`` quoted for a message, cut short and with what a terminal would act on escaped."""
    cut = text if len(text) <= 60 else text[:57] + "..."
    return repr(cut).encode("ascii", "backslashreplace").decode("ascii")
