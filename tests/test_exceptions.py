"""satsuma._exceptions, the shared kernel's exceptions: its ``__all__`` is complete."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import satsuma
from satsuma import _exceptions


def test_all_names_every_exception_class_and_function_defined_there() -> None:
    tree = ast.parse(Path(_exceptions.__file__).read_text())
    defined = {
        node.name
        for node in tree.body
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and not node.name.startswith("_")
    }
    assert sorted(_exceptions.__all__) == sorted(defined)
    assert len(_exceptions.__all__) == len(set(_exceptions.__all__))
    classes = {name for name in defined if isinstance(getattr(_exceptions, name), type)}
    for name in classes:
        assert issubclass(getattr(_exceptions, name), satsuma.SatsumaError), name


def test_the_docstring_draws_every_exception_class() -> None:
    doc = _exceptions.__doc__ or ""
    for name in _exceptions.__all__:
        if isinstance(getattr(_exceptions, name), type):
            assert re.search(rf"\s{name}\s", doc), name
