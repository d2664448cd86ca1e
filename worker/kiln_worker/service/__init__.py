"""The worker's JSON-lines service: the request loop and its methods (server.py),
and strict JSON for the answers (jsonsafe.py)."""
