"""Op families: the optional groups of tensor ops that workflows need beyond the ``Backend`` core.

A family is an interface class here (``tensor_math.TensorMath``: one documented method per op)
and one module per framework, ``hookkit/backends/<framework>/<family>.py``, holding ``OPS``, an
instance of its implementation. Code outside ``backends/`` reaches it through
``backend_for(model).family("tensor_math")``; a framework without the module fails only in the
feature that needs it. Adding an op: declare it (with a docstring) on the interface, implement it
in each framework's module, test it through the feature that uses it.
"""
