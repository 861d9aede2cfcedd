"""`wirediff replay --dry-run`: what would be sent where, and what not and why; sends nothing."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from wirediff._types import Record
from wirediff.record.redact import redact_url
from wirediff.replay.plan import Node, Plan
from wirediff.replay.request import Outgoing, prepare
from wirediff.replay.targets import Target

__all__ = ["describe", "dry_run"]


def describe(node: Node, out: Outgoing, plan: Plan) -> str:
    """One step: its order, the request, and the steps whose ids it waits for."""
    deps = ", ".join(
        f"{r.where}←#{plan.by_id[r.producer].order}" for r in node.refs if r.producer in plan.by_id
    )
    bits = [f"#{node.order:<3}", out.method, redact_url(out.url)]
    if out.model:
        bits.append(f"model={out.model}")
    if out.stream:
        bits.append("stream")
    if deps:
        bits.append(f"after {deps}")
    if not node.wanted:
        bits.append("(dependency)")
    return "  " + " ".join(bits) + f"  [{node.id}]"


def _key_source(target: Target, env: Mapping[str, str]) -> str:
    if target.api_key_env is None:
        return "no key"
    unset = "" if env.get(target.api_key_env) else " (NOT SET)"
    return f"key from ${target.api_key_env}{unset}"


def dry_run(
    plan: Plan,
    targets: Sequence[Target],
    done_of: Mapping[str, Mapping[str, Record | None]],
    env: Mapping[str, str],
    tried_of: Mapping[str, int],
) -> Iterator[str]:
    """Lines to print: per target, a summary, then each step still to do (`done_of`: what
    earlier runs recorded; `tried_of`: how many of the rest they tried without success)."""
    for t in targets:
        done = done_of[t.label]
        todo = [n for n in plan.nodes if n.id not in done]
        skipped = sum(1 for n in todo if n.skip)
        again = tried_of[t.label]
        tried = f" ({again} tried before)" if again else ""
        yield (
            f"replay → {t.label} ({t.shown}, {_key_source(t, env)}): "
            f"{len(todo) - skipped} to send, {skipped} to skip{tried}, "
            f"{len(done)} already replayed"
        )
        for n in todo:
            try:
                out = prepare(n.rec, t, None, {}, api_prefixes=n.api_prefixes)
            except Exception:  # malformed: `n.skip` says why
                out = Outgoing(str(n.rec["request"].get("method")), t.base, [], None, None, False)
            yield describe(n, out, plan)
            if n.skip is not None:
                yield f"      skip: {n.skip}"
            elif out.dropped:
                held = ", ".join(out.dropped)
                yield f"      not sent (the capture holds only a fingerprint): {held}"
