"""instructor: a structured answer extracted from chat completions in its default mode (tools)
and in JSON mode; prints one JSON line of what it extracted. Run with BASE, MODEL and
OPENAI_API_KEY."""

import json
import os

import instructor
from openai import OpenAI
from pydantic import BaseModel


class Greeting(BaseModel):
    text: str


BASE, MODEL = os.environ["BASE"], os.environ["MODEL"]
out = {}
for mode in (instructor.Mode.TOOLS, instructor.Mode.JSON):
    client = instructor.from_openai(OpenAI(base_url=BASE), mode=mode)
    try:
        got = client.chat.completions.create(
            model=MODEL,
            response_model=Greeting,
            messages=[{"role": "user", "content": "Say hi"}],
            max_retries=0,
        )
        out[mode.value] = got.text
    except Exception as e:  # what the stand-in answers is not the point: who asked is
        out[mode.value] = f"raised {type(e).__name__}"
print(json.dumps(out))
