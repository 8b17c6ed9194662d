"""The records that keep derived state honest (:mod:`sandbox.store.integrity`): the sealed fold
cache and the acknowledged tip.
"""

# No ``from __future__ import annotations`` here: pydantic would evaluate every field's annotation
# from its string (a compile each) when the class is made; as objects they cost nothing more
# (measured: ~20M instructions, ~4 ms of every process that imports this module). A name used
# before its class exists is quoted.

from sandbox.models.base import FORMAT_VERSION, Model


class LedgerCacheFile(Model):
    """The on-disk fold cache: the fold's JSON and a MAC over exactly those bytes.

    The MAC is an HMAC-SHA256 keyed by a random key that lives only in the ledger (a blob in every
    event commit's tree), so a cache edited by hand or by an agent no longer verifies and is
    rebuilt from the ledger instead of being trusted.
    """

    version: int = FORMAT_VERSION
    mac: str
    state: str
    #: The run's adopted list (``sandbox adopt``) the fold counted with, by its MAC ("": none). A fold
    #: made before the list changed counts adopted events as foreign: stale, refolded, never trusted.
    adopted: str = ""


class AckedTip(Model):
    """The ledger tip a run last acknowledged, kept in the run's directory beside the ref.

    Written after every append (under the run's lock, after the ref moved), so a ledger ref that was
    deleted, rewound or rewritten behind the sandbox's back is detected and can be restored.
    """

    version: int = FORMAT_VERSION
    run_id: str
    tip: str
    count: int
