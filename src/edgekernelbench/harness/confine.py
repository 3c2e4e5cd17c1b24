"""Runs a command that may write only beneath some directories:

    python -m edgekernelbench.harness.confine --write DIR [--write DIR ...] -- COMMAND [ARG ...]

Applies Landlock (harness/sandbox.py) to itself -- read and execute everywhere, write only beneath the
given directories (and /dev/null, /dev/zero) -- then execs COMMAND, which keeps that restriction, as do its
children. For an external coding agent (agents/cli_agent.py): it needs its own installation, its network
and its API key, but its workspace is the only place it can write. Where the kernel has no Landlock the
command runs unconfined, and the first line on stderr says so."""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="edgekernelbench.harness.confine")
    ap.add_argument("--write", action="append", default=[], help="a directory the command may write beneath")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("no command")
    from .sandbox import DEVICES_RW, restrict_self

    abi = restrict_self(["/"], [*args.write, *DEVICES_RW])
    if abi < 1:
        print("confine: Landlock is not available: the command is not confined", file=sys.stderr, flush=True)
    os.execvp(cmd[0], cmd)
    return 127


def confine_command(write_dirs: list[str], argv: list[str]) -> list[str]:
    """The command line that runs `argv` able to write only beneath `write_dirs`."""
    return [
        sys.executable,
        "-m",
        "edgekernelbench.harness.confine",
        *(f"--write={d}" for d in write_dirs),
        "--",
        *argv,
    ]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
