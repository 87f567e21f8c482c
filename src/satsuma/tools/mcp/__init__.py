"""Tools from Model Context Protocol servers, run and supervised like satsuma's own.

See docs/mcp.md.
"""

from ..._exceptions import MCPServerError as MCPServerError
from ._server import MCPServer as MCPServer
from ._server import MCPTool as MCPTool

__all__ = ["MCPServer", "MCPServerError", "MCPTool"]
