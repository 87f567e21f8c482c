"""Datasets: cases written by hand, read from a file, or taken from a store's runs.

A file is JSON (or YAML, when PyYAML is installed): a list of cases, or an object
``{"version": 1, "cases": [...]}``. Each case is an object with ``id`` and ``prompt``
and, optionally, ``expected_output``, ``expected_tools`` (tool names, in order),
``history`` (messages ``{"role", "content"}`` before the prompt) and ``recorded`` (calls
``{"name", "input", "content", "is_error"}`` a replay answers); ``DATASET_SCHEMA`` is
its JSON Schema. A bad file is refused whole, with the line, the case and the field
named.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from .._exceptions import SatsumaError
from .._messages import Message
from ..store import RunRecord, Store
from ._case import Case, RecordedCall
from ._dataset_format import Lines, json_lines, yaml_lines

__all__ = ["Dataset", "DatasetError"]

FORMAT_VERSION = 1
_CASE_FIELDS = frozenset(
    {"id", "prompt", "expected_output", "expected_tools", "history", "recorded", "metadata"}
)


class DatasetError(SatsumaError, ValueError):
    """A dataset file, or a case in it, that cannot be read: the message names where."""


class Dataset:
    """Cases to evaluate an agent on, in order; ids are unique.

    Raises:
        DatasetError: two cases share an id.
    """

    def __init__(self, cases: Iterable[Case]) -> None:
        self.cases: tuple[Case, ...] = tuple(cases)
        seen: set[str] = set()
        for case in self.cases:
            if not isinstance(case, Case):
                raise TypeError(f"a Dataset holds Case objects, got: {type(case).__name__}")
            if case.id in seen:
                raise DatasetError(f"two cases have the id {case.id!r}; ids name cases in reports")
            seen.add(case.id)

    def __iter__(self) -> Iterator[Case]:
        return iter(self.cases)

    def __len__(self) -> int:
        return len(self.cases)

    def __repr__(self) -> str:
        return f"<Dataset of {len(self.cases)} cases>"

    def redact(self, fn: Callable[[Case], Case]) -> Dataset:
        """A dataset of ``fn(case)`` for each case: to remove personal data before a case
        is written anywhere (a report, a file). ``fn`` must return a Case."""
        redacted = []
        for case in self.cases:
            new = fn(case)
            if not isinstance(new, Case):
                raise TypeError(f"redact's function returned {type(new).__name__}, not a Case")
            redacted.append(new)
        return Dataset(redacted)

    # --- files ---------------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Dataset:
        """Read a dataset file (``.json``, or ``.yaml``/``.yml`` with PyYAML installed).

        Raises:
            DatasetError: the file cannot be read or parsed, or a case is not valid
                (the message names the file, the case and the field).
        """
        where = Path(path)
        try:
            text = where.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise DatasetError(f"{where}: cannot be read ({exc})") from None
        if where.suffix.lower() in (".yaml", ".yml"):
            data, lines = _yaml(where, text)
        else:
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise DatasetError(
                    f"{where}: line {exc.lineno}, column {exc.colno}: not JSON ({exc.msg})"
                ) from None
            lines = json_lines(text)
        return cls(_cases(where, data, lines))

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the dataset as JSON that ``load`` reads back."""
        Path(path).write_text(
            json.dumps(
                {"version": FORMAT_VERSION, "cases": [case_json(c) for c in self.cases]},
                indent=2,
                ensure_ascii=False,
            )
            + "\n",
            encoding="utf-8",
        )

    # --- stores -------------------------------------------------------------------------

    @classmethod
    async def from_store(
        cls,
        store: Store,
        agent_id: str | Sequence[str] | None = None,
        *,
        agent: str | None = None,
        limit: int | None = None,
        since: float | None = None,
    ) -> Dataset:
        """The completed runs in ``store`` of the agent class named ``agent``
        (``Agent.name``), of the conversation ``agent_id`` (or several), or of both,
        oldest first: each a case with the conversation before it, its prompt, its output
        and its recorded tool calls. ``limit`` keeps the newest so many; ``since``
        (seconds since the epoch) the runs started at or after it. With neither
        ``agent`` nor ``agent_id``, every agent's runs are read, and ``limit`` is needed.

        A run recorded before satsuma kept its agent class has none: ``agent`` never
        finds it, its ``agent_id`` does.

        Raises:
            ValueError: a bad argument, named, or neither ``agent``, ``agent_id`` nor
                ``limit`` given.
        """
        if limit is not None and (
            not isinstance(limit, int) or isinstance(limit, bool) or limit < 1
        ):
            raise ValueError(f"limit must be a positive int or None, got: {limit!r}")
        ids: list[str | None]
        if agent_id is None:
            ids = [None]
        elif isinstance(agent_id, str):
            ids = [agent_id]
        else:
            ids = list(agent_id)
            if not ids or not all(isinstance(one, str) for one in ids):
                raise ValueError(f"agent_id must be a str or a non-empty list of str: {agent_id!r}")
        if agent is None and agent_id is None and limit is None:
            raise ValueError(
                "give agent (the class's name), agent_id, or a limit on how many runs to read"
            )
        records: list[RunRecord] = []
        for one in ids:
            records.extend(
                await store.find_runs(
                    agent=agent, agent_id=one, status="completed", since=since, limit=limit
                )
            )
        records.sort(key=lambda record: record.started_at)  # stable: as found, on a tie
        if limit is not None:
            records = records[-limit:]
        return cls(await _stored_cases(store, records))


async def _stored_cases(store: Store, records: Sequence[RunRecord]) -> list[Case]:
    # Each conversation is read once, whatever the number of its runs.
    conversations: dict[str, tuple[list[Message], list[int]]] = {}
    cases = []
    for record in records:
        if record.position is None:  # a run recorded before satsuma kept where it starts
            continue
        if record.agent_id not in conversations:
            messages = await store.load_messages(record.agent_id)
            runs = await store.runs(record.agent_id)
            starts = sorted(r.position for r in runs if r.position is not None)
            conversations[record.agent_id] = (messages, starts)
        messages, starts = conversations[record.agent_id]
        later = [p for p in starts if p > record.position]
        end = later[0] if later else len(messages)
        added = messages[record.position + 1 : end]
        output = next((m.text for m in reversed(added) if m.role == "assistant"), "")
        recorded = [
            RecordedCall(entry.tool_name, entry.input, entry.content, bool(entry.is_error))
            for entry in await store.calls(record.run_id)
            if entry.finished
        ]
        metadata: dict[str, Any] = {"agent_id": record.agent_id, "started_at": record.started_at}
        if record.agent is not None:
            metadata["agent"] = record.agent
        cases.append(
            Case(
                id=record.run_id,
                prompt=record.prompt,
                history=messages[: record.position],
                recorded=recorded,
                output=output,
                metadata=metadata,
            )
        )
    return cases


def _yaml(where: Path, text: str) -> tuple[Any, Lines]:
    try:
        import yaml  # type: ignore[import-untyped]
    except ImportError:
        raise DatasetError(
            f"{where}: reading YAML needs PyYAML (pip install pyyaml), or give the cases as JSON"
        ) from None
    try:
        return yaml.safe_load(text), yaml_lines(yaml, text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise DatasetError(f"{where}: {at}not YAML ({getattr(exc, 'problem', exc)})") from None


def _cases(where: Path, data: Any, lines: Lines) -> list[Case]:
    if isinstance(data, Mapping):
        version = data.get("version", FORMAT_VERSION)
        if version != FORMAT_VERSION:
            raise DatasetError(f"{where}: version {version!r} is not one this satsuma reads (1)")
        data = data.get("cases")
    if not isinstance(data, list):
        raise DatasetError(f'{where}: expected a list of cases (or {{"cases": [...]}})')
    return [
        _case(where, index, item, lines[index] if index < len(lines) else {})
        for index, item in enumerate(data)
    ]


def _case(where: Path, index: int, item: Any, lines: Mapping[str, int]) -> Case:
    def error(problem: str, field: str = "") -> DatasetError:
        line = lines.get(field) or lines.get("")
        return DatasetError(f"{where}: {f'line {line}: ' if line else ''}{at}: {problem}")

    at = f"cases[{index}]"
    if not isinstance(item, Mapping):
        raise error(f"a case is an object, got: {type(item).__name__}")
    if "id" in item and isinstance(item["id"], str):
        at = f"{at} ({item['id']!r})"
    unknown = sorted(set(item) - _CASE_FIELDS)
    if unknown:
        known = ", ".join(sorted(_CASE_FIELDS))
        raise error(f"unknown field {unknown[0]!r} (known: {known})", unknown[0])
    for name in ("id", "prompt"):
        if name not in item:
            raise error(f"field {name!r} is missing")
    try:
        history = [_message(i, m) for i, m in enumerate(item.get("history") or ())]
    except (TypeError, ValueError) as exc:
        raise error(str(exc), "history") from None
    try:
        recorded = [_recorded(i, r) for i, r in enumerate(item.get("recorded") or ())]
    except (TypeError, ValueError) as exc:
        raise error(str(exc), "recorded") from None
    fields = {
        k: item[k] for k in ("id", "prompt", "expected_output", "expected_tools") if k in item
    }
    for name, value in fields.items():  # each field alone first: the error names its line
        try:
            Case(**{"id": "x", "prompt": "x", name: value})
        except (TypeError, ValueError) as exc:
            raise error(f"field {name!r}: {exc}", name) from None
    metadata = item.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise error(
            f"field 'metadata' must be an object, got: {type(metadata).__name__}", "metadata"
        )
    try:
        return Case(**fields, history=history, recorded=recorded, metadata=dict(metadata))
    except (TypeError, ValueError) as exc:
        raise error(str(exc)) from None


def _message(index: int, value: Any) -> Message:
    if not isinstance(value, Mapping) or value.get("role") not in ("user", "assistant"):
        raise ValueError(
            f"history[{index}] must be {{'role': 'user' | 'assistant', 'content': ...}}"
        )
    content = value.get("content")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if not isinstance(content, list) or not all(
        isinstance(b, Mapping) and "type" in b for b in content
    ):
        raise ValueError(f"history[{index}].content must be a str or a list of content blocks")
    return Message(role=value["role"], content=content)


def _recorded(index: int, value: Any) -> RecordedCall:
    if not isinstance(value, Mapping) or not isinstance(value.get("name"), str):
        raise ValueError(f"recorded[{index}] must be {{'name': str, 'input': ..., 'content': ...}}")
    content = value.get("content", "")
    if not isinstance(content, (str, list)):
        raise ValueError(f"recorded[{index}].content must be a str or a list of content blocks")
    is_error = value.get("is_error", False)
    if not isinstance(is_error, bool):
        raise ValueError(f"recorded[{index}].is_error must be true or false")
    return RecordedCall(value["name"], value.get("input", {}), content, is_error)


def case_json(case: Case) -> dict[str, Any]:
    """A case as the JSON a dataset file holds."""
    return {
        "id": case.id,
        "prompt": case.prompt,
        "expected_output": case.expected_output,
        "expected_tools": list(case.expected_tools) if case.expected_tools is not None else None,
        "history": [
            {"role": m.role, "content": [dict(b) for b in m.content]} for m in case.history
        ],
        "recorded": [
            {"name": r.name, "input": r.input, "content": r.content, "is_error": r.is_error}
            for r in case.recorded
        ],
        "metadata": dict(case.metadata),
    }
