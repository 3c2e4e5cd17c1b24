"""Backends: where a candidate runs (the host CPU, a GPU, a cross-compiled board under qemu or over TVM RPC),
described by profiles (profiles.toml, a run's own, the user's) and resolved once at a command's edge."""

from ..exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "BackendProfile": ".base",
        "HostFacts": ".hostinfo",
        "as_profile": ".registry",
        "backend_names": ".registry",
        "get_profile": ".registry",
        "host_facts": ".hostinfo",
    },
)
