"""Pieces the benchmark scripts share: the header naming the machine and the versions,
medians of repeated timings, and the table of figures.

A script in this folder imports it as ``from _harness import ...``: run as
``python benchmarks/<script>.py``, the script's own folder is first on ``sys.path``.
"""

from __future__ import annotations

import os
import platform
import statistics
from collections.abc import Sequence
from importlib import metadata

import trio

__all__ = ["header", "median", "ratio", "satsuma_version", "spread", "table"]


def satsuma_version() -> str:
    try:
        return metadata.version("satsuma")
    except metadata.PackageNotFoundError:
        return "unknown"


def header(title: str, *versions: str) -> list[str]:
    """The first lines of a report: its title, the Python, trio and satsuma versions (and
    any ``versions`` given, e.g. ``"sqlite 3.45.1"``), and the machine."""
    names = [
        f"{platform.python_implementation()} {platform.python_version()}",
        f"trio {trio.__version__}",
        f"satsuma {satsuma_version()}",
        *versions,
    ]
    return [
        title,
        ", ".join(names),
        f"machine: {platform.platform()}, {os.cpu_count()} CPUs",
    ]


def median(samples: Sequence[float]) -> float:
    """The median of the repetitions' figures.

    Raises:
        ValueError: no samples (a measurement that never ran).
    """
    if not samples:
        raise ValueError("no samples to take the median of")
    return statistics.median(samples)


def spread(samples: Sequence[float], scale: float = 1.0, digits: int = 1) -> str:
    """``min-max`` of the samples, each multiplied by ``scale``."""
    return f"{min(samples) * scale:.{digits}f}-{max(samples) * scale:.{digits}f}"


def ratio(figure: float, floor: float) -> str:
    """``figure / floor`` as ``1.23x``, or ``-`` when the floor is zero or below."""
    return f"{figure / floor:.2f}x" if floor > 0 else "-"


def table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """The lines of a table: a header, a rule and the rows. The first column is aligned
    left, the last is free text (notes, a verdict), the others are aligned right."""
    width = len(columns)
    for row in rows:
        if len(row) != width:
            raise ValueError(f"a row has {len(row)} cells, the header {width}: {row!r}")
    widths = [max(len(row[column]) for row in (columns, *rows)) for column in range(width)]

    def line(cells: Sequence[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = [cell.rjust(size) for cell, size in zip(cells[1:-1], widths[1:-1], strict=True)]
        return "  ".join([first, *rest, cells[-1]]).rstrip()

    return [line(columns), line(["-" * size for size in widths]), *(line(row) for row in rows)]
