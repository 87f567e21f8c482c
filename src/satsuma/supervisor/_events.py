"""Events a supervisor reports, on the same machinery as agents' (attrs classes that
``satsuma.event_to_json`` serialises)."""

from __future__ import annotations

from typing import Literal, TypeAlias

import attrs

__all__ = [
    "ChildCrashed",
    "ChildExited",
    "ChildRestarted",
    "ChildStarted",
    "SupervisorEvent",
    "SupervisorGaveUp",
]


@attrs.frozen(kw_only=True)
class _ChildEvent:
    supervisor: str
    child_id: str


@attrs.frozen(kw_only=True)
class ChildStarted(_ChildEvent):
    """A child is running (``incarnation`` counts its starts from 1)."""

    incarnation: int


@attrs.frozen(kw_only=True)
class ChildExited(_ChildEvent):
    """A child ended without crashing: it returned (``normal``) or was stopped
    (``shutdown``)."""

    reason: Literal["normal", "shutdown"]


@attrs.frozen(kw_only=True)
class ChildCrashed(_ChildEvent):
    """A child raised; ``error`` is ``Type: message`` and ``traceback`` the full text."""

    error: str
    traceback: str


@attrs.frozen(kw_only=True)
class ChildRestarted(_ChildEvent):
    """A child was started again, after ``delay`` seconds of backoff; ``restarts`` counts
    the restarts within the supervisor's intensity window."""

    restarts: int
    delay: float


@attrs.frozen(kw_only=True)
class SupervisorGaveUp(_ChildEvent):
    """Too many restarts (or a child that could not start): the supervisor stops all its
    children and fails; ``child_id`` is the child that went over the limit."""

    reason: str


SupervisorEvent: TypeAlias = (
    ChildStarted | ChildExited | ChildCrashed | ChildRestarted | SupervisorGaveUp
)
