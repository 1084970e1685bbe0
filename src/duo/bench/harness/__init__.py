"""`duo bench`: the modes side by side (suite), their runners, the llama.cpp peers and
servers, concurrent clients and workloads, device costs, reports and plots."""
