"""The verify phase of a run: the agent's verifiers, in order, on the answer the model
ended its turn with; the first reason to send the model back to work, if any."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._verifiers import VerifyContext, run_verifier

if TYPE_CHECKING:
    from ._runstate import Run

__all__ = ["verify"]


async def verify(run: Run, output: Any) -> str | None:
    ctx = run.ctx
    if not ctx.verifiers:
        return None
    verify_ctx = VerifyContext(
        agent=run.agent,
        run_id=run.run_id,
        output=output,
        messages=tuple(ctx.conversation.messages),
        iteration=run.iteration,
        working_dir=ctx.working_dir,
        extra=ctx.context_extra,
    )
    for check in ctx.verifiers:
        reason = await run_verifier(check, verify_ctx)
        if reason is not None:
            return reason
    return None
