"""ModelRequest.tools is shared by every agent of a class (made once per class): a user
Model that changes it in place must fail, and can never change what another agent sends."""

from __future__ import annotations

import copy
import json
import pickle
from collections.abc import Callable
from typing import Any

import attrs
import pytest

import satsuma
from satsuma import ModelRequest
from satsuma.testing import FunctionModel, Reply


@attrs.frozen
class Address:
    street: str
    tags: list[str]


@satsuma.tool
async def ship(to: Address, note: str = "") -> str:
    """Ship a parcel.

    Args:
        to: Where.
        note: A note for the courier.
    """
    return "shipped"


class Shipper(satsuma.Agent):
    name = "shipper"
    tools = [ship]


@attrs.frozen
class Answer:
    ok: bool


# Every way a model could try to change the definitions in place, top to bottom.
MUTATIONS: dict[str, Callable[[tuple[Any, ...]], object]] = {
    "set top key": lambda tools: tools[0].__setitem__("name", "evil"),
    "delete top key": lambda tools: tools[0].__delitem__("description"),
    "update": lambda tools: tools[0].update(description="evil"),
    "setdefault": lambda tools: tools[0].setdefault("cache_control", {}),
    "pop": lambda tools: tools[0].pop("name"),
    "popitem": lambda tools: tools[0].popitem(),
    "clear": lambda tools: tools[0].clear(),
    "in-place or": lambda tools: tools[0].__ior__({"name": "evil"}),
    "nested schema": lambda tools: tools[0]["input_schema"]["properties"].__setitem__("x", {}),
    "deeper still": lambda tools: tools[0]["input_schema"]["properties"]["to"][
        "properties"
    ].clear(),
    "required list": lambda tools: tools[0]["input_schema"]["required"].append("note"),
    "list item": lambda tools: tools[0]["input_schema"]["required"].__setitem__(0, "x"),
    "list extend": lambda tools: tools[0]["input_schema"]["required"].__iadd__(["x"]),
    "list sort": lambda tools: tools[0]["input_schema"]["required"].sort(),
    "last tool (final answer)": lambda tools: tools[-1]["input_schema"].clear(),
}


@pytest.mark.parametrize("mutation", MUTATIONS.values(), ids=MUTATIONS.keys())
async def test_a_model_cannot_change_another_agents_tools(
    mutation: Callable[[tuple[Any, ...]], object],
) -> None:
    failures: list[BaseException] = []
    went_through: list[ModelRequest] = []
    seen: list[str] = []

    def meddler(request: ModelRequest) -> Reply | str:
        try:
            mutation(request.tools)
        except TypeError as exc:  # refused: the point of the test
            failures.append(exc)
        else:
            went_through.append(request)
        return "done"

    def witness(request: ModelRequest) -> str:
        seen.append(json.dumps(request.tools, sort_keys=True))
        return "done"

    good = FunctionModel(witness)
    async with satsuma.open_agent(Shipper, model=good) as agent:
        await agent.run("before", output_type=Answer)
    before = seen.pop()
    async with (
        satsuma.open_agent(Shipper, model=FunctionModel(meddler)) as bad,
        satsuma.open_agent(Shipper, model=good) as other,
    ):
        await bad.run("meddle", output_type=Answer)
        await other.run("after", output_type=Answer)
    assert went_through == []
    assert failures
    assert all(
        "shared by every agent" in str(exc) or isinstance(exc, AttributeError) for exc in failures
    )
    # Each request of the other agent (the answer is asked again after "done").
    assert set(seen) == {before}


async def test_a_copy_of_the_tools_is_plain_and_changeable() -> None:
    copies: list[Any] = []

    def copier(request: ModelRequest) -> str:
        mine = copy.deepcopy(list(request.tools))
        mine[0]["name"] = "mine"
        mine[0]["input_schema"]["properties"]["x"] = {"type": "string"}
        copies.append(mine)
        copies.append(pickle.loads(pickle.dumps(request.tools[0])))
        copies.append(copy.copy(request.tools[0]))
        return "done"

    async with satsuma.open_agent(Shipper, model=FunctionModel(copier)) as agent:
        await agent.run("copy")
    mine, pickled, shallow = copies
    assert mine[0]["name"] == "mine"
    assert type(pickled) is dict and type(shallow) is dict
    assert type(mine[0]["input_schema"]["required"]) is list
    assert pickled["name"] == shallow["name"] == "ship"
    assert Shipper.tools[0].schema() == json.loads(json.dumps(pickled))
