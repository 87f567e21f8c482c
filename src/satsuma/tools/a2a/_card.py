"""What an A2A agent card tells a client: where to send calls, and the tool it makes.

A card is read leniently (only ``name`` is required): the tool's description comes from
the card's description and skills, and calls go to its JSON-RPC interface (1.0:
``supportedInterfaces``; 0.3: ``url``), else to the URL the card was found under.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

CARD_PATH: Final = ".well-known/agent-card.json"
_NAME_INVALID: Final = re.compile(r"[^a-zA-Z0-9_-]")

INPUT_SCHEMA: Final[Mapping[str, Any]] = {
    "type": "object",
    "properties": {
        "message": {"type": "string", "description": "What to tell or ask the agent."},
        "context_id": {
            "type": "string",
            "description": "Continue an earlier conversation: the context_id an earlier "
            "answer gave. Leave it out to start a new one.",
        },
        "task_id": {
            "type": "string",
            "description": "Answer a task that asked for input: the task_id it gave.",
        },
    },
    "required": ["message"],
    "additionalProperties": False,
}


def tool_name(card: Mapping[str, Any]) -> str:
    """The card's name as a tool name (``[a-zA-Z0-9_-]{1,64}``)."""
    return (_NAME_INVALID.sub("_", str(card["name"])) or "a2a_agent")[:64]


def tool_description(card: Mapping[str, Any]) -> str:
    """What the model reads about the remote agent: the card's description and skills,
    and how to go on with a conversation."""
    description = str(card.get("description") or f"The remote agent {card['name']}.")
    skills = [
        f"- {skill.get('name') or skill.get('id')}: {skill.get('description') or ''}".rstrip(": ")
        for skill in card.get("skills") or []
        if isinstance(skill, dict)
    ]
    if skills:
        description += "\nSkills:\n" + "\n".join(skills)
    return description + (
        "\nA remote agent (A2A): send it a message. Its answer names a context_id; "
        "pass it back to go on with the same conversation."
    )


def endpoint(card: Mapping[str, Any], fallback: str) -> str:
    """The card's JSON-RPC endpoint (1.0: ``supportedInterfaces``; 0.3: ``url``)."""
    for interface in card.get("supportedInterfaces") or []:
        if (
            isinstance(interface, dict)
            and str(interface.get("protocolBinding", "")).upper() == "JSONRPC"
            and isinstance(interface.get("url"), str)
        ):
            return str(interface["url"])
    url = card.get("url")
    return url if isinstance(url, str) and url.startswith(("http://", "https://")) else fallback
