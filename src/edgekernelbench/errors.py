"""Typed errors. The library raises these; the CLI turns each into one clear line."""


class EKBError(Exception):
    """Base class of every error the CLI reports as a one-line message."""


class UnknownProblem(EKBError):
    pass


class UnknownBackend(EKBError):
    pass


class MalformedCandidate(EKBError):
    pass


class DecisionError(EKBError):
    """A recorded decision that does not apply to the PrimFunc it is replayed on."""

    def __init__(self, func: str, layer: str, step: int, kind: str, detail: str):
        self.func, self.layer, self.step, self.kind, self.detail = func, layer, step, kind, detail
        super().__init__(
            f"decision does not apply: PrimFunc '{func}', {layer} layer, step {step} ({kind}): {detail}"
        )


class RunDirError(EKBError):
    pass


class ToolchainMissing(EKBError):
    pass


class SignatureMismatch(EKBError):
    """A candidate's functions do not take the arguments the problem passes."""
