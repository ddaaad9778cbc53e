"""Adapters: third-party allocator implementations exposed as runtime modules of the suite.

Each subpackage wraps another project's code behind SPEC.md's runtime API (API-1..3) so that
``pytest conformance --runtime adapters.<name>`` certifies that code. They are not part of the
reference runtime: each says at its top what it wraps, which version, and what it cannot offer.
"""
