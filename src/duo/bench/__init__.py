"""Measuring tools: duo bench, duo sim, device costs and profiles, the llama.cpp peers."""
