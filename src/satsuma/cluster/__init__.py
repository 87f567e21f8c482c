"""Agents shared by processes and machines, on PostgreSQL: ``Node`` runs the queued runs
of the agent classes it serves, ``Cluster`` submits runs, waits for their results and
streams their events.

Needs the extra ``satsuma[postgres]`` (psycopg), loaded when a store is made.
"""

from .._public import public_names as _public_names
from ..store import QueuedRun as QueuedRun
from ..store import QueuedRunStatus as QueuedRunStatus
from ._client import Cluster as Cluster
from ._events import ClusterEvent as ClusterEvent
from ._events import EventsDropped as EventsDropped
from ._events import EventStream as EventStream
from ._events import RunResumed as RunResumed
from ._node import Node as Node
from ._recording import EventLog as EventLog

__all__ = [
    "Cluster",
    "ClusterEvent",
    "EventLog",
    "EventStream",
    "EventsDropped",
    "Node",
    "QueuedRun",
    "QueuedRunStatus",
    "RunResumed",
]

# Each exported name carries its public path (tracebacks, reprs, pickles).
_public_names(__name__, globals())
