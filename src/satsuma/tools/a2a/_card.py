"""The tool an A2A agent card makes: its name, description and input schema.

Where calls go and whether the agent streams are read from the card by the shared
kernel's wire module (``satsuma._a2a.AgentCard``); this is what the model reads.
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
