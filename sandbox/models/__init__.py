"""Every persisted format of the sandbox, as versioned pydantic models, one module per format.

These models are the only things written to disk or into git objects. Each carries a ``version``
field; readers reject versions they do not know instead of guessing. ``sandbox schema`` prints their
JSON Schema (:data:`PERSISTED`). This package names them all, so ``from sandbox.models import X``
does not depend on which module holds ``X``:

- :mod:`~sandbox.models.base`: the format version, the base classes, the JSON codec;
- :mod:`~sandbox.models.event`: the ledger event and what it names (a call, a run, file changes);
- :mod:`~sandbox.models.mergeback`: the merge-back payloads (what was written at each user path);
- :mod:`~sandbox.models.payloads`: the payloads of the other events the fold keeps;
- :mod:`~sandbox.models.ledgerstate`: the fold of a ledger as cached (how it folds: :mod:`sandbox.run.fold`);
- :mod:`~sandbox.models.journal`, :mod:`~sandbox.models.applyreport`: an apply's journal and report;
- :mod:`~sandbox.models.checkpoint`, :mod:`~sandbox.models.resume`: checkpoints and the resume report;
- :mod:`~sandbox.models.integrity`, :mod:`~sandbox.models.host`, :mod:`~sandbox.models.fetched`,
  :mod:`~sandbox.models.transcript`: the fold cache and acked tip, the host, a fetch, a transcript;
- :mod:`~sandbox.models.sysview`: the system view's cache (what root does not see inside);
- :mod:`~sandbox.models.settingsfound`: where a run's recorded tree holds agent settings.
"""

from pydantic import BaseModel

from sandbox.models.applyreport import ApplyReport, ConflictReport, UndoReport
from sandbox.models.base import FORMAT_VERSION, Model, Payload, from_json, new_dict, new_list, new_set, to_json, utcnow
from sandbox.models.checkpoint import Budget, BudgetLine, Checkpoint, FileSnapshot, LedgerSnapshot
from sandbox.models.event import (
    Approval,
    CallSpec,
    CallStatus,
    Event,
    EventKind,
    FileChange,
    Idempotency,
    ProcessScope,
    ReplayPolicy,
    RunInfo,
)
from sandbox.models.fetched import FetchedFrom
from sandbox.models.host import HostInfo
from sandbox.models.integrity import AckedTip, LedgerCacheFile
from sandbox.models.journal import ApplyJournal, JournalEntry
from sandbox.models.ledgerstate import FoldData, LedgerEntry, LedgerState, UndoItem
from sandbox.models.mergeback import (
    ApplyAction,
    HunkTaken,
    MergebackData,
    MoveTarget,
    PartialApply,
    PathMove,
    PathRecordData,
    PathRecordUpdate,
    UserPathRecord,
)
from sandbox.models.payloads import (
    CallFinishData,
    CheckpointLogged,
    CompensationLink,
    DriftPath,
    DriftRecord,
    LoggedEvent,
    NetworkRefusal,
    NoteLogged,
    ResumedData,
    RollbackFilesData,
    RollbackSessionLogged,
)
from sandbox.models.resume import Denial, LiveProcess, ReplayDecision, ResumeReport, UncertainCall
from sandbox.models.settingsfound import SettingsFound
from sandbox.models.sysview import SystemViewCache
from sandbox.models.transcript import TranscriptIndex

__all__ = [
    "FORMAT_VERSION",
    "PERSISTED",
    "AckedTip",
    "ApplyAction",
    "ApplyJournal",
    "ApplyReport",
    "Approval",
    "Budget",
    "BudgetLine",
    "CallFinishData",
    "CallSpec",
    "CallStatus",
    "Checkpoint",
    "CheckpointLogged",
    "CompensationLink",
    "ConflictReport",
    "Denial",
    "DriftPath",
    "DriftRecord",
    "Event",
    "EventKind",
    "FetchedFrom",
    "FileChange",
    "FileSnapshot",
    "FoldData",
    "HostInfo",
    "HunkTaken",
    "Idempotency",
    "JournalEntry",
    "LedgerCacheFile",
    "LedgerEntry",
    "LedgerSnapshot",
    "LedgerState",
    "LiveProcess",
    "LoggedEvent",
    "MergebackData",
    "Model",
    "MoveTarget",
    "NetworkRefusal",
    "NoteLogged",
    "PartialApply",
    "PathMove",
    "PathRecordData",
    "PathRecordUpdate",
    "Payload",
    "ProcessScope",
    "ReplayDecision",
    "ReplayPolicy",
    "ResumeReport",
    "ResumedData",
    "RollbackFilesData",
    "RollbackSessionLogged",
    "RunInfo",
    "SettingsFound",
    "SystemViewCache",
    "TranscriptIndex",
    "UncertainCall",
    "UndoItem",
    "UndoReport",
    "UserPathRecord",
    "from_json",
    "new_dict",
    "new_list",
    "new_set",
    "to_json",
    "utcnow",
]

#: Every model written to disk or into git objects (``sandbox schema`` prints them, in this order).
PERSISTED: list[type[BaseModel]] = [Event, LedgerEntry, LedgerState, RunInfo, CallSpec, FileChange, ProcessScope]
PERSISTED += [JournalEntry, ApplyJournal, ConflictReport, ApplyReport, UndoReport, HunkTaken, PartialApply]
PERSISTED += [Checkpoint, Budget, ResumeReport]
PERSISTED += [HostInfo]
PERSISTED += [LedgerCacheFile, AckedTip]
PERSISTED += [FetchedFrom]
PERSISTED += [TranscriptIndex]
PERSISTED += [SystemViewCache]
PERSISTED += [SettingsFound]
