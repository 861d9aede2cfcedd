"""openai-python (sync, async and streaming) over HTTP: every call an app makes that the
probe sends (its WebSocket mode is openai_python_websocket.py).

Run with BASE (the SDK's base_url), OPENAI_API_KEY and MODEL set; prints one JSON line of
what it got. A call the stand-in answers with an error is what the probe needs of it: the
request, not the answer (the bad parameter, the unknown route, the wrong method, the bad key).
"""

import asyncio
import json
import os

import httpx
import openai
from pydantic import BaseModel

BASE, MODEL = os.environ["BASE"], os.environ["MODEL"]
client = openai.OpenAI(base_url=BASE, max_retries=0)
ask = [{"role": "user", "content": "Say hi"}]


def tool(name: str, description: str) -> dict[str, object]:
    """A strict function tool taking a city."""
    parameters = {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    }
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": parameters,
            "strict": True,
        },
    }


weather = tool("get_weather", "The current weather in a city.")
clock = tool("get_time", "The local time in a city.")


class City(BaseModel):
    name: str
    country: str
    population: int


out: dict[str, object] = {}
out["models"] = [m.id for m in client.models.list()]
out["chat"] = client.chat.completions.create(model=MODEL, messages=ask).choices[0].message.content
out["chat_chunks"] = sum(
    1 for _ in client.chat.completions.create(model=MODEL, messages=ask, stream=True)
)
both = client.chat.completions.create(
    model=MODEL,
    messages=[
        {
            "role": "user",
            "content": "What are the weather and the local time in Paris? Call both tools.",
        }
    ],
    tools=[weather, clock],
    tool_choice="required",
    parallel_tool_calls=True,
)
out["parallel_calls"] = len(both.choices[0].message.tool_calls or [])
try:
    parsed = client.chat.completions.parse(
        model=MODEL,
        messages=[{"role": "user", "content": "Describe Paris as a city record."}],
        response_format=City,
    )
    out["chat_parsed"] = parsed.choices[0].message.parsed is not None
except Exception as e:  # a server that does not honour the schema: the SDK raises
    out["chat_parsed"] = type(e).__name__
try:
    client.chat.completions.create(model=MODEL, messages=ask, temperature=5)
    out["bad_parameter"] = "accepted"
except openai.APIStatusError as e:
    out["bad_parameter"] = e.status_code
first = client.responses.create(model=MODEL, input="My name is Ada. Say hi.")
second = client.responses.create(
    model=MODEL, input="What is my name?", previous_response_id=first.id
)
out["previous_response"] = second.output_text
try:
    city = client.responses.parse(
        model=MODEL, input="Describe Paris as a city record.", text_format=City
    )
    out["responses_parsed"] = city.output_parsed is not None
except Exception as e:
    out["responses_parsed"] = type(e).__name__
try:
    vectors = client.embeddings.create(model="text-embedding-3-small", input="Say hi")
    out["embedding"] = len(vectors.data[0].embedding)
except openai.APIStatusError as e:
    out["embedding"] = e.status_code


async def streamed_tool_call() -> int:
    async with openai.AsyncOpenAI(base_url=BASE, max_retries=0) as aclient:
        stream = await aclient.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "What is the weather in Paris?"}],
            tools=[weather],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            stream=True,
        )
        chunks = 0
        async for _ in stream:
            chunks += 1
        return chunks


out["streamed_tool_chunks"] = asyncio.run(streamed_tool_call())
for name, call in (
    ("unknown_route", lambda: client.get("/wirediff/no-such-route", cast_to=httpx.Response)),
    ("wrong_method", lambda: client.get("/chat/completions", cast_to=httpx.Response)),
    (
        "bad_key",
        lambda: openai.OpenAI(
            base_url=BASE, api_key="sk-wirediff-probe-not-a-valid-key", max_retries=0
        ).models.list(),
    ),
):
    try:
        call()
        out[name] = "answered"
    except openai.APIStatusError as e:
        out[name] = e.status_code
print(json.dumps(out))
