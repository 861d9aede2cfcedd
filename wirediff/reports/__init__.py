"""The HTML report: structure (model), presentation (formatters), html (one jinja2 Environment)."""
