"""Secrets stay with the driver: no API key reaches a cluster's worker.

Ray's workers inherit the environment of the process that started their node (the raylet), and their
children inherit theirs. So:

- a local instance (`ekb eval --jobs N`) is started with the secrets taken out of this process's
  environment for the moment `ray.init` starts it (`without_secrets`);
- `ekb cluster start` runs `ray start` in an environment without them (`clean_environ`);
- every task strips whatever secrets its worker's environment still holds before it does anything
  (`strip_secrets`: a node someone started by hand with keys in their shell), and says which it found, so
  the driver can warn.

A secret is a variable whose name says it holds one (API_KEY, TOKEN, SECRET, PASSWORD, CREDENTIAL, ...);
Ray's own settings (RAY_*) are kept: its processes need them. The agents' model calls are made by the
driver (cluster/mailbox.py), which keeps the keys; the judge's processes get an allow-listed environment
anyway (harness/isolation.ENV_ALLOW)."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Mapping

SECRET_RE = re.compile(
    r"API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|PRIVATE_KEY|ACCESS_KEY|AUTH", re.IGNORECASE
)
KEPT_RE = re.compile(r"^RAY_")


def secret_names(env: Mapping[str, str] | None = None) -> list[str]:
    """The names of the variables of `env` (default: this process's) that hold secrets, sorted."""
    env = os.environ if env is None else env
    return sorted(k for k in env if SECRET_RE.search(k) and not KEPT_RE.match(k))


def clean_environ(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) without its secrets."""
    env = dict(os.environ if env is None else env)
    for k in secret_names(env):
        del env[k]
    return env


def strip_secrets() -> tuple[str, ...]:
    """Removes the secrets from this process's environment (a worker's, before its task runs); returns
    their names."""
    names = tuple(secret_names())
    for k in names:
        os.environ.pop(k, None)
    return names


@contextlib.contextmanager
def without_secrets() -> Iterator[tuple[str, ...]]:
    """This process's environment without its secrets for the block (the processes started in it do not get
    them); restored after it."""
    saved = {k: os.environ.pop(k) for k in secret_names() if k in os.environ}
    try:
        yield tuple(saved)
    finally:
        os.environ.update(saved)
