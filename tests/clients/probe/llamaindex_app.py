"""LlamaIndex's OpenAILike (chat completions), the class for OpenAI-compatible servers:
complete, streamed chat, async chat."""

import asyncio
import json
import os

from llama_index.core.llms import ChatMessage
from llama_index.llms.openai_like import OpenAILike

BASE, MODEL = os.environ["BASE"], os.environ["MODEL"]
llm = OpenAILike(model=MODEL, api_base=BASE, is_chat_model=True, max_retries=0)

ask = [ChatMessage(role="user", content="Say hi")]
out = {"complete": llm.complete("Say hi").text}
out["stream_chat"] = "".join(r.delta or "" for r in llm.stream_chat(ask))
out["achat"] = asyncio.run(llm.achat(ask)).message.content
print(json.dumps(out))
