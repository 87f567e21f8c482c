"""Claude on Bedrock and on Vertex AI: the providers of the model strings ``bedrock:``
and ``vertex:``, an AnthropicModel on the Anthropic SDK's ``AsyncAnthropicBedrock`` or
``AsyncAnthropicVertex`` (the extras ``satsuma[bedrock]``, ``satsuma[vertex]``).

Their region and credentials are looked for as an agent starts and as its shared model
is built (``_clients``), so that a missing one is a ConfigurationError naming what to
set, not the SDK's error at every request of every run.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from .._exceptions import ConfigurationError
from ._anthropic import AnthropicModel
from ._clients import Provider

__all__ = ["BEDROCK", "VERTEX"]


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


BEDROCK = Provider(
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
)

VERTEX = Provider(
    (
        "CLOUD_ML_REGION",
        "ANTHROPIC_VERTEX_PROJECT_ID",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "ANTHROPIC_VERTEX_BASE_URL",
    ),
    _check_vertex,
    _build_vertex,
)
