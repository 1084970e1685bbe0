"""The lead service: jobs and the engine thread, the HTTP API, metrics, the RPC supervisor."""
