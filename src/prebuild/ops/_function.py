"""The public functions' way into a differentiable kernel: an autograd.Function per op and
namespace with the op's own registered formula (its ``setup_context`` and ``backward``).

Calling the op itself reaches the same formula through ``torch.library.register_autograd``,
which is what direct calls of ``torch.ops.prebuild.*`` (and ``opcheck``) use. That path
rebuilds the op's defaulted arguments from its schema at every call (``fill_defaults``: about
50 us per call for a 14-argument op, a tenth of a small rasterization step's host time) and
enters Python twice. Here the kernel is called below autograd directly (in eager mode; under
torch.compile, dynamo traces the plain op call with its fake kernel).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from prebuild.ops._library import for_each_namespace, namespace

_functions: dict[tuple[str, str], type[torch.autograd.Function]] = {}


def differentiable(name: str, setup_context: Callable, backward: Callable) -> None:
    """Registers, for every op namespace, a Function running ``name`` with the formula
    ``setup_context(ctx, inputs, output)``, ``backward(ops, ctx, *grads)``."""

    @for_each_namespace
    def _register(ns: str) -> None:
        def forward(*args):
            op = getattr(getattr(torch.ops, ns), name).default
            if torch.compiler.is_compiling():
                return op(*args)
            with torch._C._AutoDispatchBelowAutograd():
                return op(*args)

        _functions[ns, name] = type(
            f"{ns}_{name}",
            (torch.autograd.Function,),
            {
                "forward": staticmethod(forward),
                "setup_context": staticmethod(setup_context),
                "backward": staticmethod(
                    lambda ctx, *grads: backward(getattr(torch.ops, ns), ctx, *grads)
                ),
            },
        )


def call(name: str, *args):
    """``kernels().<name>(*args)`` through its Function (see ``differentiable``)."""
    return _functions[namespace(), name].apply(*args)
