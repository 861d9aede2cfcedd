"""The `wirediff/1` record format: the exchange model, the record builder, SSE splitting, tags,
redaction, persistence and import. No pandas: the capture addon imports only this layer."""
