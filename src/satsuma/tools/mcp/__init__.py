"""Tools from Model Context Protocol servers, run and supervised like satsuma's own.

Needs the MCP SDK, the extra ``satsuma[mcp]``: without it, importing this module raises
an ImportError that says what to install. See docs/mcp.md.
"""

from ..._exceptions import MCPServerError as MCPServerError
from ..._public import public_names as _public_names

try:
    import mcp as _mcp  # noqa: F401  # checked first, so that its absence is named plainly
except ImportError as _exc:
    # Only the SDK itself missing: an SDK that is there but broken (one of its own
    # dependencies gone) keeps its own error, which names what is really missing.
    if _exc.name != "mcp":
        raise
    raise ImportError(
        "satsuma.tools.mcp (MCPServer) needs the MCP SDK, an optional dependency of "
        "satsuma: pip install 'satsuma[mcp]'",
        name=_exc.name,
    ) from _exc

from ._server import MCPServer as MCPServer
from ._server import MCPTool as MCPTool

__all__ = ["MCPServer", "MCPServerError", "MCPTool"]

# Each exported name carries its public path (tracebacks, reprs, pickles).
_public_names(__name__, globals())
