"""LangChain's ChatOpenAI as it comes (chat completions): invoke, stream, tools, structured
output, async."""

import asyncio
import json
import os

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import BaseModel

BASE, MODEL = os.environ["BASE"], os.environ["MODEL"]
chat = ChatOpenAI(model=MODEL, base_url=BASE, max_retries=0)


@tool
def get_weather(city: str) -> str:
    """The current weather in a city."""
    return f"sunny in {city}"


class City(BaseModel):
    name: str
    country: str
    population: int


out: dict[str, object] = {"invoke": chat.invoke("Say hi").content}
out["stream"] = "".join(str(c.content) for c in chat.stream("Say hi"))
called = chat.bind_tools([get_weather], tool_choice="get_weather").invoke("Weather in Paris?")
out["tool_calls"] = [c["name"] for c in called.tool_calls]
try:
    out["structured"] = chat.with_structured_output(City).invoke("Describe Paris.") is not None
except Exception as e:
    out["structured"] = type(e).__name__
out["ainvoke"] = asyncio.run(chat.ainvoke("Say hi")).content
print(json.dumps(out))
