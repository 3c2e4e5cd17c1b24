"""Producer-side tools for agents: what the kernels of a problem are (names, workload keys, operator
classes), what a kernel looks like after some decisions, and the alternatives the offline proposer
generates for each layer of a kernel. Agents (edgekernelbench.agents) use these to make candidates; the
judge never sees this package."""
