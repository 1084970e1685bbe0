"""The simulator (sim) and what it reads: acceptance traces (trace), device profiles
(profiles), and its projections against duo bench and the seeds (projections)."""
