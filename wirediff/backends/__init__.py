"""Serve stand-in OpenAI-compatible servers for the demo and the tests.

`plan` decides what to answer from the request, `payloads` shapes it as each provider
profile does, `server` speaks HTTP and `standin` starts and stops one
(`from wirediff.backends.standin import standin`).
"""
