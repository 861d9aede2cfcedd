"""Print what `wirediff replay --dry-run` would send where, and what not and why."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from wirediff._types import Record
from wirediff.errors import PlanError
from wirediff.record.redact import redact_url
from wirediff.replay.plan import Node, Plan
from wirediff.replay.request import Outgoing, prepare
from wirediff.replay.targets import Target

__all__ = ["describe", "dry_run"]


def describe(node: Node, out: Outgoing, plan: Plan) -> str:
    """Describe one step: its order, the request, and the steps whose ids it waits for."""
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
    """Return the lines to print: per target, a summary, then each step still to do.

    `done_of` is what earlier runs recorded; `tried_of`, how many of the rest they tried without
    success."""
    for t in targets:
        done = done_of[t.label]
        steps = [(n, _step(n, t)) for n in plan.nodes if n.id not in done]
        skipped = sum(1 for _, (_, why) in steps if why is not None)
        again = tried_of[t.label]
        tried = f" ({again} tried before)" if again else ""
        yield (
            f"replay → {t.label} ({t.shown}, {_key_source(t, env)}): "
            f"{len(steps) - skipped} to send, {skipped} to skip{tried}, "
            f"{len(done)} already replayed"
        )
        for n, (out, why) in steps:
            yield describe(n, out, plan)
            if why is not None:
                yield f"      skip: {why}"
            elif out.dropped:
                held = ", ".join(out.dropped)
                yield f"      not sent (the capture holds only a fingerprint): {held}"


def _step(node: Node, target: Target) -> tuple[Outgoing, str | None]:
    """Say what `node` sends to `target`.

    When it is skipped: its method to the target's base URL, and why."""
    try:
        out = prepare(node.rec, target, None, {}, api_prefixes=node.api_prefixes)
    except PlanError as e:  # its path leaves the target
        why: str | None = str(e)
    except Exception:  # malformed: `node.skip` says why
        why = node.skip or "the captured request cannot be sent again"
    else:
        return out, node.skip
    method = str(node.rec["request"].get("method"))
    return Outgoing(method, target.base, [], None, None, False), why
