"""`python -m edgekernelbench.cli ...`: the same as `ekb ...`."""

from edgekernelbench.cli import entry

if __name__ == "__main__":
    entry()
