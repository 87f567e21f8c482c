"""Public names carry their public path: ``satsuma.Agent.__module__ == "satsuma"``.

Each public package's ``__init__`` calls `public_names` once its imports are done, as
trio's ``fixup_module_metadata`` and httpx's ``__init__`` do, so that reprs, tracebacks,
pickles and the API reference say where users import a name from rather than the private
module that defines it (``satsuma._exceptions.ModelError``).
"""

from __future__ import annotations

import inspect
import sys
import types
import typing
from collections.abc import Mapping
from typing import Any

__all__ = ["public_names"]

# Users import these from the top-level package (DESIGN.md), whichever sub-package also
# exports them.
_TOP: typing.Final = "satsuma"


def public_names(module_name: str, namespace: Mapping[str, Any]) -> None:
    """Give each class and function that ``module_name`` exports its public path.

    The exported names are ``namespace["__all__"]``. One defined in a private module of
    satsuma gets ``__module__ = module_name``, except a name that ``satsuma`` itself
    exports: users import those from ``satsuma``, so they carry that path whichever
    package also exports them and whichever is imported first. A room that is not a
    public package (agents, supervisor) calls this with ``"satsuma"``: the names satsuma
    exports move there, and what the room exports for other rooms keeps its private path.
    A name that already carries a public path keeps it (the first public package wins,
    satsuma always does). Constants and type aliases have no ``__module__`` of their own
    and are left alone.

    A class's own annotations are evaluated first, in the module that defines it:
    ``typing.get_type_hints`` evaluates a class's string annotations (``from __future__
    import annotations``) in ``sys.modules[cls.__module__]``, which after the move is the
    public package, where the names they use are not defined. cattrs (through
    ``attrs.resolve_types``), the JSON schema of a tool's attrs arguments or of a typed
    answer, and the cluster's event decoder all read hints that way. A class whose hints
    cannot be evaluated in its own module keeps its private path: moving it would only
    change the error. Functions need nothing: their hints are read in ``__globals__``.
    """
    top_names = _satsuma_names()
    exported = namespace.get("__all__")
    if exported is None:  # satsuma itself: its __all__ is made on first use
        exported = _eager_names(namespace)
    for name in exported:
        # A name satsuma loads on first use is not in its namespace yet: its room's own
        # call moves it when the room is imported.
        obj = namespace.get(name)
        if not isinstance(obj, (type, types.FunctionType)) or obj.__qualname__ != name:
            continue
        current = obj.__module__
        if top_names.get(name) is obj:  # the same object: satsuma.evals.Verifier is not
            home = _TOP
        elif module_name == _TOP or not _is_private(current):
            continue
        else:
            home = module_name
        if current == home or not current.startswith(_TOP + "."):
            continue
        if isinstance(obj, type) and not _freeze_annotations(obj):
            continue
        obj.__module__ = home


def _eager_names(namespace: Mapping[str, Any]) -> frozenset[str]:
    """The public names a namespace holds now (not its submodules)."""
    return frozenset(
        name
        for name, value in namespace.items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    )


def _satsuma_names() -> dict[str, object]:
    """The names satsuma exports, with what each names, read without loading anything:
    those it imported itself, and the ``__all__`` of each room it loads on first use
    that is loaded already (a room not loaded yet moves its own names when it is).
    Never through ``satsuma.__all__``, which loads every room."""
    top = sys.modules.get(_TOP)
    if top is None:
        return {}
    namespace = vars(top)
    names = {name: namespace[name] for name in _eager_names(namespace)}
    for room in namespace.get("_LATER", ()):
        module = sys.modules.get(room)
        if module is not None:
            values = vars(module)
            names.update({name: values.get(name) for name in values.get("__all__", ())})
    return names


def _is_private(module: str) -> bool:
    return any(part.startswith("_") for part in module.split("."))


def _freeze_annotations(cls: type) -> bool:
    """Replace the class's own string annotations by what they name; False if they
    cannot be evaluated."""
    own = inspect.get_annotations(cls)
    if not own:
        return True
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception:
        return False
    # Only the class's own: a base's annotations are its own business (and its base's
    # module is still its __module__ if it is not public).
    cls.__annotations__ = {key: hints[key] for key in own}
    return True
