"""List the known clients in the order the readiness rows show them.

How their captures are described comes from `data/clients.yaml`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from wirediff._types import Record

__all__ = ["CLIENT_NAMES", "captured_line"]

CLIENT_NAMES = {
    "codex": "Codex CLI",
    "openai-agents": "OpenAI Agents SDK",
    "vercel-ai": "Vercel AI SDK",
    "vercel-ai-chat": "Vercel AI SDK, openai.chat()",
    "langchain": "LangChain",
    "langchain-responses": "LangChain, use_responses_api",
    "llamaindex": "LlamaIndex",
    "llamaindex-responses": "LlamaIndex, OpenAIResponses",
    "openai-python": "openai-python",
    "openai-python-websocket": "openai-python, WebSocket mode",
    "openai-node": "openai-node",
}
"""Client id, its workload's name → the name a readiness row shows.

A client as it comes, then a mode an app opts into, named as the app asks for it."""


def sdk_of(record: Record) -> dict[str, Any]:
    """Return the record's `tags.sdk`: who sent it, `{}` when nothing said."""
    tags = record.get("tags")
    sdk = tags.get("sdk") if isinstance(tags, dict) else None
    return dict(sdk) if isinstance(sdk, dict) else {}


def captured_line(records: Iterable[Record]) -> str:
    """Say what a client's needs were derived from: `12 calls, as OpenAI/Python 2.54.0`."""
    records = list(records)
    agents = sorted({str(sdk_of(r).get("user_agent") or "?") for r in records})
    shown = ", ".join(a.split(" (", 1)[0] for a in agents)
    return f"{len(records)} call{'s' if len(records) != 1 else ''}, as {shown}"
