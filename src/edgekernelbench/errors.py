"""Typed errors. The library raises these; the CLI turns each into one clear line."""


def last_line(e: BaseException, limit: int = 1000, with_type: bool = True) -> str:
    """An exception in one line: its type and the last non-empty line of its message (TVM's errors
    end with the message after a long traceback), cut at `limit` characters."""
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    if not with_type:
        return lines[-1][:limit] if lines else type(e).__name__
    return f"{type(e).__name__}: {lines[-1] if lines else ''}"[:limit]


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


class ReportError(EKBError):
    """A report that cannot be made: runs with no problem in common, a file that cannot be written."""


class SignatureMismatch(EKBError):
    """A candidate's functions do not take the arguments the problem passes."""


class ForbiddenConstruct(EKBError):
    """A candidate's IR uses a construct the judge does not build (harness/verify.py): a call outside
    the module (extern, packed, a non-listed intrinsic or Relax operator), a raw pointer, a buffer
    view larger than its storage, ... `func`: the PrimFunc or Relax function; `construct`: what."""

    def __init__(self, kind: str, func: str, construct: str):
        self.kind, self.func, self.construct = kind, func, construct
        super().__init__(f"{kind} {func}: {construct}" if func else construct)
