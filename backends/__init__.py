"""Stand-in OpenAI-compatible servers for the demo and the tests."""
