"""Agents over HTTP: satsuma's own API, A2A, AG-UI and MCP, behind tokens and scopes
(``satsuma serve``, docs/serve.md).

Needs the ``serve`` extra (``pip install 'satsuma[serve]'``): hypercorn's trio worker
and the MCP SDK's server pieces. Only the CLI imports this room; users import it as
``satsuma.serve``.
"""

from ._app import App as App
from ._app import error_for as error_for
from ._http import HTTPError as HTTPError
from ._http import JSONAnswer as JSONAnswer
from ._http import Principal as Principal
from ._http import Request as Request
from ._http import ServerSentEvent as ServerSentEvent
from ._http import SSEAnswer as SSEAnswer
from ._http import Surface as Surface
from ._http import agent_id_from as agent_id_from
from ._runs import AlreadyDecided as AlreadyDecided
from ._runs import BadDecision as BadDecision
from ._runs import Busy as Busy
from ._runs import PendingView as PendingView
from ._runs import RunEvent as RunEvent
from ._runs import Runs as Runs
from ._runs import RunView as RunView
from ._runs import UnknownAgent as UnknownAgent
from ._runs import UnknownRun as UnknownRun
from ._server import ServeContext as ServeContext
from ._server import Server as Server
from ._slots import RunSlot as RunSlot
from ._slots import RunSlots as RunSlots
from ._tokens import TokenBook as TokenBook
from ._tokens import TokenFileError as TokenFileError
from ._tokens import create_token as create_token

__all__ = [
    "AlreadyDecided",
    "App",
    "BadDecision",
    "Busy",
    "HTTPError",
    "JSONAnswer",
    "PendingView",
    "Principal",
    "Request",
    "RunEvent",
    "RunSlot",
    "RunSlots",
    "RunView",
    "Runs",
    "SSEAnswer",
    "ServeContext",
    "Server",
    "ServerSentEvent",
    "Surface",
    "TokenBook",
    "TokenFileError",
    "UnknownAgent",
    "UnknownRun",
    "agent_id_from",
    "create_token",
    "error_for",
]
