"""LangChain's ChatOpenAI on the Responses API (`use_responses_api=True`): invoke, stream."""

import json
import os

from langchain_openai import ChatOpenAI

BASE, MODEL = os.environ["BASE"], os.environ["MODEL"]
responses = ChatOpenAI(model=MODEL, base_url=BASE, max_retries=0, use_responses_api=True)
out: dict[str, object] = {"responses_invoke": responses.invoke("Say hi").text}
out["responses_stream"] = len(list(responses.stream("Say hi")))
print(json.dumps(out))
