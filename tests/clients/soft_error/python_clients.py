"""What a Python client does with a soft error: a 200 whose JSON body is an error
(LM Studio's `{"error": "Unexpected endpoint or method. (POST /v1/responses)"}`).

Run in the client's venv with BASE, MODEL, OPENAI_API_KEY and CLIENT (`openai-python`,
`openai-agents`, `langchain`, `llamaindex`, `pydantic-ai`); prints one JSON object: for each
call, `raises <exception class>` or `returns <what>`.
"""

import asyncio
import json
import os
from collections.abc import Callable
from typing import Any

BASE, MODEL, CLIENT = os.environ["BASE"], os.environ["MODEL"], os.environ["CLIENT"]


def outcome(call: Callable[[], Any]) -> str:
    try:
        got = call()
    except Exception as e:  # what the application meets is the point
        return f"raises {type(e).__name__}"
    if got is None or got == "" or got == []:
        return f"returns {got!r}"
    return f"returns a {type(got).__name__}"


def openai_python() -> dict[str, str]:
    import openai

    client = openai.OpenAI(base_url=BASE, max_retries=0)
    return {
        "responses.create": outcome(lambda: client.responses.create(model=MODEL, input="Hi")),
        "responses.create().output_text": outcome(
            lambda: client.responses.create(model=MODEL, input="Hi").output_text
        ),
        "responses.create(stream=True)": outcome(
            lambda: list(client.responses.create(model=MODEL, input="Hi", stream=True))
        ),
    }


def openai_agents() -> dict[str, str]:
    from agents import Agent, OpenAIResponsesModel, Runner, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)

    def agent() -> Agent:  # a client of the running event loop: one per call
        client = AsyncOpenAI(base_url=BASE, max_retries=0)
        model = OpenAIResponsesModel(model=MODEL, openai_client=client)
        return Agent(name="a", instructions="Answer.", model=model)

    async def run() -> Any:
        return (await Runner.run(agent(), "Hi", max_turns=1)).final_output

    async def streamed() -> Any:
        going = Runner.run_streamed(agent(), "Hi", max_turns=1)
        return [e async for e in going.stream_events()] and going.final_output

    return {
        "Runner.run": outcome(lambda: asyncio.run(run())),
        "Runner.run_streamed": outcome(lambda: asyncio.run(streamed())),
    }


def langchain() -> dict[str, str]:
    from langchain_openai import ChatOpenAI

    chat = ChatOpenAI(model=MODEL, base_url=BASE, use_responses_api=True, max_retries=0)
    return {
        "ChatOpenAI(use_responses_api=True).invoke": outcome(lambda: chat.invoke("Hi").text),
        "ChatOpenAI(use_responses_api=True).stream": outcome(
            lambda: "".join(c.text for c in chat.stream("Hi"))
        ),
    }


def llamaindex() -> dict[str, str]:
    from llama_index.core.llms import ChatMessage
    from llama_index.llms.openai import OpenAIResponses

    llm = OpenAIResponses(model="gpt-4o-mini", api_base=BASE, max_retries=0)
    ask = [ChatMessage(role="user", content="Hi")]
    return {
        "OpenAIResponses.chat": outcome(lambda: llm.chat(ask).message.content),
        "OpenAIResponses.stream_chat": outcome(
            lambda: "".join(r.delta or "" for r in llm.stream_chat(ask))
        ),
    }


def pydantic_ai() -> dict[str, str]:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    def agent() -> Agent:
        return Agent(OpenAIResponsesModel(MODEL, provider=OpenAIProvider(base_url=BASE)))

    async def streamed() -> Any:
        async with agent().run_stream("Hi") as run:
            return "".join([piece async for piece in run.stream_text(delta=True)])

    return {
        "Agent(OpenAIResponsesModel).run_sync": outcome(lambda: agent().run_sync("Hi").output),
        "Agent(OpenAIResponsesModel).run_stream": outcome(lambda: asyncio.run(streamed())),
    }


RUN = {
    "openai-python": openai_python,
    "openai-agents": openai_agents,
    "langchain": langchain,
    "llamaindex": llamaindex,
    "pydantic-ai": pydantic_ai,
}
print(json.dumps(RUN[CLIENT]()))
