"""Rewrite OpenAPI 3.0 leftovers in a 3.1 document as the JSON Schema 2020-12 they mean.

The document declares 3.1 but still says `nullable: true` in 101 schemas, without which every
chat chunk with `finish_reason: null` fails; `allOf: [X, {nullable: true}]`; boolean
`exclusiveMinimum`; and `$recursiveRef`. A 2020-12 validator would ignore them silently. Each
schema object is remembered with its pointer into the original document, so a finding points at
the spec text a person reads.
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["Normalised", "normalise", "pointer_part"]

_CHILD_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_CHILD_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_CHILD = (
    "items",
    "additionalProperties",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
)


def pointer_part(part: Any) -> str:
    return str(part).replace("~", "~0").replace("/", "~1")


class Normalised:
    """Hold the rewritten document; `origin` maps each schema object, by id, to its pointer."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.origin: dict[int, str] = {}
        self.nullable_wrappers: set[int] = set()
        self._made: list[Any] = []  # synthetic schemas stay alive, so their ids stay unique
        self.doc = copy.deepcopy(doc)
        schemas = self.doc["components"]["schemas"]
        for name in list(schemas):
            ptr = f"#/components/schemas/{pointer_part(name)}"
            schemas[name] = self._schema(schemas[name], ptr, name)

    def _schema(self, node: Any, ptr: str, top: str) -> Any:
        if not isinstance(node, dict):
            return node
        self._nullable_member(node)
        for kw in _CHILD_MAPS:
            if isinstance(node.get(kw), dict):
                for k, v in list(node[kw].items()):
                    node[kw][k] = self._schema(v, f"{ptr}/{kw}/{pointer_part(k)}", top)
        for kw in _CHILD_LISTS:
            if isinstance(node.get(kw), list):
                node[kw] = [self._schema(v, f"{ptr}/{kw}/{i}", top) for i, v in enumerate(node[kw])]
        for kw in _CHILD:
            if isinstance(node.get(kw), dict):
                node[kw] = self._schema(node[kw], f"{ptr}/{kw}", top)
        for exclusive, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            if isinstance(node.get(exclusive), bool) and node.pop(exclusive) and bound in node:
                node[exclusive] = node.pop(bound)
        if "$recursiveRef" in node:
            node.pop("$recursiveRef")
            node["$ref"] = f"#/components/schemas/{pointer_part(top)}"
        self.origin[id(node)] = ptr
        if node.pop("nullable", None) is True:
            null = {"type": "null"}
            wrapper = {"anyOf": [node, null]}
            self.origin[id(null)] = f"{ptr}/nullable"
            self.origin[id(wrapper)] = ptr
            self.nullable_wrappers.add(id(wrapper))
            self._made += [wrapper, null]
            return wrapper
        return node

    @staticmethod
    def _nullable_member(node: dict[str, Any]) -> None:
        """Turn `allOf: [X, {nullable: true}]` into a nullable schema.

        That is the 3.0 way to say "X or null"."""
        members = node.get("allOf")
        if not isinstance(members, list):
            return
        kept = [
            m
            for m in members
            if not (
                isinstance(m, dict)
                and m.get("nullable") is True
                and not set(m) - {"nullable", "description", "title"}
            )
        ]
        if len(kept) != len(members):
            node["allOf"] = kept
            node["nullable"] = True


def normalise(doc: dict[str, Any]) -> Normalised:
    return Normalised(doc)
