"""LlamaIndex's OpenAILike and OpenAIResponses: complete, chat, streamed, async."""

import asyncio
import json
import os

from llama_index.core.llms import ChatMessage
from llama_index.llms.openai import OpenAIResponses
from llama_index.llms.openai_like import OpenAILike

BASE, MODEL = os.environ["BASE"], os.environ["MODEL"]
llm = OpenAILike(model=MODEL, api_base=BASE, is_chat_model=True, max_retries=0)
responses = OpenAIResponses(model=MODEL, api_base=BASE, max_retries=0)

ask = [ChatMessage(role="user", content="Say hi")]
out = {"complete": llm.complete("Say hi").text}
out["stream_chat"] = "".join(r.delta or "" for r in llm.stream_chat(ask))
out["responses_chat"] = responses.chat(ask).message.content
out["responses_stream"] = "".join(r.delta or "" for r in responses.stream_chat(ask))
out["achat"] = asyncio.run(llm.achat(ask)).message.content
print(json.dumps(out))
