"""The decisions a paused run is resumed with, as the queue keeps them: JSON text that
``Cluster.resume`` writes and the node that takes the run up reads."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..tools import Approve, Deny

__all__ = ["decode_decisions", "encode_decisions"]


def encode_decisions(decisions: Mapping[str, Approve | Deny]) -> str:
    """The decisions (checked already: Approve or Deny, by call id) as JSON text.

    Raises:
        TypeError: an edited input holds a value that is not JSON.
    """
    coded: dict[str, dict[str, Any]] = {}
    for call_id, decision in decisions.items():
        if isinstance(decision, Approve):
            input = None if decision.input is None else dict(decision.input)
            coded[call_id] = {"approve": True, "input": input, "by": decision.by}
        else:
            coded[call_id] = {"approve": False, "reason": decision.reason, "by": decision.by}
    try:
        return json.dumps(coded, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"an edited input must hold JSON values only: {exc}") from None


def decode_decisions(text: str) -> dict[str, Approve | Deny]:
    """The decisions ``encode_decisions`` wrote."""
    decisions: dict[str, Approve | Deny] = {}
    for call_id, coded in json.loads(text).items():
        if coded["approve"]:
            decisions[call_id] = Approve(coded["input"], by=coded["by"])
        else:
            decisions[call_id] = Deny(coded["reason"], by=coded["by"])
    return decisions
