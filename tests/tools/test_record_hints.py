"""Tool parameters typed as dataclasses, TypedDicts and unions of record classes: the
hints typed answers (docs/output.md) share with tools, through the same machinery."""

from __future__ import annotations

import dataclasses
from typing import Any, TypedDict

import attrs

import satsuma


@dataclasses.dataclass
class Point:
    """A point on the map.

    Attributes:
        x: Metres east.
    """

    x: int
    y: int = 0


class Label(TypedDict, total=False):
    text: str
    size: int


@attrs.frozen
class Circle:
    radius: float


@attrs.frozen
class Square:
    side: float
    rotated: bool


received: list[Any] = []


@satsuma.tool
def draw(at: Point, shape: Circle | Square, label: Label | None = None) -> str:
    """Draw a shape."""
    received.append((at, shape, label))
    return "drawn"


def test_the_schema_comes_from_the_records() -> None:
    properties = draw.schema()["input_schema"]["properties"]
    assert properties["at"] == {
        "type": "object",
        "description": "A point on the map.",
        "properties": {
            "x": {"type": "integer", "description": "Metres east."},
            "y": {"type": "integer", "default": 0},
        },
        "required": ["x"],
    }
    assert properties["label"] == {
        "type": "object",
        "properties": {"text": {"type": "string"}, "size": {"type": "integer"}},
    }
    assert [member["required"] for member in properties["shape"]["anyOf"]] == [
        ["radius"],
        ["side", "rotated"],
    ]


async def test_calls_get_instances_and_errors_name_their_paths() -> None:
    received.clear()
    runner = satsuma.ToolRunner([draw])
    ok, wrong = await runner.execute(
        [
            {
                "id": "t1",
                "name": "draw",
                "input": {"at": {"x": 1}, "shape": {"side": 2, "rotated": True}},
            },
            {"id": "t2", "name": "draw", "input": {"at": {"x": "1"}, "shape": {"side": 2}}},
        ]
    )
    assert ok.content == "drawn"
    assert received == [(Point(1, 0), Square(2.0, True), None)]
    assert wrong.content == (
        "Error: Invalid arguments: expected at.x to be an integer, got: string; shape matches "
        "none of Circle, Square (as Circle: missing required parameter: shape.radius; as "
        "Square: missing required parameter: shape.rotated)"
    )
