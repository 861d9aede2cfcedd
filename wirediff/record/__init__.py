"""Define the `wirediff/1` record format and everything that makes and keeps records.

That is the exchange model, the record builder, SSE splitting, tags, redaction, persistence and
import. No pandas: the capture addon imports only this layer."""
