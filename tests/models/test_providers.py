"""One agent class on every provider, changing only its ``model`` string: the model is
resolved from the string and the environment (as a service's agents get it), the
requests really go out in each provider's dialect to its loopback server, and satsuma's
contract holds identically: one tool_result per call, is_error, usage, streaming."""

from __future__ import annotations

import base64
import functools
import json
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anthropic
import attrs
import pytest
import trio
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

import satsuma
from satsuma import AnthropicModel, ConfigurationError, Message, ModelRetry, TextDelta
from satsuma.models._clients import shared_model
from satsuma.models._openai import OpenAIModel
from satsuma.testing import Failure, MessagesServer, Reply, check_conversation
from satsuma.testing._chat_server import ChatCompletionsServer
from satsuma.testing._server import ScriptedServer


@satsuma.tool
async def weather(city: str) -> str:
    """Current weather.

    Args:
        city: The city.
    """
    return f"{city}: 14°C"


@satsuma.tool
async def forecast(city: str) -> str:
    """Tomorrow's weather.

    Args:
        city: The city.
    """
    raise OSError(f"no forecast for {city}")


@satsuma.tool
async def radar(city: str) -> tuple[str, str]:
    """The rain radar.

    Args:
        city: The city.
    """
    return ("error", f"radar offline in {city}")


@satsuma.tool
async def alerts(city: str) -> Any:
    """Weather alerts.

    Args:
        city: The city.
    """
    return ("ok", f"storm warning for {city}", True)


class Forecaster(satsuma.Agent):
    name = "forecaster"
    model = "claude-test"
    system = "You tell the weather."
    tools = [weather, forecast, radar, alerts]


class OnOpenAI(Forecaster):
    model = "openai:gpt-test"


class OnBedrock(Forecaster):
    model = "bedrock:anthropic.claude-test-v1:0"


class OnVertex(Forecaster):
    model = "vertex:claude-test@20260101"


# Fake AWS credentials, and nothing else of AWS's configuration: botocore signs with
# them locally, and never looks for others (files, the instance metadata endpoint).
AWS = {
    "AWS_ACCESS_KEY_ID": "AKIDTESTKEY",
    "AWS_SECRET_ACCESS_KEY": "test-secret",
    "AWS_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": "/nonexistent/aws-config",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials",
}


@functools.cache
def service_account_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def vertex_environment(server: ScriptedServer, folder: Path) -> dict[str, str]:
    # A deployment's Application Default Credentials: a service account's key file,
    # whose token endpoint is the loopback server's. google-auth signs a JWT with the
    # key and trades it there for an access token, as it would at Google's.
    key = service_account_key().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    credentials = folder / "service-account.json"
    credentials.write_text(
        json.dumps(
            {
                "type": "service_account",
                "project_id": "project-test",
                "private_key_id": "key-test",
                "private_key": key.decode(),
                "client_email": "agents@project-test.iam.gserviceaccount.com",
                "client_id": "1234567890",
                "token_uri": server.token_uri,
            }
        )
    )
    return {
        "CLOUD_ML_REGION": "us-east5",
        "ANTHROPIC_VERTEX_PROJECT_ID": "project-test",
        "ANTHROPIC_VERTEX_BASE_URL": f"{server.base_url}/v1",
        "GOOGLE_APPLICATION_CREDENTIALS": str(credentials),
        # Never Google's metadata server (the file comes first; this is in case it did not).
        "NO_GCE_CHECK": "True",
        "GCE_METADATA_HOST": "127.0.0.1:9",
    }


EXPECTED = [
    ("Oslo: 14°C", False),
    ("Error: Tool crashed: OSError: no forecast for Oslo", True),
    ("Error: radar offline in Oslo", True),
    ("storm warning for Oslo", True),
]

SCRIPT = [
    Reply(
        text="Checking.",
        tool_calls=[
            ("weather", {"city": "Oslo"}),
            ("forecast", {"city": "Oslo"}),
            ("radar", {"city": "Oslo"}),
            ("alerts", {"city": "Oslo"}),
        ],
    ),
    "Oslo: 14°C, more unknown.",
]


@attrs.frozen
class Provider:
    agent: type[satsuma.Agent[Any]]
    server: Callable[[list[Any]], ScriptedServer]
    environment: Callable[[ScriptedServer, Path], dict[str, str]]


PROVIDERS = {
    "anthropic": Provider(
        Forecaster,
        MessagesServer,
        lambda server, _: {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": server.base_url},
    ),
    "openai": Provider(
        OnOpenAI,
        ChatCompletionsServer,
        lambda server, _: {
            "OPENAI_API_KEY": "test-key",
            "OPENAI_BASE_URL": f"{server.base_url}/v1",
        },
    ),
    "bedrock": Provider(
        OnBedrock,
        MessagesServer,
        lambda server, _: {**AWS, "ANTHROPIC_BEDROCK_BASE_URL": server.base_url},
    ),
    "vertex": Provider(OnVertex, MessagesServer, vertex_environment),
}


@asynccontextmanager
async def serving(
    name: str, script: list[Any], monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[ScriptedServer]:
    provider = PROVIDERS[name]
    with tempfile.TemporaryDirectory() as folder:
        async with provider.server(script) as server:
            for key, value in provider.environment(server, Path(folder)).items():
                monkeypatch.setenv(key, value)
            yield server


def verified_jwt(token: str, key: rsa.RSAPublicKey) -> dict[str, Any]:
    """The claims of a JWT signed with RS256, after checking the signature with ``key``."""

    def decoded(part: str) -> bytes:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))

    header, claims, signature = token.split(".")
    assert json.loads(decoded(header))["alg"] == "RS256"
    key.verify(  # raises InvalidSignature
        decoded(signature),
        f"{header}.{claims}".encode(),
        padding.PKCS1v15(),
        hashes.SHA256(),
    )
    value: dict[str, Any] = json.loads(decoded(claims))
    return value


def tool_results(history: tuple[Message, ...]) -> list[tuple[Any, bool]]:
    return [
        (block["content"], block["is_error"])
        for message in history
        for block in message.tool_results
    ]


async def run_scenario(name: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    events: list[Any] = []
    async with (
        serving(name, SCRIPT, monkeypatch) as server,
        satsuma.open_agent(PROVIDERS[name].agent) as agent,
    ):
        result = await agent.run("Weather in Oslo?", events=events.append)
        history = agent.history
        model = agent.model
    return {
        "result": result,
        "history": history,
        "model": model,
        "requests": server.requests,
        "received": server.received,
        "server": server,
        "text": "".join(event.text for event in events if isinstance(event, TextDelta)),
    }


async def test_one_agent_class_runs_alike_on_all_four_providers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runs = {name: await run_scenario(name, monkeypatch) for name in PROVIDERS}
    assert isinstance(runs["openai"]["model"], OpenAIModel)
    for name in ("anthropic", "bedrock", "vertex"):
        assert isinstance(runs[name]["model"], AnthropicModel)
    for run in runs.values():
        assert run["result"].status == "completed"
        assert run["result"].output == "Oslo: 14°C, more unknown."
        assert run["result"].usage.input_tokens > 0 and run["result"].usage.output_tokens > 0
        assert run["text"] == "Checking.Oslo: 14°C, more unknown."
        check_conversation(run["history"])
        # The same results, in the same satsuma history, whichever provider answered.
        assert tool_results(run["history"]) == EXPECTED
    # On the wire, in each dialect. The Messages API's, on three paths:
    for name in ("anthropic", "bedrock", "vertex"):
        last = runs[name]["requests"][1]["messages"][-1]["content"]
        assert [(block["content"], block["is_error"]) for block in last] == EXPECTED
    anthropic_request = runs["anthropic"]["received"][0]
    assert anthropic_request.path == "/v1/messages"
    assert anthropic_request.headers["authorization"] == "Bearer test-key"
    assert "anthropic-version" in anthropic_request.headers
    assert anthropic_request.body["model"] == "claude-test"
    # Bedrock: the model in the path, SigV4-signed, the API version in the body; the
    # stream comes back in AWS's event-stream encoding.
    bedrock_request = runs["bedrock"]["received"][0]
    assert bedrock_request.path == "/model/anthropic.claude-test-v1:0/invoke-with-response-stream"
    assert bedrock_request.headers["authorization"].startswith(
        "AWS4-HMAC-SHA256 Credential=AKIDTESTKEY/"
    )
    assert "/us-east-1/bedrock/aws4_request" in bedrock_request.headers["authorization"]
    assert "x-amz-date" in bedrock_request.headers
    assert "x-api-key" not in bedrock_request.headers
    assert isinstance(bedrock_request.body["anthropic_version"], str)
    assert "model" not in bedrock_request.body and "stream" not in bedrock_request.body
    # Vertex AI: project, region and model in the path, and the access token that
    # google-auth got for the service account: one, for both requests.
    vertex = runs["vertex"]["server"]
    assert vertex.access_tokens == ["ya29.loopback-1"]
    for vertex_request in runs["vertex"]["received"]:
        assert vertex_request.path == (
            "/v1/projects/project-test/locations/us-east5/publishers/anthropic/models/"
            "claude-test@20260101:streamRawPredict"
        )
        assert vertex_request.headers["authorization"] == "Bearer ya29.loopback-1"
    assert isinstance(vertex_request.body["anthropic_version"], str)
    assert "model" not in vertex_request.body
    # Caching the conversation: Anthropic's API takes the automatic (top-level)
    # breakpoint; Bedrock and Vertex AI take breakpoints on blocks only.
    assert anthropic_request.body["cache_control"] == {"type": "ephemeral"}
    for name in ("bedrock", "vertex"):
        for request in runs[name]["received"]:
            assert "cache_control" not in request.body
            last_block = request.body["messages"][-1]["content"][-1]
            assert last_block["cache_control"] == {"type": "ephemeral"}
    # It got the token as from Google's endpoint: a JWT signed with the account's key.
    [token_request] = vertex.token_requests
    assert token_request.body["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer"
    claims = verified_jwt(token_request.body["assertion"], service_account_key().public_key())
    assert claims["iss"] == "agents@project-test.iam.gserviceaccount.com"
    assert claims["aud"] == "https://oauth2.googleapis.com/token"  # whatever token_uri is
    assert claims["scope"] == "https://www.googleapis.com/auth/cloud-platform"
    # Chat Completions: no is_error field, so the text says it, as satsuma's own
    # failure texts already do.
    openai = runs["openai"]
    assert openai["received"][0].path == "/v1/chat/completions"
    assert openai["received"][0].headers["authorization"] == "Bearer test-key"
    assert openai["requests"][0]["model"] == "gpt-test"
    tool_messages = [m for m in openai["requests"][1]["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == [
        "Oslo: 14°C",
        "Error: Tool crashed: OSError: no forecast for Oslo",
        "Error: radar offline in Oslo",
        "Error: storm warning for Oslo",
    ]
    calls = openai["requests"][1]["messages"][-len(tool_messages) - 1]["tool_calls"]
    assert [m["tool_call_id"] for m in tool_messages] == [call["id"] for call in calls]


async def test_agents_naming_one_configuration_share_one_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with serving("openai", ["one", "two"], monkeypatch):
        models = []
        for prompt in ("a", "b"):
            async with satsuma.open_agent(OnOpenAI) as agent:
                assert (await agent.run(prompt)).status == "completed"
                models.append(agent.model)
        assert models[0] is models[1]
        # Another base URL is another configuration.
        monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
        other = await shared_model("forecaster", "openai:gpt-test")
        assert other is not models[0]
        # An Anthropic model string in the same run gets Anthropic's.
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        assert not isinstance(await shared_model("forecaster", "claude-test"), OpenAIModel)


async def test_an_openai_model_without_a_key_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigurationError) as caught:
        async with satsuma.open_agent(OnOpenAI):
            pass
    assert str(caught.value).startswith(
        "OPENAI_API_KEY is not set: agent 'forecaster' declares its model by name "
        "('openai:gpt-test') and needs an OpenAI API key"
    )


@pytest.mark.parametrize("url", ["localhost:8000/v1", "ftp://host/v1", "http://"])
async def test_a_base_url_that_is_not_one_is_a_clear_error(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    with pytest.raises(ConfigurationError, match="OPENAI_BASE_URL is not an http"):
        await shared_model("forecaster", "openai:gpt-test")


@pytest.mark.parametrize(
    ("model", "problem"),
    [
        ("openai:", "unknown model 'openai:': name the model after 'openai:'"),
        ("mistral:large", "unknown model 'mistral:large': unknown provider 'mistral'"),
        ("gpt-5", "unknown model 'gpt-5': use an alias"),
    ],
)
def test_a_model_string_naming_no_model_is_refused_at_declaration(model: str, problem: str) -> None:
    declared = model
    with pytest.raises(satsuma.AgentDefinitionError, match=problem):

        class Broken(satsuma.Agent):
            name = "broken"
            model = declared


async def test_bedrock_without_a_region_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key, value in AWS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_REGION")
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    with pytest.raises(ConfigurationError) as caught:
        async with satsuma.open_agent(OnBedrock):
            pass
    assert str(caught.value).startswith("no AWS region is set for agent 'forecaster'")
    assert "AWS_REGION" in caught.value.fix


@pytest.mark.parametrize(
    ("environment", "problem"),
    [
        ({}, "no AWS credentials were found for Claude on Bedrock"),
        ({"AWS_PROFILE": "nowhere"}, "the AWS profile 'nowhere' (AWS_PROFILE) is not configured"),
    ],
)
async def test_bedrock_without_credentials_is_a_clear_error(
    environment: dict[str, str], problem: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in {**AWS, **environment}.items():
        monkeypatch.setenv(key, value)
    # The metadata endpoint stays off (AWS_EC2_METADATA_DISABLED), so none is found.
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.delenv("AWS_BEARER_TOKEN_BEDROCK", raising=False)
    with pytest.raises(ConfigurationError) as caught:
        async with satsuma.open_agent(OnBedrock):
            pass
    assert str(caught.value).startswith(problem)


async def test_vertex_without_a_region_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CLOUD_ML_REGION", raising=False)
    with pytest.raises(ConfigurationError, match="CLOUD_ML_REGION is not set") as caught:
        await shared_model("forecaster", OnVertex.model)
    assert "ANTHROPIC_VERTEX_PROJECT_ID" in caught.value.fix


@pytest.mark.parametrize(
    ("agent", "module", "extra"),
    [
        (OnBedrock, "boto3", "bedrock"),
        (OnVertex, "google.auth", "vertex"),
        (OnOpenAI, "openai", "openai"),
    ],
)
async def test_a_provider_whose_extra_is_missing_names_it(
    agent: type[satsuma.Agent[Any]], module: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What importing it does where the package is not installed.
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(
        ConfigurationError, match=f"the {module} package is not installed"
    ) as caught:
        await shared_model(agent.name, agent.model)
    assert f'pip install "satsuma[{extra}]"' in caught.value.fix


@pytest.mark.parametrize(
    "failure",
    [
        Failure.stream_error("partial", after_events=3),
        Failure.cut_stream("partial", after_events=3),
        Failure.rate_limited(retry_after=0.01),
    ],
    ids=["exception-in-stream", "cut", "429"],
)
async def test_bedrock_streams_and_its_failures_are_retried(
    failure: Failure, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[Any] = []
    async with serving("bedrock", [failure, "Back."], monkeypatch) as server:
        model = await shared_model("forecaster", OnBedrock.model)
        model.backoff_base, model.jitter = 0.001, False
        async with satsuma.open_agent(OnBedrock) as agent:
            result = await agent.run("Hi", events=events.append)
    assert result.output == "Back."
    assert [event.attempt for event in events if isinstance(event, ModelRetry)] == [1]
    assert [request.path for request in server.received] == [
        "/model/anthropic.claude-test-v1:0/invoke-with-response-stream"
    ] * 2
    # Streamed: the text came in pieces as it was written.
    assert len([event for event in events if isinstance(event, TextDelta)]) > 1


def test_providers_sdks_load_only_when_a_model_of_theirs_is_built() -> None:
    # Declaring agents of every provider, and an Anthropic model, loads none of the
    # extras' packages: the default install stays small and fast to import.
    code = (
        "import sys, satsuma, satsuma.testing\n"
        "for name, model in [('a', 'openai:gpt-5'), ('b', 'bedrock:x'), ('v', 'vertex:y')]:\n"
        "    type(name, (satsuma.Agent,), {'name': name, 'model': model})\n"
        "satsuma.OpenAIModel, satsuma.testing.ChatCompletionsServer\n"
        "import anthropic; satsuma.AnthropicModel(anthropic.AsyncAnthropic(api_key='k'))\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'openai', 'boto3', 'botocore', 'google'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


async def test_a_vertex_model_string_builds_a_client_for_the_environments_project(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with serving("vertex", [], monkeypatch) as server:
        monkeypatch.setenv("CLOUD_ML_REGION", "europe-west1")
        monkeypatch.delenv("ANTHROPIC_VERTEX_BASE_URL")
        model = await shared_model("forecaster", OnVertex.model)
        assert isinstance(model, AnthropicModel)
        assert isinstance(model.client, anthropic.AsyncAnthropicVertex)
        assert (model.client.region, model.client.project_id) == ("europe-west1", "project-test")
        assert str(model.client.base_url) == "https://europe-west1-aiplatform.googleapis.com/v1/"
        # Its credentials were found, and their first token fetched, as it was built.
        assert model.client.credentials.token == server.access_tokens[0]
        # Another region is another configuration, with a client of its own.
        monkeypatch.setenv("CLOUD_ML_REGION", "global")
        assert (await shared_model("forecaster", OnVertex.model)).client is not model.client


async def test_vertex_agents_starting_together_fetch_one_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with serving("vertex", ["Hi."] * 6, monkeypatch) as server:

        async def run_one() -> None:
            async with satsuma.open_agent(OnVertex) as agent:
                assert (await agent.run("Hello")).output == "Hi."

        async with trio.open_nursery() as nursery:
            for _ in range(6):
                nursery.start_soon(run_one)
    assert len(server.received) == 6
    # The SDK alone fetches a token for each request that finds none: six here.
    assert server.access_tokens == ["ya29.loopback-1"]
    assert {request.headers["authorization"] for request in server.received} == {
        "Bearer ya29.loopback-1"
    }


async def test_vertex_without_credentials_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with serving("vertex", [], monkeypatch):
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/nonexistent/key.json")
        with pytest.raises(ConfigurationError) as caught:
            async with satsuma.open_agent(OnVertex):
                pass
    assert str(caught.value).startswith("no Google credentials were found for Claude on Vertex AI")
    assert "GOOGLE_APPLICATION_CREDENTIALS" in caught.value.fix
