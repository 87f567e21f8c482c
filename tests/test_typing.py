"""satsuma's types as a user's type checker sees them: tests/typed/usage_tools.py passes
``mypy --strict`` (and runs), and code that misuses a tool fails it where it should.

The docs' own examples are checked the same way in tests/test_docs.py.
"""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import mypy.api
import pytest

ROOT = Path(__file__).resolve().parent.parent
USAGE = ROOT / "tests" / "typed" / "usage_tools.py"
# Typed answers: Agent[Invoice] gives AgentHandle[Invoice] and RunResult[Invoice].
USAGE_OUTPUT = ROOT / "tests" / "typed" / "usage_output.py"
# satsuma.aio's handles carry the output type too.
USAGE_AIO = ROOT / "tests" / "typed" / "usage_aio.py"

# Each line marked "# error: CODE[, CODE]" must be reported with those codes, and no other
# line.
MISUSE = '''\
import satsuma


@satsuma.tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@satsuma.tool(timeout=5)
async def shout(text: str, times: int = 1) -> str:
    """Repeat a text in capitals."""
    return text.upper() * times


class Notebook(satsuma.Toolset):
    @satsuma.tool
    def write_note(self, text: str) -> int:
        """Keep a note."""
        return len(text)


@satsuma.tool
def lookup(key: str) -> satsuma.ToolReturn:
    """Look a key up."""
    return ("eror", key)  # error: return-value


add("1", 2)  # error: arg-type
text: str = add(1, 2)  # error: assignment
add(1, 2, 3)  # error: call-arg


async def main() -> None:
    await shout(times=2)  # error: call-arg
    number: int = await shout("hi")  # error: assignment


Notebook().write_note(3)  # error: arg-type
Notebook.write_note("no instance")  # error: arg-type, call-arg
satsuma.open_agent(Notebook)  # error: arg-type
'''


MISUSE_OUTPUT = """\
import attrs

import satsuma
from satsuma.testing import ScriptedModel


@attrs.frozen
class Invoice:
    total: float


class Extractor(satsuma.Agent[Invoice]):
    name = "extractor"


class Chatty(satsuma.Agent):
    name = "chatty"


async def main() -> None:
    async with satsuma.open_agent(Extractor, model=ScriptedModel([])) as agent:
        result = await agent.run("Invoice?")
        text: str = result.output  # error: assignment
        print(result.output.currency)  # error: attr-defined
        count = await agent.run("How many?", output_type=int)
        print(count.output.total)  # error: attr-defined
        chat: satsuma.AgentHandle[str] = agent  # error: assignment
    async with satsuma.open_agent(Chatty, model=ScriptedModel([])) as chatty:
        said = await chatty.run("Hello")
        print(said.output.total)  # error: attr-defined
    async with satsuma.Supervisor() as sup:
        child = await sup.start_child(Extractor)
        number: int = (await child.run("Invoice?")).output  # error: assignment
"""


def mypy_errors(files: list[Path], cache: Path) -> tuple[dict[tuple[str, int], set[str]], str]:
    """mypy --strict (the project's configuration) over the files, in one run:
    ``{(file name, line): [error codes]}`` and the report as mypy printed it."""
    report, errors, _ = mypy.api.run(
        [
            f"--config-file={ROOT / 'pyproject.toml'}",
            f"--cache-dir={cache}",
            "--no-error-summary",
            "--show-error-codes",
            *map(str, files),
        ]
    )
    assert errors == "", errors
    found: dict[tuple[str, int], set[str]] = {}
    for line in report.splitlines():
        error = re.match(r"(?P<file>[^:]+):(?P<line>\d+): error: .*\[(?P<code>[a-z-]+)\]$", line)
        if error is not None:
            key = (Path(error["file"]).name, int(error["line"]))
            found.setdefault(key, set()).add(error["code"])
    return found, report


def test_usage_type_checks_and_misuse_does_not(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    misuse = tmp_path / "misuse.py"
    misuse.write_text(MISUSE, encoding="utf-8")
    misuse_output = tmp_path / "misuse_output.py"
    misuse_output.write_text(MISUSE_OUTPUT, encoding="utf-8")
    # The cache outlives the run (see tests/test_docs.py): only a cold run reads the SDK.
    pytest_cache = getattr(request.config, "cache", None)  # None under -p no:cacheprovider
    cache = pytest_cache.mkdir("mypy") if pytest_cache is not None else tmp_path / "cache"
    found, report = mypy_errors([USAGE, USAGE_OUTPUT, USAGE_AIO, misuse, misuse_output], cache)
    for usage in (USAGE, USAGE_OUTPUT, USAGE_AIO):
        assert {key: codes for key, codes in found.items() if key[0] == usage.name} == {}, report
    for name, text in (("misuse.py", MISUSE), ("misuse_output.py", MISUSE_OUTPUT)):
        expected = {
            (name, number): set(mark.group(1).split(", "))
            for number, line in enumerate(text.splitlines(), start=1)
            if (mark := re.search(r"# error: ([a-z, -]+)$", line))
        }
        assert {key: codes for key, codes in found.items() if key[0] == name} == expected, report


def test_usage_runs() -> None:
    # The same files at run time: the signatures mypy accepted are the ones that work.
    runpy.run_path(str(USAGE), run_name="satsuma_typed_usage")
    runpy.run_path(str(USAGE_OUTPUT), run_name="satsuma_typed_usage")
    runpy.run_path(str(USAGE_AIO), run_name="satsuma_typed_usage")


def test_a_type_checker_sees_every_public_name_with_its_type(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # satsuma's __all__ is made at run time, out of a type checker's sight: mypy reads the
    # explicit re-exports instead, by attribute and by star import alike.
    import satsuma

    names = tmp_path / "names.py"
    names.write_text(
        "\n".join(
            [
                "import satsuma",
                "from satsuma import *",
                *(f"reveal_type(satsuma.{name})" for name in satsuma.__all__),
                *(f"reveal_type({name})" for name in satsuma.__all__),
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    pytest_cache = getattr(request.config, "cache", None)
    cache = pytest_cache.mkdir("mypy") if pytest_cache is not None else tmp_path / "cache"
    found, report = mypy_errors([names], cache)
    assert found == {}, report
    revealed = re.findall(r'Revealed type is "(.*)"$', report, flags=re.MULTILINE)
    assert len(revealed) == 2 * len(satsuma.__all__), report
    assert "Any" not in revealed, report
