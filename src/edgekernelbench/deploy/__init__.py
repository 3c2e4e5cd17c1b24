"""`ekb deploy`: a model in, a verified deployable artifact out, built from the best known kernels.

    import edgekernelbench
    d = edgekernelbench.deploy("L3/dscnn_kws", backend="rpi4", out="deploy/kws-rpi4")
    d.verification["verified"]                      # checked against ONNX Runtime (qemu for rpi4)
    edgekernelbench.deploy.verify("deploy/kws-rpi4") # again, later

`edgekernelbench.deploy` is this package, and calling it calls `deploy()` (build.py): the package's module
object is callable, so `edgekernelbench.deploy(...)` works whether or not the package was imported before.
Nothing here imports TVM until a function runs.

- build.py: `deploy()` and its stages: request, decisions, graph, memory, artifact, verify
- decisions.py: the kernels' decisions: a run's best candidate whole (`--from`), the kernel database, a fresh
  tuning (tune.py), the rules, tvm-default; what of the run's candidate did not carry over (Carryover)
- memory.py: the Relax VM's static memory plan and the kernels' workspace; `--max-memory`
- write.py: the artifact's files (weights, model.so, run.py, the C program); size.py: their sizes per form
- cprogram.py: the model as a static C program (cross boards, and the host), timed and profiled
- verification.py: `verify()`: a fresh process (runtime only), the C program (natively or under qemu), a farm
  device; vs ONNX Runtime; latency (latency.py), the per-kernel profile (profile.py), the judged speedup
- timing.py: the host artifact timed end to end against tvm-default and ONNX Runtime (a fresh process)
- model.py: which model (suite problem, user problem, ONNX file), and an artifact's problem
- data/run.py: the artifact's runner (TVM runtime + NumPy only)
"""

from __future__ import annotations

import sys
import types


def deploy(model, backend="host-cpu", out=None, **kwargs):
    """Deploys a model (see build.deploy for the arguments); returns a build.Deployment."""
    from .build import deploy as _deploy

    return _deploy(model, backend, out, **kwargs)


def verify(folder, **kwargs) -> dict:
    """Verifies an artifact (see verification.verify); returns its report."""
    from .verification import verify as _verify

    return _verify(folder, **kwargs)


class _CallableModule(types.ModuleType):
    def __call__(self, model, backend="host-cpu", out=None, **kwargs):
        return deploy(model, backend, out, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
