"""The core: the round loop, verification, drafts, policy, sampling, stops, statistics (no I/O)."""
