"""Render the HTML report: structure in `model`, presentation in `formatters`, html in `render`.

`render` holds the one jinja2 Environment."""

DEFAULT_MAX_EXAMPLES = 3
"""Examples kept with per-exchange detail for each folded finding, chain and alignment."""
