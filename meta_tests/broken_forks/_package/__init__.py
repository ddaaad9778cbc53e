"""Submodules every broken fork has, as a fork shipped as its own package would (API-1).

``broken_forks.as_package(name)`` makes this folder the ``__path__`` of a fork module, so
``python -m <fork>.worker`` and ``python -m <fork>.workload`` import the fork first (which
applies its patch to the reference runtime) and then run the reference's worker or workload
with the patch in force. Nothing here is imported as ``_package`` itself.
"""
