"""The llama.cpp adapter: the only code that loads llama-cpp-python; RPC; default models."""
