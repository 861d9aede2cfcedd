"""pydantic-ai: an agent over chat completions and one over the Responses API, each run
once; prints one JSON line of what they answered. Run with BASE, MODEL and OPENAI_API_KEY."""

import json
import os

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider

BASE, MODEL = os.environ["BASE"], os.environ["MODEL"]
provider = OpenAIProvider(base_url=BASE)
out = {
    "chat": Agent(OpenAIChatModel(MODEL, provider=provider)).run_sync("Say hi").output,
    "responses": Agent(OpenAIResponsesModel(MODEL, provider=provider)).run_sync("Say hi").output,
}
print(json.dumps(out))
