"""openai-python's WebSocket mode (`client.responses.connect()`): one turn of the Responses
API over a WebSocket. Run with BASE, OPENAI_API_KEY and MODEL set."""

import json
import os

import openai

BASE, MODEL = os.environ["BASE"], os.environ["MODEL"]
client = openai.OpenAI(base_url=BASE, max_retries=0)
out: dict[str, list[str]] = {"websocket_events": []}
with client.responses.connect(websocket_connection_options={"proxy": None}) as conn:
    conn.response.create(model=MODEL, input="Say hi")
    for event in conn:
        out["websocket_events"].append(event.type)
        if event.type in ("response.completed", "response.failed", "error"):
            break
print(json.dumps(out))
