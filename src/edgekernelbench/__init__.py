"""EdgeKernelBench: a benchmark and deployment framework for edge kernels on Apache TVM."""

__version__ = "0.1.0"


def __getattr__(name: str):
    """`edgekernelbench.deploy(...)`: the deploy package, imported on first use (its module is callable), so
    `import edgekernelbench` stays light."""
    if name == "deploy":
        import importlib

        return importlib.import_module(".deploy", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
