"""Interventions: hooks that change what flows. Each acts through the router at INTERVENTION priority,
so observers on the same layer see the changed value; each returns a handle that removes it."""

# -- regularization, DropHookModel, clipping (issue 6, part 1) --
# -- masking, pruning, patching, steering, early stop (issue 6, part 2) --
