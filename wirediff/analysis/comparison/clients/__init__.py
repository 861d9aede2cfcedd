"""Drive the real client code an app runs on an answer, on recorded bytes.

`asked` reads what a request asks of its answer, that is the tools and their schemas and the
structured-output schema, and judges values against it; `python` drives openai-python on a
recorded answer, `node` the npm `openai` package in one Node process per analysis; `observations`
holds what both report, observations and failures, and the recorded answer served again.
`wirediff.analysis.comparison.impact` runs them once per answer skeleton.
"""
