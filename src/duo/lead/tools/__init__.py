"""Tool calling: the calls in a model's text, and the grammar that forces them."""
