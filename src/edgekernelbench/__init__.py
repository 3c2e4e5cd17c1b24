"""EdgeKernelBench: a benchmark and deployment framework for edge kernels on Apache TVM."""

__version__ = "0.1.0"
