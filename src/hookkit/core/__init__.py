"""The framework-free core: ``select`` (layer specs -> layers), ``router`` (one native hook per
layer and event, consumers in priority order), ``handles``, ``tree`` (nested outputs), ``errors``.
Nothing here imports a framework or asks which one it runs on: that is ``hookkit.backends``."""
