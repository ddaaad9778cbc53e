"""Workers the suite ships for black-box certification (SPEC.md, WORKER clauses).

A worker trains a small model with the implementation under test and speaks the worker
protocol on its standard output; it implements none of the runtime's behaviour itself.

- ``python -m conformance.workers.tf_worker``: a TensorFlow build (stock or a fork), graph
  mode through ``tf.compat.v1`` sessions.

Workers import only the standard library, NumPy and their framework, so that they run under
the interpreter of the build under test.
"""
