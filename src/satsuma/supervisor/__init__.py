"""Supervision: OTP-style restart strategies for agents, supervisors and services."""

from .._public import public_names as _public_names
from ._children import ChildSpec as ChildSpec
from ._children import RestartType as RestartType
from ._events import ChildCrashed as ChildCrashed
from ._events import ChildExited as ChildExited
from ._events import ChildRestarted as ChildRestarted
from ._events import ChildStarted as ChildStarted
from ._events import SupervisorEvent as SupervisorEvent
from ._events import SupervisorGaveUp as SupervisorGaveUp
from ._restarts import Backoff as Backoff
from ._restarts import SupervisorStrategy as SupervisorStrategy
from ._supervisor import ChildInfo as ChildInfo
from ._supervisor import Supervisor as Supervisor

__all__ = [
    "Backoff",
    "ChildCrashed",
    "ChildExited",
    "ChildInfo",
    "ChildRestarted",
    "ChildSpec",
    "ChildStarted",
    "RestartType",
    "Supervisor",
    "SupervisorEvent",
    "SupervisorGaveUp",
    "SupervisorStrategy",
]

# Users import these names from satsuma: they carry that path (tracebacks, reprs, pickles).
_public_names("satsuma", globals())
