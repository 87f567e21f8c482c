"""Models: the Model interface and every provider that answers it.

A ``Model`` takes a ``ModelRequest`` and returns a ``ModelResponse`` (``_model``).
``AnthropicModel`` answers on Anthropic's API, or on Claude's Bedrock and Vertex AI
clients (``_clouds``); ``OpenAIModel`` on any OpenAI-compatible Chat Completions
endpoint. Both are an ``SDKModel`` (``_sdk_model``) that speaks its wire through a codec
of its own (``_codec``; ``_chat_requests`` and ``_chat_codec``), retries with the same
policy (``_retries``) and checks its responses (``_responses``); the agent loop sends
each call through the limiter of its configuration (``_limits``, ``_limiter``,
``_run_limiters``). Each call's usage is priced in US dollars (``_prices``); each
request is checked against its model's context window first (``_windows``). An
agent that names its model by a string gets a model shared per trio run and
configuration (``_clients``, ``_pool``).

Adding a provider is one new module and one line: the module defines the Model and a
``_clients.Provider`` (how its shared model is checked and built from the environment;
``_openai.OPENAI`` is one), and one line in ``_aliases.PROVIDERS`` maps the model
strings' prefix to it.

This room imports only satsuma's shared kernel (messages, shapes, tool calls and their
JSON gate, exceptions, text); users import its public names from ``satsuma``.
"""

from .._public import public_names as _public_names
from ._aliases import MODEL_ALIASES as MODEL_ALIASES
from ._aliases import model_problem as model_problem
from ._aliases import resolve_model as resolve_model
from ._anthropic import AnthropicModel as AnthropicModel
from ._anthropic import anthropic_params as anthropic_params
from ._chat_codec import completion_chunks as completion_chunks
from ._chat_codec import completion_object as completion_object
from ._chat_codec import error_body as error_body
from ._clients import shared_model as shared_model
from ._codec import error_object as error_object
from ._codec import error_type as error_type
from ._codec import message_object as message_object
from ._codec import stream_events as stream_events
from ._context_editing import ContextEditing as ContextEditing
from ._limiter import ModelLimiter as ModelLimiter
from ._limiter import Permit as Permit
from ._limits import ModelLimits as ModelLimits
from ._limits import estimate_input_tokens as estimate_input_tokens
from ._model import CACHE_MODES as CACHE_MODES
from ._model import CacheMode as CacheMode
from ._model import Model as Model
from ._model import ModelListener as ModelListener
from ._model import ModelRequest as ModelRequest
from ._model import ModelResponse as ModelResponse
from ._openai import OpenAIModel as OpenAIModel
from ._prefetch import import_sdk_in_background as import_sdk_in_background
from ._prices import ModelPrices as ModelPrices
from ._prices import prices_for as prices_for
from ._prices import set_prices as set_prices
from ._responses import checked_response as checked_response
from ._run_limiters import limiter_for as limiter_for
from ._run_limiters import set_model_limits as set_model_limits
from ._windows import ContextWindowExceeded as ContextWindowExceeded
from ._windows import context_window_for as context_window_for
from ._windows import count_input_tokens as count_input_tokens
from ._windows import set_context_window as set_context_window

# Names for satsuma's other rooms rather than users (not in DESIGN.md) are imported
# above but left out of __all__: what the agent loop needs to resolve, share, limit and
# check a model's calls, and the wire codecs' writers that satsuma.testing's loopback
# servers answer with. satsuma re-exports every name of __all__.
__all__ = [
    "MODEL_ALIASES",
    "AnthropicModel",
    "ContextEditing",
    "ContextWindowExceeded",
    "Model",
    "ModelLimits",
    "ModelListener",
    "ModelPrices",
    "ModelRequest",
    "ModelResponse",
    "OpenAIModel",
    "set_context_window",
    "set_model_limits",
    "set_prices",
]

# Users import these names from satsuma: they carry that path (tracebacks, reprs, pickles).
_public_names("satsuma", globals())
