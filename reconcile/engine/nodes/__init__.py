"""Node facts: the drift of each declared node, planned."""
