"""The one error of the ``satsuma`` command's own making: a mistake on its command line.

A module of its own so that the command's modules (``_commands``, ``_store_option``,
``_cluster_commands``) raise the same class without importing one another in a circle.
"""

from __future__ import annotations

__all__ = ["CommandError"]


class CommandError(Exception):
    """A mistake on the command line: printed as one line, exit status 2.

    Attributes:
        details: What to print before that line (the traceback of a user's module that
            failed to import), or "".
    """

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message)
        self.details = details
