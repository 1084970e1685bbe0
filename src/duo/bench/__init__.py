"""Measuring tools, in layers: net (a link with a delay, another network namespace) and sim
(the simulator, its traces, device profiles and projections) at the bottom; harness
(duo bench: the modes, their runners, the llama.cpp peers, clients, reports) over both;
replay (a workload's answers through the lookups and policy) beside them. variants (the
names of the modes' variants) is shared by harness and sim."""
