"""Durable state: conversations (and their summaries), run records and the tool-call journal, and what is kept
of them for how long (``Store.prune``)."""

import importlib as _importlib
import typing as _typing

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
from ._summaries import Summary as Summary

# isort: split
# For satsuma's own rooms, not for users (not in DESIGN.md, so not in __all__): an agent
# takes its lease for DEFAULT_LEASE_SECONDS (satsuma.agents) and charges its budgets on
# the store's ledgers (ledgers_of, Charge, Hold, Shortfall, Balance); the cluster keeps its queue,
# its runs' events and its nodes in a PostgresStore's database, and listens on the
# store's connections (satsuma.cluster, `satsuma cluster status`). QueuedRun and
# QueuedRunStatus are public as satsuma.cluster's. run_queue: the queue's functions, each
# one transaction of the store's (run_queue.enqueue(store, ...)); take_back_claim undoes
# a node's claim of a paused run that ran nothing (_take_back), release_claim an agent's
# own (_unclaim). The cluster's modules
# load on first use (PEP 562): an agent that never meets a cluster does not import them.
# The console reads many runs a page at a time (_browse's names, satsuma.serve). An agent
# writes what goes together of one step of its loop at once (Step, RunEnd, write_step),
# and reads what it opens with at once (load_agent, Loaded), or opens with what a
# cluster's node took with its run's claim (Taken).
from ._browse import ConversationSummary as ConversationSummary
from ._browse import MessagePage as MessagePage
from ._browse import UsageTotal as UsageTotal
from ._browse import conversation_page as conversation_page
from ._browse import latest_runs as latest_runs
from ._browse import message_page as message_page
from ._browse import page_runs as page_runs
from ._browse import recent_decisions as recent_decisions
from ._browse import usage_total as usage_total
from ._lease import DEFAULT_LEASE_SECONDS as DEFAULT_LEASE_SECONDS
from ._ledger import Balance as Balance
from ._ledger import Charge as Charge
from ._ledger import Hold as Hold
from ._ledger import Shortfall as Shortfall
from ._ledger import ledgers_of as ledgers_of
from ._link import Link as Link
from ._link import Ticket as Ticket
from ._link import run_abandonable as run_abandonable
from ._load_agent import Loaded as Loaded
from ._load_agent import load_agent as load_agent
from ._opening import Taken as Taken
from ._step import RunEnd as RunEnd
from ._step import Step as Step
from ._unclaim import release_claim as release_claim
from ._write_step import write_step as write_step

if _typing.TYPE_CHECKING:
    from . import _queue
    from ._claim_take import ClaimTaken as ClaimTaken
    from ._claim_take import claim_and_take as claim_and_take
    from ._claim_take import undo_lost_claim as undo_lost_claim
    from ._postgres_retention import expire_queue as expire_queue
    from ._queue import QueuedRun as QueuedRun
    from ._queue import QueuedRunStatus as QueuedRunStatus
    from ._run_events import KIND_CHATTER as KIND_CHATTER
    from ._run_events import KIND_DELTA as KIND_DELTA
    from ._run_events import KIND_OTHER as KIND_OTHER
    from ._run_events import Entry as Entry
    from ._run_events import Stored as Stored
    from ._run_events import append_events as append_events
    from ._run_events import channel_for as channel_for
    from ._run_events import purge_ended as purge_ended
    from ._run_events import read_events as read_events
    from ._run_events import watch_run as watch_run
    from ._status import QUEUE_STATUSES as QUEUE_STATUSES
    from ._status import ClusterStatus as ClusterStatus
    from ._status import cluster_status as cluster_status
    from ._take_back import take_back_claim as take_back_claim

    run_queue = _queue

# Each name of the cluster's, and the module that holds it ("" for the module itself).
_FOR_THE_CLUSTER: _typing.Final = {
    "run_queue": ("_queue", ""),
    "QueuedRun": ("_queue", "QueuedRun"),
    "QueuedRunStatus": ("_queue", "QueuedRunStatus"),
    "expire_queue": ("_postgres_retention", "expire_queue"),
    "ClaimTaken": ("_claim_take", "ClaimTaken"),
    "claim_and_take": ("_claim_take", "claim_and_take"),
    "undo_lost_claim": ("_claim_take", "undo_lost_claim"),
    **{
        name: ("_run_events", name)
        for name in (
            "KIND_CHATTER",
            "KIND_DELTA",
            "KIND_OTHER",
            "Entry",
            "Stored",
            "append_events",
            "channel_for",
            "purge_ended",
            "read_events",
            "watch_run",
        )
    },
    **{name: ("_status", name) for name in ("QUEUE_STATUSES", "ClusterStatus", "cluster_status")},
    "take_back_claim": ("_take_back", "take_back_claim"),
}


def __getattr__(name: str) -> _typing.Any:
    try:
        module, attribute = _FOR_THE_CLUSTER[name]
    except KeyError:
        raise AttributeError(f"module 'satsuma.store' has no attribute {name!r}") from None
    loaded = _importlib.import_module(f"satsuma.store.{module}")
    value = getattr(loaded, attribute) if attribute else loaded
    globals()[name] = value
    return value


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
    "Summary",
]

# Each exported name carries its public path (tracebacks, reprs, pickles).
_public_names(__name__, globals())
