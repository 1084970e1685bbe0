"""The engine thread: generation jobs in slots, the Lead that queues them, metrics."""
