"""torch.compile and hookkit's hooks (the policy; docs/training.md explains it to users).

- dynamo never traces hookkit's own code (its package is on dynamo's skip list): a hooked layer is
  a graph break where the router runs eagerly, so its per-call counters never become guards that
  recompile every step, and what hookkit records equals eager;
- dynamo guards on module hook dicts (``skip_nnmodule_hook_guards = False``): a hook placed or
  removed after compiling takes effect at the next call (one recompile), never silently nothing;
- code compiled before hookkit's torch backend was first used has no such guards: it is dropped
  once (``torch.compiler.reset()``), with a warning, when hookkit first places a hook.
"""

from __future__ import annotations

import warnings

import torch

_stale = [False]


def prepare() -> None:
    """Called once, when hookkit's torch backend is created."""
    import torch._dynamo
    from torch._dynamo import trace_rules
    from torch._dynamo.utils import counters

    trace_rules.add("hookkit")
    torch._dynamo.config.skip_nnmodule_hook_guards = False
    _stale[0] = counters["frames"]["ok"] > 0 or counters["stats"]["unique_graphs"] > 0


def forget_stale_code() -> None:
    """Drop code compiled before hookkit could make dynamo guard on hooks (once per process)."""
    if _stale[0]:
        _stale[0] = False
        warnings.warn(
            "hookkit: code compiled with torch.compile before hookkit was first used does not check for hooks; "
            "hookkit reset torch.compile's caches so that its hooks take effect (one recompilation). "
            "Use hookkit once before compiling to avoid this.",
            RuntimeWarning,
            stacklevel=4,
        )
        torch.compiler.reset()
