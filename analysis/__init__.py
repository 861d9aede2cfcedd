"""wirediff analysis: the record format, tagging, loading and the comparison of exchanges."""

FORMAT = "wirediff/1"
