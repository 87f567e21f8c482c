"""Doc examples run as tests (STYLE.md).

For each ``docs/*.md`` page, its ```python blocks are joined in order into one module and
executed in a fresh namespace, so a later block may use names an earlier block of the same
page defined. Blocks fenced ```python no-run are skipped. Each block keeps its line
numbers from the page (everything else becomes blank lines), so a failing assert points
at ``docs/<page>.md``, line N. The same modules pass ``mypy --strict``: a user's code
written like the docs must type-check.
"""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import mypy.api
import pytest
import yaml

import satsuma

DOCS = Path(__file__).resolve().parent.parent / "docs"
# The README's example is documentation too.
PAGES = [*sorted(DOCS.glob("*.md")), DOCS.parent / "README.md"]
# Pages that may have no Python example: the command line is shown as shell sessions, and
# the changelog is CHANGELOG.md included as it is.
NO_EXAMPLES = {"changelog.md"}

_FENCE = re.compile(r"^(?P<fence>`{3,})(?P<info>.*)$")


def code_blocks(text: str) -> list[tuple[str, int, list[str]]]:
    """Every fenced block of a page: ``(info string, first line number, lines)``.

    Line numbers start at 1 and point at the block's first line of code.
    """
    blocks: list[tuple[str, int, list[str]]] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index].strip())
        index += 1
        if opening is None:
            continue
        fence, info = opening.group("fence"), opening.group("info").strip()
        start = index + 1
        body: list[str] = []
        # A fence closes only with a line of at least as many backticks and nothing else.
        while index < len(lines) and not re.fullmatch(f"{fence}`*", lines[index].strip()):
            body.append(lines[index])
            index += 1
        index += 1
        blocks.append((info, start, body))
    return blocks


def runnable_source(page: Path) -> tuple[str, int]:
    """The page's ```python blocks as one module, each at its own line numbers, and how
    many blocks it holds."""
    lines: list[str] = []
    count = 0
    for info, start, body in code_blocks(page.read_text(encoding="utf-8")):
        words = info.split()
        if not words or words[0] != "python" or "no-run" in words[1:]:
            continue
        count += 1
        lines.extend([""] * (start - 1 - len(lines)))
        lines.extend(body)
    return "\n".join(lines) + "\n", count


def test_the_docs_exist() -> None:
    assert {page.name for page in PAGES} >= {"index.md", "tools.md", "testing.md"}


@pytest.mark.parametrize("page", PAGES, ids=[page.name for page in PAGES])
def test_python_blocks_run(page: Path) -> None:
    source, count = runnable_source(page)
    if count == 0 and page.name in NO_EXAMPLES:
        return
    assert count > 0, f"{page.name} has no runnable example"
    # A real module object, registered while it runs, so that attrs, cattrs and
    # typing.get_type_hints find the classes' module as they would in a user's file.
    name = f"satsuma_docs_{page.stem}"
    module = types.ModuleType(name)
    module.__file__ = str(page)
    sys.modules[name] = module
    try:
        exec(compile(source, str(page), "exec"), module.__dict__)
    finally:
        del sys.modules[name]


def test_python_blocks_type_check(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    # One mypy run over every page (a module each, at the page's line numbers), with the
    # project's own configuration (strict). The cache outlives the run: a cold run reads
    # satsuma, trio and the SDK (~10 s), a warm one only what changed.
    modules: dict[str, Path] = {}
    for page in PAGES:
        source, count = runnable_source(page)
        if count:
            module = tmp_path / f"docs_{page.stem.replace('-', '_').lower()}.py"
            module.write_text(source, encoding="utf-8")
            modules[module.name] = page
    pytest_cache = getattr(request.config, "cache", None)  # None under -p no:cacheprovider
    cache = pytest_cache.mkdir("mypy") if pytest_cache is not None else tmp_path / "cache"
    report, errors, status = mypy.api.run(
        [
            f"--config-file={DOCS.parent / 'pyproject.toml'}",
            f"--cache-dir={cache}",
            "--no-error-summary",
            "--show-error-codes",
            *map(str, (tmp_path / name for name in modules)),
        ]
    )
    assert errors == "", errors
    problems = []
    for line in report.splitlines():
        found = re.match(r"(?P<file>[^:]+):(?P<line>\d+): (?P<message>.*)", line)
        assert found is not None, line
        page = modules[Path(found.group("file")).name]
        number = int(found.group("line"))
        blocks = code_blocks(page.read_text(encoding="utf-8"))
        block = max(start for _, start, _ in blocks if start <= number)
        where = page.relative_to(DOCS.parent).as_posix()
        problems.append(f"{where}, line {number} (block at line {block}): {found['message']}")
    assert status == 0 and problems == [], "mypy --strict on the docs:\n" + "\n".join(problems)


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings as mkdocs makes them (its default ``toc`` slugs);
    a ``#`` line inside a fenced block is not a heading."""
    lines = page.read_text(encoding="utf-8").splitlines()
    in_blocks = {
        number
        for _, start, body in code_blocks("\n".join(lines))
        for number in range(start - 1, start + len(body) + 1)
    }
    slugs = set()
    for number, line in enumerate(lines, start=1):
        heading = re.fullmatch(r"#{1,6} +(.+?) *", line)
        if heading is None or number in in_blocks:
            continue
        slug = re.sub(r"[^\w\s-]", "", heading.group(1)).strip().lower()
        slugs.add(re.sub(r"[-\s]+", "-", slug))
    return slugs


@pytest.mark.parametrize("page", PAGES, ids=[page.name for page in PAGES])
def test_relative_links_and_anchors_resolve(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", text):
        if "://" in target:
            continue
        linked = (page.parent / target).resolve() if target else page
        assert linked.exists(), f"{page.name} links to missing {target}"
        if anchor and linked.suffix == ".md":
            assert anchor in anchors(linked), f"{page.name} links to missing {target}#{anchor}"


def test_no_run_is_rare() -> None:
    # Fragments that cannot run are the exception: examples are checked by running them.
    for page in PAGES:
        blocks = code_blocks(page.read_text(encoding="utf-8"))
        python = [info for info, _, _ in blocks if info.split()[:1] == ["python"]]
        skipped = [info for info in python if "no-run" in info.split()[1:]]
        assert len(skipped) <= max(1, len(python) // 10), f"{page.name}: too many no-run blocks"


def nav_pages(entries: object) -> set[str]:
    """Every page file named in a mkdocs ``nav`` (nested sections, titled or not)."""
    if isinstance(entries, str):
        return {entries}
    if isinstance(entries, list):
        return set().union(*(nav_pages(entry) for entry in entries))
    if isinstance(entries, dict):
        return set().union(*(nav_pages(value) for value in entries.values()))
    return set()


def test_every_page_is_in_the_nav() -> None:
    config = yaml.safe_load((DOCS.parent / "mkdocs.yml").read_text(encoding="utf-8"))
    listed = nav_pages(config["nav"])
    pages = {page.relative_to(DOCS).as_posix() for page in DOCS.rglob("*.md")}
    assert pages - listed == set(), "pages missing from mkdocs.yml's nav"
    assert listed - pages == set(), "mkdocs.yml's nav lists missing pages"


def test_every_page_is_in_the_readme() -> None:
    # A newcomer reads the README first: its documentation list names every page, so that
    # none exists unseen. The site's home page is the README's own counterpart, and its
    # changelog page is CHANGELOG.md, which the README names itself.
    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^- \[[^\]]+\]\((\S+?)\):", readme, flags=re.MULTILINE))
    pages = {f"docs/{page.name}" for page in DOCS.glob("*.md")} - {"docs/index.md"}
    pages = pages - {"docs/changelog.md"} | {"CHANGELOG.md", "docs/reference/index.md"}
    assert pages - listed == set(), "pages missing from the README's documentation list"


def test_every_public_name_is_in_the_reference() -> None:
    # The reference documents satsuma's names one by one (grouped by topic), so a new
    # export needs its entry; the other public modules are rendered whole.
    entries = re.findall(
        r"^::: satsuma\.(\w+)$",
        "\n".join(page.read_text(encoding="utf-8") for page in (DOCS / "reference").glob("*.md")),
        flags=re.MULTILINE,
    )
    assert sorted(entries) == sorted(set(entries)), "a name is documented twice"
    # ::: satsuma.store, ::: satsuma.testing, ::: satsuma.cluster, ::: satsuma.aio: whole
    # modules
    modules = {"store", "testing", "cluster", "aio"}
    assert set(entries) - modules == set(satsuma.__all__)
