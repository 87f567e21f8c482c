"""Built-in tools: files, search, shell, HTTP and dates, sandboxed to a workspace root.

Each needs a capability granted by the context (``read``, ``write``, ``shell``,
``network``; ``date_resolver`` needs none), and every path resolves inside the context's
``working_dir``. See docs/builtin-tools.md for each tool's arguments and limits.
"""

from ..._public import public_names as _public_names
from ._bash import Bash as Bash
from ._dates import DateResolver as DateResolver
from ._files import EditFile as EditFile
from ._files import ListDir as ListDir
from ._files import ReadFile as ReadFile
from ._files import WriteFile as WriteFile
from ._http import HttpFetch as HttpFetch
from ._isolation import ShellIsolation as ShellIsolation
from ._sandbox import PathEscapes as PathEscapes
from ._search import Search as Search

__all__ = [
    "Bash",
    "DateResolver",
    "EditFile",
    "HttpFetch",
    "ListDir",
    "PathEscapes",
    "ReadFile",
    "Search",
    "ShellIsolation",
    "WriteFile",
]

# Each exported name carries its public path (tracebacks, reprs, pickles).
_public_names(__name__, globals())
