"""Which ledger events this clone wrote: a MAC under a key only this clone holds.

A run's ledger travels (``sandbox push``/``fetch``, a plain ``git fetch`` of its refs, a push into this
repository, a copied ``.git``), and whoever shares a remote can write any event into it, the clone
id of the victim's events included (they are in every pushed event). So "own" is decided positively:
every event this clone appends carries, on the second line of its commit message, an HMAC-SHA256
under this clone's key over the ledger's run id and the event's exact JSON (its id, kind and run
id among it). Copied to another run, the run id differs; into another clone, the key does; stripped
or edited, it does not verify. What does not verify is foreign, however it arrived: it is shown,
never obeyed (see the README's "Runs that travel").

The key (``<common>/sandbox/clone-key``, mode 0600) is made on first need, once, under a lock; it
is never pushed (it is no ref) and hidden inside every sandbox (``<common>/sandbox`` is). It is bound
to the repository directory it was made in (device and inode): a ``.git`` copied from elsewhere
brings a key that is not this clone's, and a new one is made (everything before is foreign here).

Migration: the runs recorded before keys existed carry no MAC. When the key is first made, the
events this clone had written by then (those naming this clone's id, after the tip the last
``sandbox fetch`` of the run installed) are listed once in the run's directory (``adopted.json``,
MAC'd), and count as this clone's from then on; the caller says so in one line.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from sandbox.store import layout
from sandbox.store.locks import file_lock

#: In ``<common>/sandbox``: this clone's provenance key (see the module docstring).
KEY_FILE = "clone-key"
#: In a run's directory: the events this clone wrote before keys existed (see the module docstring).
ADOPTED_FILE = "adopted.json"
#: On the second line of an event commit's message: ``mac <hex>``.
MAC_PREFIX = "mac "
_DOMAIN = b"sandbox-event-mac/1\0"
_ADOPT_DOMAIN = b"sandbox-adopted/1\0"
#: The fold caches of a run, derived with the ownership of the key they were folded under.
_CACHES = ("ledger-cache.json", "verified")


@dataclass(frozen=True)
class Key:
    """This clone's provenance key."""

    secret: bytes

    def mac(self, run_id: str, body: str) -> str:
        """The MAC of an event of run ``run_id`` whose JSON (as stored) is ``body``."""
        data = _DOMAIN + run_id.encode() + b"\0" + body.encode()
        return hmac.new(self.secret, data, hashlib.sha256).hexdigest()

    def verify(self, run_id: str, body: str, mac: str | None) -> bool:
        """True when ``mac`` is this clone's MAC of the event (:meth:`mac`)."""
        return mac is not None and hmac.compare_digest(self.mac(run_id, body), mac)

    def adopted_mac(self, run_id: str, oids: Iterable[str]) -> str:
        """The MAC of a run's list of adopted events (sorted, so the order in the file does not matter)."""
        data = _ADOPT_DOMAIN + run_id.encode() + b"\0" + ",".join(sorted(oids)).encode()
        return hmac.new(self.secret, data, hashlib.sha256).hexdigest()


def key_file(common_dir: str) -> str:
    """``<common>/sandbox/clone-key``."""
    return os.path.join(layout.state_dir(common_dir), KEY_FILE)


def message_mac(head: str) -> str | None:
    """The MAC an event commit's first paragraph carries (None: none)."""
    _first, _, rest = head.partition("\n")
    for line in rest.splitlines():
        if line.startswith(MAC_PREFIX):
            return line[len(MAC_PREFIX) :].strip()
    return None


def _bound(common_dir: str) -> tuple[int, int]:
    st = os.stat(common_dir)
    return st.st_dev, st.st_ino


def _read_key(common_dir: str) -> Key | None | Literal[False]:
    """The key on disk: a Key, None when there is none, False when it is not this directory's."""
    try:
        with open(key_file(common_dir), encoding="ascii") as fh:
            data = json.loads(fh.read())
        secret = bytes.fromhex(str(data["key"]))
        where = (int(data["dev"]), int(data["ino"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        return False  # unreadable: not a key this clone can trust
    if len(secret) < 32 or where != _bound(common_dir):
        return False
    return Key(secret)


@dataclass
class Made:
    """What :func:`ensure` did when it had to make the key (None from it otherwise)."""

    #: Runs whose earlier events were adopted (see the module docstring), with how many events each.
    adopted: dict[str, int]
    #: True when a key was there but not this directory's (a copied ``.git``): it was replaced.
    replaced: bool = False


_KEYS: dict[str, tuple[tuple[int, int, int], Key]] = {}


def load(common_dir: str) -> Key | None:
    """This clone's key when it exists and is this directory's (read once per process and file)."""
    path = key_file(common_dir)
    try:
        st = os.stat(path)
    except OSError:
        return None
    stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
    found = _KEYS.get(path)
    if found is not None and found[0] == stamp:
        return found[1]
    key = _read_key(common_dir)
    if not isinstance(key, Key):
        return None
    _KEYS[path] = (stamp, key)
    return key


def ensure(common_dir: str, ledger_tips: Callable[[], dict[str, str]]) -> tuple[Key, Made | None]:
    """This clone's key, made now when missing (once, under a lock), and what making it did.

    ``ledger_tips``: every run's ledger tip in this repository (run id -> commit), asked only when the
    key is made, for the migration (:func:`adopt`) that making the first key does.
    """
    key = load(common_dir)
    if key is not None:
        return key, None
    state = layout.state_dir(common_dir)
    os.makedirs(state, exist_ok=True)
    with file_lock(os.path.join(layout.locks_dir(common_dir), "clone-key.lock"), "The provenance key"):
        found = _read_key(common_dir)
        if isinstance(found, Key):
            return found, None
        key = Key(os.urandom(32))
        dev, ino = _bound(common_dir)
        made = Made(adopted={}, replaced=found is False)
        tips = ledger_tips()
        if found is None:  # the first key: what this clone wrote before is adopted with it
            made.adopted = adopt(common_dir, key, tips)
        else:
            for run_id in tips:
                forget_caches(common_dir, run_id)
        tmp = os.path.join(state, f".{KEY_FILE}.{uuid.uuid4().hex}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(json.dumps({"version": 1, "key": key.secret.hex(), "dev": dev, "ino": ino}) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, key_file(common_dir))  # under the lock: one maker at a time
        return key, made


def forget_caches(common_dir: str, run_id: str) -> None:
    """Remove a run's fold caches (folded under another key's idea of what is this clone's)."""
    for name in _CACHES:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(layout.run_dir(common_dir, run_id), name))


def adopt(common_dir: str, key: Key, ledger_tips: dict[str, str]) -> dict[str, int]:
    """List, for each run, the events this clone wrote before keys existed; {run: how many}.

    Such an event lies at or before the tip this clone last acknowledged for the run (written after
    each of its own appends, local, never fetched: a run that arrived by plain git has none, and events
    that arrived after it are not adopted), after the tip the run's last ``sandbox fetch`` installed
    (none, when its record does not read back: the cautious reading), and names this clone's id or
    none (written before clones had ids, as the fold took them then).
    """
    from sandbox.store import integrity

    clone = layout.clone_id(common_dir)
    out: dict[str, int] = {}
    for run_id in ledger_tips:
        forget_caches(common_dir, run_id)
        ack = integrity.read_ack(layout.run_dir(common_dir, run_id))
        fetched = _fetched_tip(common_dir, run_id)
        if ack is None or ack.run_id != run_id or fetched is False:
            continue
        oids = [oid for oid, named, _signed in _chain(common_dir, ack.tip, fetched) if named in (None, clone)]
        if oids:
            _write_adopted(common_dir, run_id, key, oids)
            out[run_id] = len(oids)
    return out


def adopt_run(common_dir: str, key: Key, run_id: str, tip: str) -> int:
    """Count every event of the run up to ``tip`` as this clone's (the user said so: ``sandbox adopt``);
    how many did not count before (signed here, or adopted already)."""
    before = adopted(common_dir, run_id, key)
    new = {oid for oid, _named, signed in _chain(common_dir, tip, None, key, run_id) if not signed} - before
    _write_adopted(common_dir, run_id, key, sorted(before | new))
    forget_caches(common_dir, run_id)
    return len(new)


def _chain(
    common_dir: str, tip: str, stop: str | None, key: Key | None = None, run_id: str = ""
) -> list[tuple[str, object, bool]]:
    """The ledger's events from ``tip`` back to (excluding) ``stop``: (commit id, the clone it names,
    whether ``key`` signed it for ``run_id``)."""
    import pygit2

    from sandbox.store import objects

    repo = pygit2.Repository(common_dir)
    out: list[tuple[str, object, bool]] = []
    oid: str | None = tip
    while oid is not None and oid != stop:
        try:
            info = objects.read_commit(repo, oid)
        except (KeyError, ValueError, pygit2.GitError):
            break
        head, _, body = info.message.partition("\n\n")
        try:
            named = json.loads(body).get("clone")
        except (ValueError, AttributeError):
            named = "?"
        out.append((oid, named, key is not None and key.verify(run_id, body, message_mac(head))))
        oid = None if head.startswith("sandbox-event-root") or not info.parents else info.parents[0]
    return out


def _write_adopted(common_dir: str, run_id: str, key: Key, oids: list[str]) -> None:
    from sandbox.store.fsutil import write_json_file

    path = os.path.join(layout.run_dir(common_dir, run_id), ADOPTED_FILE)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_json_file(path, json.dumps({"version": 1, "oids": oids, "mac": key.adopted_mac(run_id, oids)}) + "\n")


def _fetched_tip(common_dir: str, run_id: str) -> str | None | Literal[False]:
    """The tip the run's last fetch installed; None when never fetched; False when its record is unreadable."""
    path = layout.fetched_file(common_dir, run_id)
    if not os.path.lexists(path):
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            tip = json.loads(fh.read())["tip"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return tip if isinstance(tip, str) else False


def adopted_id(common_dir: str, run_id: str) -> str:
    """The MAC of the run's adopted list as it is on disk ("": none or unreadable): what a fold
    counted with, compared to tell a fold made before ``sandbox adopt`` from one made after."""
    try:
        with open(os.path.join(layout.run_dir(common_dir, run_id), ADOPTED_FILE), encoding="ascii") as fh:
            mac = json.loads(fh.read()).get("mac")
    except (OSError, ValueError, AttributeError):
        return ""
    return mac if isinstance(mac, str) else ""


def adopted(common_dir: str, run_id: str, key: Key) -> frozenset[str]:
    """The run's events adopted by the migration (:func:`adopt`), when their list verifies."""
    path = os.path.join(layout.run_dir(common_dir, run_id), ADOPTED_FILE)
    try:
        with open(path, encoding="ascii") as fh:
            data = json.loads(fh.read())
        oids = [str(o) for o in data["oids"]]
        mac = str(data["mac"])
    except (OSError, ValueError, KeyError, TypeError):
        return frozenset()
    return frozenset(oids) if hmac.compare_digest(key.adopted_mac(run_id, oids), mac) else frozenset()


def notice(made: Made) -> str | None:
    """The one line to show after :func:`ensure` made the key, or None."""
    if made.replaced:
        return (
            "This repository's provenance key was made elsewhere (a copied .git?); a new one was made, and "
            "every run recorded before counts as another clone's here (shown, never obeyed)."
        )
    if made.adopted:
        runs, events = len(made.adopted), sum(made.adopted.values())
        return (
            f"Marked {events} event(s) of {runs} run(s) recorded here before this version as this clone's own "
            "(from now on only events signed with this clone's key are)."
        )
    return None
