"""What the built-in tools cost, each next to a floor measured in the same run.

Every figure is the median of several repetitions, on the real clock (``perf_counter``),
with the tool and its floors interleaved so that they share the machine's noise. The tools
come from ``satsuma.tools.builtin`` and run through ``ToolRunner.execute`` with the context
``{"working_dir": <workspace>, "capabilities": {"read", "write", "shell"}}``; everything
lives in a temporary directory, removed at the end.

1. ``read_file`` of a 4 KiB text file (``a/b/c/file.txt``), N sequential calls in one
   ``execute`` (strategy "sequential"): µs per call. Two floors: the same runner with a
   no-op sync tool taking the same path (``@tool def noop(path: str) -> str``), so the
   difference is what the sandbox resolution and the read itself add; and a plain
   ``await trio.to_thread.run_sync(Path.read_text, p)`` per call, no runner at all.
2. The sandbox alone: ``Workspace(root, real_root).resolve("a/b/c/file.txt")`` (entered
   and left, which opens and closes the descriptors it walks), in a loop: µs per call.
   Floor: ``os.path.realpath(join(root, path))`` and a prefix check, the usual naive way
   (which, unlike the sandbox, leaves a gap between the check and the use of the path).
3. ``write_file`` of 4 KiB to the same path, N calls (each a temporary file, fsync, and a
   rename over the old file): µs per call. Floors: ``Path.write_text`` in a worker thread
   (no fsync), and open + write + fsync + close in a worker thread (no rename).
4. ``bash`` running ``true``, N calls: ms per call. Floor: ``await
   trio.run_process(["bash", "-c", "true"])``. The tool adds a new session, the output
   pipe, and making sure that the process group is gone.
5. ``bash`` printing 100 MB (``head -c 100000000 /dev/zero | tr '\\0' a``): wall time,
   and the growth of this process's peak RSS (``resource.getrusage(RUSAGE_SELF).ru_maxrss``
   before and after, in KiB) over its first run. Floor: the same command ``> /dev/null``
   with ``trio.run_process``, measured first (ru_maxrss is a high-water mark: growth
   counts only what goes above every earlier peak of the process, so the floor's growth is
   taken before the tool's).
6. ``search`` for a literal over a tree of 1,000 files of 50 lines (it matches a line in
   one file of 50, so the walk is never cut short): ms per search. Floor: ``grep -rn
   PATTERN .`` with ``trio.run_process`` (when grep is on PATH; else the row says "grep
   not found"). And the search worker's start-up: a search in an empty directory, next to
   ``python -I -c pass`` (the interpreter starting) as its floor.

The issue sets no target for these: every figure is printed next to its floor, for
information. Figures are never asserted: the exit status is 0 whatever they are (it is not
0 when the benchmark itself goes wrong, e.g. a call fails or a search misses a match).

    python benchmarks/builtin_tools.py [--quick]

``--quick`` uses tiny sizes and one repetition so that a test can exercise the harness in
a moment.
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import trio
from _harness import header, median, ratio, spread, table

from satsuma import ToolRunner, tool
from satsuma.tools import ToolOutcome
from satsuma.tools.builtin import Bash, ReadFile, Search, WriteFile
from satsuma.tools.builtin._sandbox import Workspace

FILE_PATH = "a/b/c/file.txt"
FILE_BYTES = 4096
CAPABILITIES = frozenset({"read", "write", "shell"})
NEEDLE = "needle_q7x"
NEEDLE_EVERY = 50  # one file in 50 holds the needle, once
SEARCH_LINES = 50


@attrs.frozen
class Sizes:
    read_calls: int
    resolve_calls: int
    write_calls: int
    bash_calls: int
    big_output: int
    search_files: int
    repeats: int
    big_repeats: int
    search_repeats: int


FULL = Sizes(
    read_calls=1_000,
    resolve_calls=10_000,
    write_calls=200,
    bash_calls=50,
    big_output=100_000_000,
    search_files=1_000,
    repeats=7,
    big_repeats=3,
    search_repeats=9,
)
QUICK = Sizes(
    read_calls=20,
    resolve_calls=100,
    write_calls=5,
    bash_calls=2,
    big_output=1_000_000,
    search_files=20,
    repeats=1,
    big_repeats=1,
    search_repeats=1,
)

Action = Callable[[], Awaitable[None]]


@tool
def noop(path: str) -> str:
    """Do nothing with a path.

    Args:
        path: A path, unused.
    """
    return "ok"


# --- shared -------------------------------------------------------------------------------


def _context(working_dir: Path) -> dict[str, Any]:
    return {"working_dir": working_dir, "capabilities": CAPABILITIES}


def _calls(name: str, count: int, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"id": f"t{index}", "name": name, "input": arguments} for index in range(count)]


def _check(outcomes: Sequence[ToolOutcome], count: int, starts: str = "") -> None:
    # Not a timing check: a failing call would measure the wrong path.
    if len(outcomes) != count:
        raise RuntimeError(f"expected {count} outcomes, got {len(outcomes)}")
    for outcome in outcomes:
        if outcome.is_error or not outcome.text.startswith(starts):
            raise RuntimeError(f"{outcome.tool_name} answered: {outcome.text[:300]!r}")


async def _timed(action: Action) -> float:
    gc.collect()
    started = time.perf_counter()
    await action()
    return time.perf_counter() - started


async def _interleaved(
    actions: dict[str, Action], repeats: int, *, warm: bool = True
) -> dict[str, list[float]]:
    """Seconds per run of each action, ``repeats`` runs each, interleaved and in turn
    reversed so that no action always goes first; each is run once untimed before."""
    if warm:
        for action in actions.values():
            await action()
    samples: dict[str, list[float]] = {name: [] for name in actions}
    order = list(actions)
    for repeat in range(repeats):
        for name in order if repeat % 2 == 0 else reversed(order):
            samples[name].append(await _timed(actions[name]))
    return samples


def _medians(samples: dict[str, list[float]], scale: float) -> dict[str, float]:
    return {name: median(values) * scale for name, values in samples.items()}


# --- 1. read_file -------------------------------------------------------------------------


def _text(size: int) -> str:
    """``size`` bytes of ASCII text in 64-byte lines."""
    lines = [f"line {index:04d} ".ljust(63, "x") + "\n" for index in range(size // 64 + 1)]
    return "".join(lines)[:size]


def make_workspace(folder: Path) -> Path:
    workspace = folder / "ws"
    target = workspace / FILE_PATH
    target.parent.mkdir(parents=True)
    target.write_text(_text(FILE_BYTES), encoding="ascii")
    (workspace / "out").mkdir()
    return workspace


async def _read_samples(workspace: Path, calls: int, repeats: int) -> dict[str, list[float]]:
    context = _context(workspace)
    reader = ToolRunner([ReadFile], strategy="sequential")
    floor = ToolRunner([noop], strategy="sequential")
    read_calls = _calls("read_file", calls, {"path": FILE_PATH})
    noop_calls = _calls("noop", calls, {"path": FILE_PATH})
    target = workspace / FILE_PATH

    async def read_file() -> None:
        _check(await reader.execute(read_calls, context), calls, "     1\tline 0000 ")

    async def noop_tool() -> None:
        _check(await floor.execute(noop_calls, context), calls, "ok")

    async def read_text() -> None:
        text = ""
        for _ in range(calls):
            text = await trio.to_thread.run_sync(Path.read_text, target)
        if len(text) != FILE_BYTES:
            raise RuntimeError(f"read {len(text)} characters, not {FILE_BYTES}")

    actions = {"read_file": read_file, "noop": noop_tool, "read_text": read_text}
    return await _interleaved(actions, repeats)


def measure_read(workspace: Path, calls: int, repeats: int) -> dict[str, Any]:
    """µs per call of read_file, the no-op tool and to_thread(read_text), medians."""
    samples = trio.run(_read_samples, workspace, calls, repeats)
    return {"calls": calls, "us": _medians(samples, 1e6 / calls), "samples": samples}


# --- 2. the sandbox alone -----------------------------------------------------------------


def measure_resolve(workspace_dir: Path, calls: int, repeats: int) -> dict[str, Any]:
    """µs per call of Workspace.resolve and of realpath + prefix check, medians."""
    root = str(workspace_dir)
    real_root = os.path.realpath(root)
    workspace = Workspace(Path(root), Path(real_root))
    prefix = real_root.rstrip(os.sep) + os.sep
    with workspace.resolve(FILE_PATH) as resolved:
        if resolved.name != "file.txt" or resolved.display != FILE_PATH:
            raise RuntimeError(f"resolved to {resolved!r}")

    def sandbox() -> None:
        for _ in range(calls):
            with workspace.resolve(FILE_PATH):
                pass

    def naive() -> None:
        for _ in range(calls):
            full = os.path.realpath(os.path.join(root, FILE_PATH))
            if not full.startswith(prefix):
                raise RuntimeError(f"{full} is outside {real_root}")

    actions = {"sandbox": sandbox, "naive": naive}
    for action in actions.values():
        action()  # warm
    samples: dict[str, list[float]] = {name: [] for name in actions}
    for repeat in range(repeats):
        for name in actions if repeat % 2 == 0 else reversed(actions):
            gc.collect()
            started = time.perf_counter()
            actions[name]()
            samples[name].append(time.perf_counter() - started)
    return {"calls": calls, "us": _medians(samples, 1e6 / calls), "samples": samples}


# --- 3. write_file ------------------------------------------------------------------------


def _write_fsync(path: Path, data: bytes) -> None:
    with open(path, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())


async def _write_samples(workspace: Path, calls: int, repeats: int) -> dict[str, list[float]]:
    context = _context(workspace)
    writer = ToolRunner([WriteFile], strategy="sequential")
    content = _text(FILE_BYTES)
    data = content.encode("ascii")
    write_calls = _calls("write_file", calls, {"path": "out/tool.txt", "content": content})
    plain_path = workspace / "out" / "plain.txt"
    fsync_path = workspace / "out" / "fsync.txt"

    async def write_file() -> None:
        _check(await writer.execute(write_calls, context), calls)

    async def write_text() -> None:
        for _ in range(calls):
            await trio.to_thread.run_sync(Path.write_text, plain_path, content)

    async def write_fsync() -> None:
        for _ in range(calls):
            await trio.to_thread.run_sync(_write_fsync, fsync_path, data)

    actions = {"write_file": write_file, "write_text": write_text, "fsync": write_fsync}
    samples = await _interleaved(actions, repeats)
    for name in ("tool.txt", "plain.txt", "fsync.txt"):
        size = (workspace / "out" / name).stat().st_size
        if size != FILE_BYTES:
            raise RuntimeError(f"out/{name} is {size} bytes, not {FILE_BYTES}")
    return samples


def measure_write(workspace: Path, calls: int, repeats: int) -> dict[str, Any]:
    """µs per call of write_file, write_text and write + fsync, medians."""
    samples = trio.run(_write_samples, workspace, calls, repeats)
    return {"calls": calls, "us": _medians(samples, 1e6 / calls), "samples": samples}


# --- 4. bash true -------------------------------------------------------------------------


async def _bash_samples(workspace: Path, calls: int, repeats: int) -> dict[str, list[float]]:
    context = _context(workspace)
    runner = ToolRunner([Bash], strategy="sequential")
    bash_calls = _calls("bash", calls, {"command": "true"})

    async def bash_tool() -> None:
        _check(await runner.execute(bash_calls, context), calls, "(no output)")

    async def run_process() -> None:
        for _ in range(calls):
            await trio.run_process(["bash", "-c", "true"], cwd=workspace)

    return await _interleaved({"bash": bash_tool, "run_process": run_process}, repeats)


def measure_bash(workspace: Path, calls: int, repeats: int) -> dict[str, Any]:
    """ms per call of bash ``true`` through the tool and through trio.run_process."""
    samples = trio.run(_bash_samples, workspace, calls, repeats)
    return {"calls": calls, "ms": _medians(samples, 1e3 / calls), "samples": samples}


# --- 5. bash with a large output ----------------------------------------------------------


def max_rss_kib() -> float:
    """This process's peak RSS so far, in KiB (ru_maxrss is in bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1024 if sys.platform == "darwin" else float(peak)


def current_rss_kib() -> float | None:
    """This process's RSS now, in KiB (Linux, from /proc/self/statm; else None)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 1024


async def _big_samples(workspace: Path, size: int, repeats: int) -> dict[str, Any]:
    context = _context(workspace)
    runner = ToolRunner([Bash])
    command = f"head -c {size} /dev/zero | tr '\\0' a"
    call = _calls("bash", 1, {"command": command, "timeout": 600})

    async def bash_tool() -> None:
        outcomes = await runner.execute(call, context)
        _check(outcomes, 1, "aaaa")
        details = outcomes[0].details or {}
        if details.get("output_bytes") != size:
            raise RuntimeError(f"the tool saw {details.get('output_bytes')} bytes, not {size}")

    async def run_process() -> None:
        await trio.run_process(["bash", "-c", f"{command} > /dev/null"], cwd=workspace)

    # The first run of each is timed too, and its peak RSS growth taken: the floor's first,
    # as ru_maxrss only ever rises.
    growth: dict[str, float] = {}
    gc.collect()
    peak, now = max_rss_kib(), current_rss_kib()
    samples: dict[str, list[float]] = {"bash": [], "run_process": []}
    for name, action in (("run_process", run_process), ("bash", bash_tool)):
        before = max_rss_kib()
        samples[name].append(await _timed(action))
        growth[name] = max_rss_kib() - before
    more = await _interleaved(
        {"bash": bash_tool, "run_process": run_process}, repeats - 1, warm=False
    )
    for name, values in more.items():
        samples[name].extend(values)
    return {"samples": samples, "growth": growth, "peak_before": peak, "rss_before": now}


def measure_big_output(workspace: Path, size: int, repeats: int) -> dict[str, Any]:
    """Seconds per run of a command printing ``size`` bytes, through the tool and with
    its output to /dev/null, and the peak RSS growth (KiB) of the first run of each."""
    found = trio.run(_big_samples, workspace, size, repeats)
    return {"size": size, "s": _medians(found["samples"], 1.0), **found}


# --- 6. search ----------------------------------------------------------------------------


def make_tree(folder: Path, files: int) -> tuple[Path, int]:
    """``files`` files of SEARCH_LINES lines in 10 folders; returns the tree's root and how
    many lines hold NEEDLE."""
    tree = folder / "tree"
    expected = 0
    for index in range(files):
        directory = tree / f"dir{index % 10}"
        directory.mkdir(parents=True, exist_ok=True)
        lines = [
            f"file {index} line {line}: the quick brown fox jumps over the lazy dog {line * index}"
            for line in range(SEARCH_LINES)
        ]
        if index % NEEDLE_EVERY == 0:
            lines[SEARCH_LINES // 2] += f" {NEEDLE}"
            expected += 1
        (directory / f"file{index:04d}.txt").write_text("\n".join(lines) + "\n", encoding="ascii")
    return tree, expected


async def _search_samples(
    tree: Path, empty: Path, expected: int, files: int, repeats: int, grep: str | None
) -> dict[str, list[float]]:
    runner = ToolRunner([Search])
    call = _calls("search", 1, {"pattern": NEEDLE})

    async def search_tree() -> None:
        outcomes = await runner.execute(call, _context(tree))
        _check(outcomes, 1, "dir0/file0000.txt:")
        details = outcomes[0].details or {}
        if details.get("matches") != expected or details.get("files_searched") != files:
            raise RuntimeError(f"search found {details}, not {expected} in {files} files")

    async def grep_tree() -> None:
        assert grep is not None
        found = await trio.run_process([grep, "-rn", NEEDLE, "."], cwd=tree, capture_stdout=True)
        if len(found.stdout.splitlines()) != expected:
            raise RuntimeError(f"grep found {found.stdout[:300]!r}, not {expected} lines")

    async def search_empty() -> None:
        _check(await runner.execute(call, _context(empty)), 1, "No matches")

    async def python_start() -> None:
        await trio.run_process([sys.executable, "-I", "-c", "pass"], stdin=subprocess.DEVNULL)

    actions: dict[str, Action] = {"search": search_tree}
    if grep is not None:
        actions["grep"] = grep_tree
    actions["empty"] = search_empty
    actions["python"] = python_start
    return await _interleaved(actions, repeats)


def measure_search(folder: Path, files: int, repeats: int) -> dict[str, Any]:
    """ms per search over the tree (and per grep, if found), and in an empty directory
    (and per ``python -I -c pass``)."""
    tree, expected = make_tree(folder, files)
    empty = folder / "empty"
    empty.mkdir()
    grep = shutil.which("grep")
    samples = trio.run(_search_samples, tree, empty, expected, files, repeats, grep)
    return {
        "files": files,
        "expected": expected,
        "grep": grep,
        "ms": _medians(samples, 1e3),
        "samples": samples,
    }


# --- report -------------------------------------------------------------------------------


def filesystem(path: Path) -> str:
    """The type of the filesystem holding ``path`` (Linux, from /proc/mounts)."""
    real = os.path.realpath(path)
    best, kind = "", "unknown"
    try:
        with open("/proc/mounts", encoding="utf-8") as mounts:
            for entry in mounts:
                fields = entry.split()
                if len(fields) < 3:
                    continue
                point = fields[1].replace("\\040", " ")
                inside = real == point or real.startswith(point.rstrip("/") + "/")
                if inside and len(point) > len(best):
                    best, kind = point, fields[2]
    except OSError:
        pass
    return kind


def _kib(value: float | None) -> str:
    return "unknown" if value is None else f"{value:,.0f} KiB"


def _row(
    name: str, size: str, figure: float, floor: float | None, digits: int, note: str
) -> tuple[str, ...]:
    if floor is None:
        return (name, size, f"{figure:,.{digits}f}", "-", "-", "-", note)
    return (
        name,
        size,
        f"{figure:,.{digits}f}",
        f"{floor:,.{digits}f}",
        ratio(figure, floor),
        f"{figure - floor:+,.{digits}f}",
        note,
    )


def format_report(
    read: dict[str, Any],
    resolve: dict[str, Any],
    write: dict[str, Any],
    bash: dict[str, Any],
    big: dict[str, Any],
    search: dict[str, Any],
    sizes: Sizes,
    folder_fs: str,
) -> str:
    reads = f"{read['calls']:,} calls"
    writes = f"{write['calls']:,} calls"
    runs = f"{bash['calls']:,} calls"
    output = f"{big['size']:,} B"
    tree = f"{search['files']:,} files x {SEARCH_LINES}"
    r_us, w_us, b_ms, s_ms = read["us"], write["us"], bash["ms"], search["ms"]
    if search["grep"] is not None:
        grep_row = _row(
            "search literal (ms/search)",
            tree,
            s_ms["search"],
            s_ms["grep"],
            2,
            "floor: grep -rn PATTERN . via trio.run_process",
        )
    else:
        grep_row = _row(
            "search literal (ms/search)", tree, s_ms["search"], None, 2, "grep not found"
        )
    rows = [
        _row(
            "read_file 4 KiB (µs/call)",
            reads,
            r_us["read_file"],
            r_us["noop"],
            1,
            "floor: no-op sync tool, same runner",
        ),
        _row(
            "read_file vs read_text (µs/call)",
            reads,
            r_us["read_file"],
            r_us["read_text"],
            1,
            "floor: to_thread.run_sync(Path.read_text), no runner",
        ),
        _row(
            "sandbox resolve (µs/call)",
            f"{resolve['calls']:,} calls",
            resolve["us"]["sandbox"],
            resolve["us"]["naive"],
            2,
            "floor: os.path.realpath + prefix check",
        ),
        _row(
            "write_file 4 KiB (µs/call)",
            writes,
            w_us["write_file"],
            w_us["write_text"],
            1,
            "floor: Path.write_text in a thread, no fsync",
        ),
        _row(
            "write_file vs fsync (µs/call)",
            writes,
            w_us["write_file"],
            w_us["fsync"],
            1,
            "floor: write + fsync in a thread, no rename",
        ),
        _row(
            "bash true (ms/call)",
            runs,
            b_ms["bash"],
            b_ms["run_process"],
            2,
            "floor: trio.run_process(['bash', '-c', 'true'])",
        ),
        _row(
            "bash large output (s)",
            output,
            big["s"]["bash"],
            big["s"]["run_process"],
            3,
            "floor: the command > /dev/null via trio.run_process",
        ),
        _row(
            "bash large output, RSS growth (KiB)",
            output,
            big["growth"]["bash"],
            big["growth"]["run_process"],
            0,
            "ru_maxrss after - before, first run of each",
        ),
        grep_row,
        _row(
            "search, empty directory (ms/search)",
            "0 files",
            s_ms["empty"],
            s_ms["python"],
            2,
            "floor: python -I -c pass (interpreter start)",
        ),
    ]
    columns = ("measurement", "size", "built-in", "floor", "ratio", "added", "notes")

    def ms_spread(samples: dict[str, list[float]], name: str, scale: float) -> str:
        return f"{name} {spread(samples[name], scale, 2)}"

    out = [
        *header("satsuma built-in tools benchmark"),
        f"temporary directory on {folder_fs}; real clock (perf_counter); tool and floors "
        "interleaved; context capabilities read, write, shell",
        f"medians of {sizes.repeats} runs (read, resolve, write, bash true), "
        f"{sizes.big_repeats} (large output), {sizes.search_repeats} (search); "
        "added = built-in - floor",
        "",
        *table(columns, rows),
        "",
        "min-max over the runs: "
        + ", ".join(
            [
                ms_spread(read["samples"], "read_file", 1e6 / read["calls"]) + " µs",
                ms_spread(bash["samples"], "bash", 1e3 / bash["calls"]) + " ms (bash true)",
                ms_spread(search["samples"], "search", 1e3) + " ms",
                ms_spread(search["samples"], "empty", 1e3) + " ms (empty)",
            ]
        ),
        f"search: pattern {NEEDLE!r}, {search['expected']} matching lines, every file searched "
        "by both",
        "RSS growth: ru_maxrss is this process's high-water mark; before the large-output runs "
        f"it was {big['peak_before']:,.0f} KiB, with {_kib(big['rss_before'])} resident "
        "(growth up to the peak minus the resident size would not show)",
    ]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, to test the harness")
    options = parser.parse_args(argv)
    sizes = QUICK if options.quick else FULL
    with tempfile.TemporaryDirectory(prefix="satsuma-builtin-bench-") as name:
        folder = Path(name)
        workspace = make_workspace(folder)
        read = measure_read(workspace, sizes.read_calls, sizes.repeats)
        resolve = measure_resolve(workspace, sizes.resolve_calls, sizes.repeats)
        write = measure_write(workspace, sizes.write_calls, sizes.repeats)
        bash = measure_bash(workspace, sizes.bash_calls, sizes.repeats)
        big = measure_big_output(workspace, sizes.big_output, sizes.big_repeats)
        search = measure_search(folder, sizes.search_files, sizes.search_repeats)
        report = format_report(read, resolve, write, bash, big, search, sizes, filesystem(folder))
    print(report)


if __name__ == "__main__":
    main(sys.argv[1:])
