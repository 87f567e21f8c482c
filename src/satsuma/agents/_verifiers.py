"""Verifiers: checks run when the model ends its turn, able to send it back to work."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeAlias

import attrs

from .._messages import Message
from .._text import MESSAGE_LIMIT, describe_exception, type_name, valid_text

__all__ = ["Verdict", "Verifier", "VerifyContext"]


@attrs.frozen
class Verdict:
    """What a verifier decided: build it with ``Verdict.ok()`` or ``Verdict.retry(reason)``."""

    passed: bool
    reason: str | None = None

    @classmethod
    def ok(cls) -> Verdict:
        """The work is acceptable: the run may complete."""
        return cls(True)

    @classmethod
    def retry(cls, reason: str) -> Verdict:
        """Send the model back to work; it reads ``Verification failed: <reason>``."""
        return cls(False, reason)


@attrs.frozen(kw_only=True)
class VerifyContext:
    """What a verifier is given.

    Attributes:
        agent: The agent's name.
        run_id: The run's id.
        output: The final assistant text of this turn; for an agent with an
            output_type, the typed answer (see docs/output.md).
        messages: The whole conversation so far.
        iteration: The number of model calls made so far in this run.
        working_dir: The tools' working directory.
        extra: The rest of the tools' context mapping.
    """

    agent: str
    run_id: str
    output: Any
    messages: tuple[Message, ...]
    iteration: int
    working_dir: Path
    extra: Mapping[str, Any]


class Verifier:
    """Base class for verifiers: override ``verify`` (sync or async).

    A plain function taking a VerifyContext and returning a Verdict works as well.
    """

    def verify(self, ctx: VerifyContext) -> Verdict | Awaitable[Verdict]:
        raise NotImplementedError


VerifierLike: TypeAlias = "Verifier | type[Verifier] | Callable[[VerifyContext], Any]"


def verification_text(reason: str) -> str:
    return f"Verification failed: {reason}\n\nPlease fix the issues and try again."


def as_check(verifier: object) -> Callable[[VerifyContext], Any] | None:
    """The callable behind a verifier declaration, or None if it is not one."""
    if isinstance(verifier, type) and issubclass(verifier, Verifier):
        return verifier().verify
    if isinstance(verifier, Verifier):
        return verifier.verify
    if callable(verifier):
        return verifier
    return None


async def run_verifier(check: Callable[[VerifyContext], Any], ctx: VerifyContext) -> str | None:
    """None when the verifier passes, else the reason to send the model back.

    A verifier that raises (or returns something that is not a Verdict) counts as a
    retry with ``Verifier crashed: ...``.
    """
    try:
        verdict = check(ctx)
        if inspect.isawaitable(verdict):
            verdict = await verdict
    except Exception as exc:
        return f"Verifier crashed: {describe_exception(exc, limit=MESSAGE_LIMIT)}"
    if not isinstance(verdict, Verdict):
        return f"Verifier crashed: returned {type(verdict).__name__}, not a Verdict"
    if verdict.passed:
        return None
    reason = verdict.reason
    if reason is None:
        return "no reason given"
    if not issubclass(type(reason), str):
        return f"Verifier crashed: its reason is a {type_name(reason)}, not a str"
    # The model reads it and the history keeps it: an exact str (read from its storage,
    # never through a subclass's methods) of valid Unicode.
    return valid_text(reason if type(reason) is str else str.__str__(reason)) or "no reason given"
