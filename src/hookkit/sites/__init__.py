"""Sites: places inside a layer call where hookkit reads or writes a value.

``operations``: every operation of a layer's forward (a call, a binary operator) as a pseudo-layer
named ``"layer::op"`` that every verb takes where it takes a layer spec.
"""
