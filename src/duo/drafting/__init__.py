"""Drafting: the drafter state machine, its worker thread, and the in-process draft sources."""
