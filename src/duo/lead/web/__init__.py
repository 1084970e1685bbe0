"""The lead's web page and its live events feed."""
