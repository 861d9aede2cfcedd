"""Render the HTML report: structure in `model`, presentation in `formatters`, html in `render`.

`render` holds the one jinja2 Environment."""
