"""duo: asynchronous, distributed speculative decoding on llama.cpp."""

__version__ = "0.1.0"
