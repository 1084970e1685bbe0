"""Network emulation for duo bench: a link with a delay (link) and a host in another
network namespace (netns)."""
