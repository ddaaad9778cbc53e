"""The conformance suite: certifies an implementation of the runtime against SPEC.md.

Tests reach the implementation only through the ``rt`` fixture (the runtime module chosen
with ``--runtime`` or ``ANTMAN_RUNTIME``) and the public API that SPEC.md defines.
"""
