"""Durable state: conversations, run records and the tool-call journal, and what is kept
of them for how long (``Store.prune``)."""

from .._exceptions import LeaseLost as LeaseLost
from .._exceptions import StoreClosed as StoreClosed
from .._exceptions import StoreError as StoreError
from .._exceptions import StoreUnavailable as StoreUnavailable
from .._exceptions import StoreUnreadable as StoreUnreadable
from .._public import public_names as _public_names
from ._base import Store as Store
from ._lease import Lease as Lease
from ._lease import Owner as Owner
from ._memory import MemoryStore as MemoryStore
from ._postgres import PostgresStore as PostgresStore
from ._records import ApprovalDecision as ApprovalDecision
from ._records import ApprovalRecord as ApprovalRecord
from ._records import ApprovalVerdict as ApprovalVerdict
from ._records import JournalEntry as JournalEntry
from ._records import PendingApproval as PendingApproval
from ._records import RunRecord as RunRecord
from ._records import RunRecordStatus as RunRecordStatus
from ._retention import PruneReport as PruneReport
from ._sqlite import SCHEMA_VERSION as SCHEMA_VERSION
from ._sqlite import SQLiteStore as SQLiteStore

__all__ = [
    "SCHEMA_VERSION",
    "ApprovalDecision",
    "ApprovalRecord",
    "ApprovalVerdict",
    "JournalEntry",
    "Lease",
    "LeaseLost",
    "MemoryStore",
    "Owner",
    "PendingApproval",
    "PostgresStore",
    "PruneReport",
    "RunRecord",
    "RunRecordStatus",
    "SQLiteStore",
    "Store",
    "StoreClosed",
    "StoreError",
    "StoreUnavailable",
    "StoreUnreadable",
]

# Each exported name carries its public path (tracebacks, reprs, pickles).
_public_names(__name__, globals())
