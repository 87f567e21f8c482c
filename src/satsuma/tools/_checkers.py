"""The ``check`` a tool declaration compiles to: it turns the model's raw arguments into
what ``run`` receives, or into the error texts the model reads (validation against the
tool's JSON Schema, then cattrs structuring where a parameter is an attrs class)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cattrs

from .._text import describe_exception_text, exception_message, type_name
from ._flatspec import spec_checker
from ._hints import structure
from ._spec import ObjectNode, check_arguments

__all__ = ["Checker", "function_checker", "structure_errors", "structuring_checker"]

Checker = Callable[[object], tuple[Any, list[str]]]


def structuring_checker(root: ObjectNode, cls: type) -> Checker:
    """The check of a Tool class whose ``parameters`` is an attrs class: the arguments
    validated against ``root``, then structured into an instance of ``cls``."""

    def check(arguments: object) -> tuple[Any, list[str]]:
        cleaned, errors = check_arguments(root, arguments)
        if errors:
            return cleaned, errors
        try:
            return structure(cleaned, cls), []
        except Exception as exc:  # an attrs validator refused a value
            return cleaned, structure_errors(exc)

    return check


def _describe_leaf(exc: BaseException, type_: Any = None) -> str:
    # An attrs validator's own message names the field and the bound: keep it.
    # A validator's exception is user code: its __str__ may raise or return no str.
    message = exception_message(exc)
    if message is None:
        return describe_exception_text(exc)
    return message or type_name(exc)


def structure_errors(exc: Exception) -> list[str]:
    """The error texts of a failed cattrs structuring (an attrs validator's refusal),
    with paths under ``arguments``, as argument validation words them."""
    if isinstance(exc, cattrs.BaseValidationError):
        texts = cattrs.transform_error(exc, path="arguments", format_exception=_describe_leaf)
        return [text.removesuffix(" @ arguments") for text in texts]
    return [_describe_leaf(exc)]


def function_checker(root: ObjectNode, to_structure: dict[str, Any]) -> Checker:
    """The check of a ``@tool`` function: the arguments validated against ``root``, and
    those named in ``to_structure`` structured into their hint (an attrs class...)."""
    if not to_structure:
        return spec_checker(root)

    def check(arguments: object) -> tuple[Any, list[str]]:
        cleaned, errors = check_arguments(root, arguments)
        if errors:
            return cleaned, errors
        for name, hint in to_structure.items():
            if name in cleaned:
                try:
                    cleaned[name] = structure(cleaned[name], hint)
                except Exception as exc:  # an attrs validator refused a value
                    errors.extend(f"{name}: {text}" for text in structure_errors(exc))
        return cleaned, errors

    return check
