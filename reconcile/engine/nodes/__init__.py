"""Node facts: the drift of each declared node planned (plan.py) and written (apply.py)."""
