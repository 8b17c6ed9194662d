"""Derived state is never trusted over the ledger, and a run cannot silently vanish.

Two guards, both cheap on the hot path:

* **The fold cache is authenticated.** ``ledger-cache.json`` (the fold of the ledger up to a tip)
  carries an HMAC-SHA256 of its exact bytes, keyed by 32 random bytes stored only in the ledger:
  the root event writes them as the blob ``fold-key`` and every later event commit's tree keeps
  that entry, so the key is found from the ledger ref's tip in one tree lookup. A cache edited by
  hand (or by an agent) that still parses and names the right tip fails the MAC; it is reported
  and rebuilt from the events. Rebuild-and-compare was measured and rejected for the hot path: it
  costs O(ledger) per command (see bench/cases/ledger.py), the MAC costs O(cache bytes) hashing.
  An agent that reads the key out of the ledger could forge a cache, but it could as well rewrite
  the ledger itself, which the second guard catches.

* **The acknowledged tip.** After every append (under the run's lock, after the ref moved) the run
  directory's ``ledger-tip`` records the tip the sandbox wrote. A reader reads that file *before*
  the ref, so a ref that is ahead of it (another writer, or a process killed between the two
  writes) is normal, while a ref that is missing (deleted), behind it (rewound) or on another chain
  (rewritten) is damage: every command refuses with :class:`LedgerDamagedError` naming
  ``sandbox repair RUN``, ``list`` shows the run as damaged, and ``gc`` leaves it alone unless
  ``--force``. The repair is explicit rather than automatic so that tampering is seen by the user,
  not papered over: it restores the acknowledged tip after checking that its whole chain reads.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os

import pygit2

from sandbox.errors import CorruptionError
from sandbox.models import AckedTip, LedgerCacheFile, from_json, to_json
from sandbox.store import layout, objects

#: Name of the MAC key's blob in every ledger event commit's tree.
KEY_NAME = "fold-key"
TIP_FILE = "ledger-tip"
CACHE_FILE = "ledger-cache.json"
#: Marker a drop writes before it deletes anything: what is left is garbage, not a vanished run.
DROPPING_FILE = "dropping"


class LedgerDamagedError(CorruptionError):
    """The run's ledger ref was deleted, rewound or rewritten behind the sandbox's back."""


# -- the fold cache's MAC -------------------------------------------------------------------------


def new_key() -> bytes:
    """A fresh MAC key for a new ledger."""
    return os.urandom(32)


def key_at(repo: pygit2.Repository, tip: str | None) -> bytes | None:
    """The MAC key stored in the tree of the event commit ``tip`` (None for ledgers without one)."""
    if tip is None:
        return None
    try:
        entry = objects.lookup(repo, objects.commit_tree(repo, tip), KEY_NAME)
        if entry is None or entry.is_tree:
            return None
        return objects.read_blob(repo, entry.oid)
    except (KeyError, ValueError, pygit2.GitError, objects.DamagedObjectError):
        return None


def _mac(key: bytes, text: str) -> str:
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).hexdigest()


def seal_cache(key: bytes, state_json: str, adopted: str = "") -> str:
    """The cache file's text for a fold serialised as ``state_json``, counted with the adopted list
    whose MAC is ``adopted``."""
    return to_json(LedgerCacheFile(mac=_mac(key, state_json), state=state_json, adopted=adopted))


def open_cache(key: bytes | None, text: str, adopted: str = "") -> tuple[str | None, bool]:
    """(the fold's JSON if the MAC verifies, whether a file that should verify did not).

    Any file that fails (edited, replaced, or cut short) is reported when the ledger has a key;
    a ledger written before keys existed cannot verify its cache, so its cache is never used. One
    folded with another adopted list than ``adopted`` (before a ``sandbox adopt``) is stale: not
    used, and not damaged either.
    """
    try:
        sealed = from_json(LedgerCacheFile, text)
    except ValueError:
        return None, key is not None
    if sealed.adopted != adopted:
        return None, False
    if key is None or not hmac.compare_digest(sealed.mac, _mac(key, sealed.state)):
        return None, key is not None
    return sealed.state, False


# -- the acknowledged tip -------------------------------------------------------------------------


def read_ack(run_dir: str) -> AckedTip | None:
    """The tip the run last acknowledged, or None (never written, or unreadable after a power cut)."""
    try:
        with open(os.path.join(run_dir, TIP_FILE), encoding="utf-8") as fh:
            return from_json(AckedTip, fh.read())
    except (OSError, ValueError):
        return None


#: The acknowledged tip is rewritten in place at this fixed size (one pwrite, no rename).
ACK_SIZE = 256


def write_ack(run_dir: str, run_id: str, tip: str, count: int) -> None:
    """Record ``tip`` as acknowledged.

    Rewritten in place at a fixed size (one ``pwrite``, no temp file or rename: measured ~1 ms per
    append for the atomic replace on a busy disk, ~20 us for this). Not synced and not atomic on
    purpose: a torn or lost write makes the file unreadable or older, which only weakens detection
    until the next append (the ref is then ahead of it, which is normal); it never reports damage.
    """
    text = to_json(AckedTip(run_id=run_id, tip=tip, count=count)).encode()
    with contextlib.suppress(OSError):
        fd = os.open(os.path.join(run_dir, TIP_FILE), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, text.ljust(ACK_SIZE), 0)
        finally:
            os.close(fd)


def forget_ack(run_dir: str) -> None:
    """Mark the run as being dropped and remove its acknowledged tip (before its ref is deleted)."""
    with contextlib.suppress(OSError), open(os.path.join(run_dir, DROPPING_FILE), "w", encoding="utf-8"):
        pass
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(run_dir, TIP_FILE))


def _first_parent(repo: pygit2.Repository, oid: str) -> str | None:
    info = objects.read_commit(repo, oid)
    head = info.message.partition("\n")[0]
    if head.startswith("sandbox-event-root") or not info.parents:
        return None
    return info.parents[0]


def _reaches(repo: pygit2.Repository, start: str, target: str) -> bool:
    """True when ``target`` is on the first-parent chain of ``start`` (walks until found or the root)."""
    oid: str | None = start
    seen = 0
    while oid is not None:
        if oid == target:
            return True
        oid = _first_parent(repo, oid)
        seen += 1
        if seen > 10_000_000:  # a cycle cannot happen in git; bound the loop anyway
            return False
    return False


def damage(repo: pygit2.Repository, run_id: str, ack: AckedTip | None, tip: str | None) -> str | None:
    """What is wrong with a ledger ref at ``tip`` given the acknowledged tip, or None when nothing is.

    Costs nothing when the ref equals the acknowledged tip, and the distance walked when it is ahead.
    """
    if ack is None or ack.run_id != run_id or ack.tip == tip:
        return None
    if tip is None:
        return "was deleted"
    try:
        if _reaches(repo, tip, ack.tip):
            return None  # the ref is ahead of the acknowledged tip: appends since, or a lost ack
    except (KeyError, ValueError, pygit2.GitError, objects.DamagedObjectError):
        return "points at an unreadable commit"
    try:
        if _reaches(repo, ack.tip, tip):
            return f"was rewound to an older event ({tip[:12]})"
    except (KeyError, ValueError, pygit2.GitError, objects.DamagedObjectError):
        pass
    return f"was rewritten to another history ({tip[:12]})"


def damaged_message(run_id: str, what: str, ack: AckedTip) -> str:
    """The one-line refusal for a damaged ledger ref."""
    return (
        f"The ledger of run {run_id} ({layout.ref_name(run_id, 'ledger')}) {what}; the run last recorded "
        f"{ack.tip[:12]} ({ack.count} events). Nothing was changed; run 'sandbox repair {run_id}' to restore it."
    )


def check(repo: pygit2.Repository, run_id: str, run_dir: str, tip: str | None) -> str | None:
    """Raise :class:`LedgerDamagedError` when the ledger ref is damaged; the ref's tip (re-read) if not.

    The acknowledged tip is read first and the ref re-read after it, so a concurrent append (ref
    first, then the file) is never mistaken for a rewind.
    """
    ack = read_ack(run_dir)
    if ack is None or ack.tip == tip:
        return tip
    tip = ref_tip(repo, run_id)
    what = damage(repo, run_id, ack, tip)
    if what is not None:
        raise LedgerDamagedError(damaged_message(run_id, what, ack))
    return tip


def ref_tip(repo: pygit2.Repository, run_id: str) -> str | None:
    """The ledger ref's target, or None when it is missing or unreadable."""
    try:
        ref = repo.references.get(layout.ref_name(run_id, "ledger"))
    except pygit2.GitError:
        return None
    return str(ref.target) if ref is not None else None


def vanished_run_ids(repo: pygit2.Repository, runs_dir: str) -> list[str]:
    """Runs whose ledger ref is missing although the run acknowledged a tip (deleted behind its back)."""
    out = []
    try:
        names = os.listdir(runs_dir)
    except OSError:
        return []
    for name in sorted(names):
        ack = read_ack(os.path.join(runs_dir, name))
        if ack is not None and ack.run_id == name and ref_tip(repo, name) is None:
            out.append(name)
    return out


def run_damage(repo: pygit2.Repository, run_id: str, run_dir: str) -> str | None:
    """What is wrong with the run's ledger ref (for ``list``), or None."""
    ack = read_ack(run_dir)
    return damage(repo, run_id, ack, ref_tip(repo, run_id))


def holds_work(repo: pygit2.Repository, run_id: str, run_dir: str) -> bool:
    """True when a run without a ledger ref may still hold recorded work that gc must not delete.

    An acknowledged tip, a head that moved past the base, or checkpoints are evidence of recorded
    work, unless a drop marked the run as being dropped. A start interrupted before its ledger was
    written has none of them and is collected.
    """
    if os.path.exists(os.path.join(run_dir, DROPPING_FILE)):
        return False
    if read_ack(run_dir) is not None:
        return True
    refs = repo.references

    def target(name: str) -> str | None:
        with contextlib.suppress(pygit2.GitError):
            ref = refs.get(layout.ref_name(run_id, name))
            return str(ref.target) if ref is not None else None
        return None

    head, base = target("head"), target("base")
    return target("checkpoints") is not None or (head is not None and head != base)
