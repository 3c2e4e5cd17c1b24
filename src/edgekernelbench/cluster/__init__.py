"""Judging beyond one machine, on Ray (docs/cluster.md): a session (session.py), the cores a node claims
for timing (cores.py), secrets kept from the workers (environ.py), the driver's loop that runs every item
once whatever happens to the workers (pool.py), the tasks a worker runs (tasks.py: one judgment; agents.py:
one agent episode), and the agents' model calls made by the driver (mailbox.py)."""
