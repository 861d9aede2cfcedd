"""The OpenAI Agents SDK: an agent with a function tool, run to its end and streamed."""

import asyncio
import json
import os

from agents import (
    Agent,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

set_tracing_disabled(True)  # tracing would export to api.openai.com
BASE, MODEL = os.environ["BASE"], os.environ["MODEL"]
client = AsyncOpenAI(base_url=BASE, max_retries=0)


@function_tool
def get_weather(city: str) -> str:
    """The current weather in a city."""
    return f"sunny in {city}"


agent = Agent(
    name="weather",
    instructions="Answer with the weather tool.",
    model=OpenAIResponsesModel(model=MODEL, openai_client=client),
    tools=[get_weather],
)


async def main() -> dict[str, object]:
    out: dict[str, object] = {}
    result = await Runner.run(agent, "What is the weather in Paris?", max_turns=3)
    out["final"] = result.final_output
    streamed = Runner.run_streamed(agent, "What is the weather in Rome?", max_turns=3)
    out["stream_events"] = len([e async for e in streamed.stream_events()])
    out["streamed_final"] = streamed.final_output
    return out


print(json.dumps(asyncio.run(main())))
