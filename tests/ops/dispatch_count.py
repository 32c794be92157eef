"""The ops a call dispatches below autograd (what becomes kernel launches on a GPU), recorded by
a TorchDispatchMode: for tests that hold an op's host path to a fixed, short list."""

from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode


class DispatchedOps(TorchDispatchMode):
    """``with DispatchedOps() as d: ...``; then ``d.ops``: each op's name, in call order."""

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func._schema.name)  # "aten::div": the op, not its overload
        return func(*args, **(kwargs or {}))
