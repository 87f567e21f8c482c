"""Remote agents reached over the A2A protocol (1.0, JSON-RPC), as tools.

``A2AAgent(url)`` fetches the remote's agent card when it starts and gives one tool that
sends the model's message as a task; see docs/a2a.md. It needs nothing beyond satsuma's
own dependencies (its HTTP client is the one the model clients use).
"""

from ..._exceptions import A2AAgentError as A2AAgentError
from ..._public import public_names as _public_names
from ._agent import A2AAgent as A2AAgent
from ._agent import A2ATool as A2ATool
from ._agent import Headers as Headers

__all__ = ["A2AAgent", "A2AAgentError", "A2ATool", "Headers"]

# Each exported name carries its public path (tracebacks, reprs, pickles).
_public_names(__name__, globals())
