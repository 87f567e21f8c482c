"""The model an agent gets when none is passed in: one per trio run and configuration.

Building an ``AsyncAnthropic`` costs some 30 ms and most of a megabyte (an SSL context and
a connection pool), and a client only pays off when its connections are reused. So
every agent that declares its model by name shares one ``AnthropicModel`` (and so one
client and one connection pool) with every other such agent of the same configuration:
the environment's ``ANTHROPIC_API_KEY``, ``ANTHROPIC_AUTH_TOKEN`` and
``ANTHROPIC_BASE_URL`` when the model is first needed.

Its connection pool is several small pools (``_pool``): one pool of a thousand
connections costs more CPU per request than the request itself once a thousand
conversations are in flight.

A client's sockets belong to the trio run that opened them, so the sharing is per run
(a ``RunVar``): a service's one ``trio.run`` shares everything, and two runs (two tests,
two threads) never see each other's connections. The clients of a run are closed when
the run ends, by a system task that trio cancels after the main task returns; nothing
an agent does, cancellation included, closes a client other agents use.

A model string with a provider prefix gets that provider's model, shared the same way
per configuration: ``bedrock:`` an AnthropicModel on ``AsyncAnthropicBedrock`` (AWS
region and credentials as boto3 finds them), ``vertex:`` on ``AsyncAnthropicVertex``
(``CLOUD_ML_REGION``, ``ANTHROPIC_VERTEX_PROJECT_ID``, Application Default Credentials,
found and their first token fetched as the model is built),
``openai:`` an ``OpenAIModel`` (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``). Each is built
only when some agent names it, so that the providers' packages stay extras.
"""

from __future__ import annotations

import importlib
import logging
import os
import urllib.parse
from collections.abc import Callable
from typing import Any

import attrs
import trio
import trio.lowlevel

from .._exceptions import ConfigurationError, missing_api_key
from ._aliases import Provider, parse_model
from ._anthropic import AnthropicModel
from ._model import Model

__all__ = ["shared_model"]

logger = logging.getLogger("satsuma.agents")

# How long closing a run's clients may take when the run ends.
_CLOSE_SECONDS = 5.0

_Key = tuple[str | None, ...]


class _Models:
    """The shared models of one trio run, and the task that closes them."""

    def __init__(self) -> None:
        self.models: dict[_Key, Any] = {}  # each model has the client it shares
        self.lock = trio.Lock()  # one build per configuration, however many agents wait
        trio.lowlevel.spawn_system_task(self._close_at_the_end, name="satsuma shared clients")

    async def _close_at_the_end(self) -> None:
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(_CLOSE_SECONDS):
                for model in self.models.values():
                    try:
                        await model.client.close()
                    except Exception:
                        logger.exception("closing a shared model client failed")
            self.models.clear()


_RUN_MODELS: trio.lowlevel.RunVar[_Models] = trio.lowlevel.RunVar("satsuma_shared_models")


def _build() -> AnthropicModel:
    # The SDK's first import takes over a second and a client's SSL context some more:
    # done in a worker thread, so that the first agent of a service to open does not
    # stall every other task of the run meanwhile.
    import anthropic

    from ._pool import pooled_http_client

    # Passed in, the client is not the model's to close: aclose() on a shared model
    # (reached through AgentHandle.model) leaves it to the run's end.
    return AnthropicModel(anthropic.AsyncAnthropic(http_client=pooled_http_client()))


def _check_anthropic(agent: str | None, declared: str | None) -> None:
    if not (os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN")):
        # Found as the agent starts, not as its first run crashes inside the SDK.
        raise missing_api_key(agent, declared)


def _build_openai() -> Model:
    from ._openai import OpenAIModel, import_openai
    from ._pool import ShardedTransport, _behind_a_proxy

    openai = import_openai()
    http_client = (
        None if _behind_a_proxy() else openai.DefaultAsyncHttpxClient(transport=ShardedTransport())
    )
    return OpenAIModel(openai.AsyncOpenAI(http_client=http_client))


def _check_openai(agent: str | None, declared: str | None) -> None:
    from ._openai import import_openai, missing_openai_key

    import_openai()  # a ConfigurationError naming the extra, before anything else
    if not os.environ.get("OPENAI_API_KEY"):
        raise missing_openai_key(agent, declared)
    base_url = os.environ.get("OPENAI_BASE_URL")
    if base_url:
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigurationError(
                f"OPENAI_BASE_URL is not an http(s) URL: {base_url!r}",
                "Set it to the endpoint's base, such as http://localhost:8000/v1 for vLLM "
                "or http://localhost:11434/v1 for Ollama, or unset it for OpenAI's",
            )


def _needs(module: str, extra: str, what: str) -> None:
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise ConfigurationError(
            f"the {module} package is not installed: {what} needs it",
            f'Install the extra: pip install "satsuma[{extra}]"',
        ) from exc


def _aws_session() -> Any:
    import boto3  # type: ignore[import-untyped]  # boto3 ships no type hints
    import botocore.exceptions  # type: ignore[import-untyped]

    profile = os.environ.get("AWS_PROFILE")
    try:
        return boto3.Session(profile_name=profile)
    except botocore.exceptions.ProfileNotFound as exc:
        raise ConfigurationError(
            f"the AWS profile {profile!r} (AWS_PROFILE) is not configured",
            "Name a profile of ~/.aws/config, or unset AWS_PROFILE",
        ) from exc


def _check_bedrock(agent: str | None, declared: str | None) -> None:
    _needs("boto3", "bedrock", "Claude on Bedrock")
    # A profile may name the region (read from ~/.aws/config, no network).
    if not (os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")) and not (
        _aws_session().region_name
    ):
        who = f" for agent {agent!r} ({declared!r})" if agent is not None else ""
        raise ConfigurationError(
            f"no AWS region is set{who}",
            "Set AWS_REGION (e.g. us-east-1), or a region for your AWS_PROFILE",
        )


def _build_bedrock() -> AnthropicModel:
    import anthropic

    from ._pool import pooled_http_client

    # Credentials as boto3 finds them: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY /
    # AWS_SESSION_TOKEN, AWS_PROFILE, or the instance's role; or AWS_BEARER_TOKEN_BEDROCK.
    # Looked for here (in a worker thread: an instance role is asked of the metadata
    # endpoint), so that none is a ConfigurationError as the agent opens, not the SDK's
    # RuntimeError at every request of every run.
    if not os.environ.get("AWS_BEARER_TOKEN_BEDROCK") and _aws_session().get_credentials() is None:
        raise ConfigurationError(
            "no AWS credentials were found for Claude on Bedrock",
            "Set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), run where an "
            "instance role provides them, or set AWS_BEARER_TOKEN_BEDROCK",
        )
    return AnthropicModel(anthropic.AsyncAnthropicBedrock(http_client=pooled_http_client()))


def _check_vertex(agent: str | None, declared: str | None) -> None:
    _needs("google.auth", "vertex", "Claude on Vertex AI")
    if not os.environ.get("CLOUD_ML_REGION"):
        who = f" for agent {agent!r} ({declared!r})" if agent is not None else ""
        raise ConfigurationError(
            f"CLOUD_ML_REGION is not set{who}",
            "Set CLOUD_ML_REGION (e.g. us-east5, or global) and ANTHROPIC_VERTEX_PROJECT_ID; "
            "credentials come from Application Default Credentials "
            "(gcloud auth application-default login, or GOOGLE_APPLICATION_CREDENTIALS)",
        )


_CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"


def _build_vertex() -> AnthropicModel:
    import anthropic
    import google.auth
    import google.auth.exceptions
    from google.auth.transport.requests import Request

    from ._pool import pooled_http_client

    # Application Default Credentials, found here (in a worker thread: google-auth may ask
    # the metadata server) so that none is a ConfigurationError as the agent opens, not
    # the SDK's error at every request. Their first token is fetched here too, once: the
    # client fetches one for each request that finds it has none, so agents whose first
    # requests went out together fetched one each (eight agents, eight token requests).
    try:
        credentials, project = google.auth.default(scopes=[_CLOUD_PLATFORM])
    except google.auth.exceptions.DefaultCredentialsError as exc:
        raise ConfigurationError(
            f"no Google credentials were found for Claude on Vertex AI: {exc}",
            "Run gcloud auth application-default login, set GOOGLE_APPLICATION_CREDENTIALS "
            "to a service account's key file, or run where the metadata server provides them",
        ) from exc
    project_id = os.environ.get("ANTHROPIC_VERTEX_PROJECT_ID") or project
    if not project_id:
        raise ConfigurationError(
            "no Google Cloud project is set for Claude on Vertex AI",
            "Set ANTHROPIC_VERTEX_PROJECT_ID (your credentials name none)",
        )
    try:
        # google-auth's refresh has no type hints.
        credentials.refresh(Request())  # type: ignore[no-untyped-call]
    except google.auth.exceptions.GoogleAuthError as exc:
        if not exc.retryable and not isinstance(exc, google.auth.exceptions.TransportError):
            raise ConfigurationError(
                f"Google refused the credentials for Claude on Vertex AI: {exc}",
                "Check the account's key (or gcloud auth application-default login again)",
            ) from exc
        # Not reachable just now: the client asks again at its first request.
    client = anthropic.AsyncAnthropicVertex(
        project_id=project_id,
        credentials=credentials,
        http_client=pooled_http_client(),
    )
    return AnthropicModel(client)


@attrs.frozen
class _Configuration:
    """How a provider's shared model is checked, built, and told apart by environment."""

    environment: tuple[str, ...]
    check: Callable[[str | None, str | None], None]
    build: Callable[[], Any]


_PROVIDERS: dict[Provider, _Configuration] = {
    "anthropic": _Configuration(
        ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL"),
        _check_anthropic,
        lambda: _build(),  # looked up when called, so that it can be replaced (tests)
    ),
    "bedrock": _Configuration(
        (
            "AWS_REGION",
            "AWS_DEFAULT_REGION",
            "AWS_PROFILE",
            "AWS_ACCESS_KEY_ID",
            "AWS_BEARER_TOKEN_BEDROCK",
            "ANTHROPIC_BEDROCK_BASE_URL",
        ),
        _check_bedrock,
        _build_bedrock,
    ),
    "vertex": _Configuration(
        (
            "CLOUD_ML_REGION",
            "ANTHROPIC_VERTEX_PROJECT_ID",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "ANTHROPIC_VERTEX_BASE_URL",
        ),
        _check_vertex,
        _build_vertex,
    ),
    "openai": _Configuration(
        ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"),
        _check_openai,
        _build_openai,
    ),
}


async def shared_model(agent: str | None = None, declared: str | None = None) -> Any:
    """The model of this trio run for the provider that ``declared`` names (Anthropic's
    when None) and the environment's configuration, built on first use (its client
    reads the same environment).

    Typed ``Any``: an ``AnthropicModel`` (on Anthropic's API, Bedrock or Vertex AI) or
    an ``OpenAIModel``, all ``Model``s.

    Raises:
        ConfigurationError: the provider's key (or region) is not set, its package (an
            extra) is not installed, or its base URL is not a URL (named for ``agent``,
            which declares the model ``declared``).
    """
    parsed = parse_model(declared) if declared is not None else None
    provider: Provider = parsed[0] if parsed is not None else "anthropic"
    configuration = _PROVIDERS[provider]
    configuration.check(agent, declared)
    try:
        models = _RUN_MODELS.get()
    except LookupError:
        models = _Models()
        _RUN_MODELS.set(models)
    key = (provider, *(os.environ.get(name) for name in configuration.environment))
    model = models.models.get(key)
    if model is not None:
        return model
    async with models.lock:
        model = models.models.get(key)
        if model is None:
            model = models.models[key] = await trio.to_thread.run_sync(configuration.build)
    return model
