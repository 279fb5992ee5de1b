"""The fuzz driver: campaigns, failing-case artifacts and replay, the config gate, self-test, reports."""
