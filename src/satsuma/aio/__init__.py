"""satsuma inside an asyncio program: trio as a guest of the asyncio loop.

``async with Runtime() as rt:`` in a FastAPI lifespan, a Starlette app or any asyncio
service; agents, supervisors, cancel scopes and the store run under trio as elsewhere,
and their handles are awaited from asyncio. See docs/asyncio.md.
"""

from .._public import public_names as _public_names
from ._bridge import RuntimeClosed as RuntimeClosed
from ._handles import AsyncioAgentHandle as AsyncioAgentHandle
from ._handles import AsyncioSupervisor as AsyncioSupervisor
from ._runtime import Runtime as Runtime

__all__ = ["AsyncioAgentHandle", "AsyncioSupervisor", "Runtime", "RuntimeClosed"]

_public_names(__name__, globals())
