"""llama.cpp's native API: /completion and /infill, in llama-server's shapes."""
