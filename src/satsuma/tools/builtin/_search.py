"""The ``search`` tool: a regular expression over the workspace's files.

The walk runs in a child Python process (``_search_worker.py``). Python's ``re`` holds
the GIL while it matches, so a pattern that backtracks catastrophically would freeze every
task of the host, the trio loop included; in a child it only costs the child, which the
time limit kills with its process group.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, ClassVar, Final

from .. import Tool, ToolContext, ToolError, ToolResult
from ._process import HeadTail, run_in_group
from ._sandbox import Workspace
from ._search_worker import MAX_DEPTH

__all__ = ["Search"]

_WORKER: Final = Path(__file__).with_name("_search_worker.py")
_OUTPUT_LIMIT: Final = 8_000_000  # bytes read from the worker; matches are capped far below


class Search(Tool):
    """Searches the workspace's text files for a regular expression."""

    name = "search"
    description = (
        "Search the workspace's text files for a regular expression (Python syntax), line by "
        "line. Answers 'path:line: text' for each matching line. glob limits the files: "
        "'*.py' matches names anywhere, 'src/**/*.py' matches paths. Binary files, .git "
        "and files ignored by .gitignore are skipped."
    )
    capabilities = frozenset({"read"})
    parameters: ClassVar[Any] = {
        "pattern": {
            "type": "string",
            "required": True,
            "min_length": 1,
            "description": "A Python regular expression, searched in each line",
        },
        "glob": {
            "type": "string",
            "description": "Only files matching this glob, e.g. '*.py' or 'src/**/*.ts'",
        },
        "max_matches": {
            "type": "integer",
            "minimum": 1,
            "maximum": 1000,
            "default": 100,
            "description": "Stop after this many matching lines (default 100)",
        },
    }

    time_limit: ClassVar[float] = 10.0
    """Seconds a search may take; past it, the matches found so far are returned."""
    max_line_chars: ClassVar[int] = 300
    """Matching lines longer than this are cut."""
    max_file_bytes: ClassVar[int] = 5_000_000
    """Bigger files are skipped (and counted)."""

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        pattern: str = args["pattern"]
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ToolError(f"Invalid regex: {exc}") from None
        except RecursionError:
            raise ToolError("Invalid regex: too deeply nested") from None
        workspace = Workspace.of(ctx)
        request = {
            "root": str(workspace.real_root),
            "base": "",
            "pattern": pattern,
            "glob": args.get("glob"),
            "max_matches": args["max_matches"],
            "max_line_chars": self.max_line_chars,
            "max_file_bytes": self.max_file_bytes,
        }
        result = await run_in_group(
            [sys.executable, "-I", str(_WORKER)],
            cwd=workspace.real_root,
            env=None,
            stdin=json.dumps(request).encode(),
            time_limit=self.time_limit,
            grace=0.5,
            output=HeadTail(_OUTPUT_LIMIT, 0),
        )
        matches, summary = _parse(result.output.head)
        if "error" in summary:
            raise ToolError(str(summary["error"]))
        if not summary.get("done") and not result.timed_out:
            detail = result.output.head.decode("utf-8", "replace")[-500:]
            raise ToolError(f"search failed (exit code {result.returncode}): {detail}")
        lines = [f"{match['path']}:{match['line']}: {match['text']}" for match in matches]
        notes = _notes(
            summary, len(matches), args["max_matches"], self.time_limit, result.timed_out
        )
        if not lines:
            searched = summary.get("files_searched")
            where = f" in {searched:,} files" if isinstance(searched, int) else ""
            text = f"No matches for {pattern!r}{where}"
        else:
            text = "\n".join(lines)
        if notes:
            text += "\n" + "\n".join(notes)
        details = {
            "pid": result.pid,
            "matches": len(matches),
            "timed_out": result.timed_out,
            **{key: value for key, value in summary.items() if key != "done"},
        }
        return ToolResult(text, details=details)


def _parse(output: bytes) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    matches: list[dict[str, Any]] = []
    summary: dict[str, Any] = {}
    for raw in output.splitlines():
        try:
            item = json.loads(raw)
        except ValueError:
            continue  # the last line, cut by a kill
        if not isinstance(item, dict):
            continue
        if "path" in item:
            matches.append(item)
        else:
            summary = item
    return matches, summary


def _notes(
    summary: dict[str, Any], found: int, cap: int, time_limit: float, timed_out: bool
) -> list[str]:
    notes = []
    if timed_out:
        notes.append(
            f"[search stopped at its {time_limit:g}s time limit after {found} matches; "
            "narrow the glob or simplify the pattern]"
        )
    elif summary.get("truncated"):
        notes.append(f"[stopped at {cap} matches; narrow the pattern or the glob]")
    skipped = []
    if summary.get("binary_skipped"):
        skipped.append(f"{summary['binary_skipped']:,} binary")
    if summary.get("large_skipped"):
        skipped.append(f"{summary['large_skipped']:,} too large")
    if skipped:
        notes.append(f"[files skipped: {', '.join(skipped)}]")
    if summary.get("deep_skipped"):
        notes.append(
            f"[{summary['deep_skipped']:,} directories more than {MAX_DEPTH} levels deep "
            "were not searched]"
        )
    return notes
