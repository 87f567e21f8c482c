"""Agents shared by processes and machines, on PostgreSQL: ``Node`` runs the queued runs
of the agent classes it serves, ``Cluster`` submits runs and waits for their results.

Needs the extra ``satsuma[postgres]`` (psycopg), loaded when a store is made.
"""

from ..store._queue import QueuedRun as QueuedRun
from ..store._queue import QueuedRunStatus as QueuedRunStatus
from ._client import Cluster as Cluster
from ._node import Node as Node

__all__ = ["Cluster", "Node", "QueuedRun", "QueuedRunStatus"]
