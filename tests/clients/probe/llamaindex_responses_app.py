"""LlamaIndex's OpenAIResponses (the Responses API): chat, streamed chat."""

import json
import os

from llama_index.core.llms import ChatMessage
from llama_index.llms.openai import OpenAIResponses

BASE, MODEL = os.environ["BASE"], os.environ["MODEL"]
responses = OpenAIResponses(model=MODEL, api_base=BASE, max_retries=0)

ask = [ChatMessage(role="user", content="Say hi")]
out = {"responses_chat": responses.chat(ask).message.content}
out["responses_stream"] = "".join(r.delta or "" for r in responses.stream_chat(ask))
print(json.dumps(out))
