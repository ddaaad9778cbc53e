"""The reference executor's own faults end the step with an error; they never hang it.

A fault inside ``ExecutorState.process`` (not a kernel's: ``_run_node`` turns those into the
step's error) is injected by replacing ``_propagate`` for one node. Before the fix the node
was never counted done, so ``run`` waited for ever.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import reference_runtime as rt
from reference_runtime import executor

GPU = "/device:GPU:0"
LIMIT_S = 20.0          # a generous bound on a loaded 2-core machine; the run takes ms


@pytest.mark.parametrize("faulty", ["c", "m", "last"])
def test_a_fault_in_process_ends_the_step_with_an_internal_error(monkeypatch, faulty) -> None:
    g = rt.Graph()
    g.add_node("c", "Const", device=GPU, value=np.ones((2, 2), np.float32))
    g.add_node("m", "MatMul", ["c", "c"], device=GPU)          # expensive: dispatched
    g.add_node("last", "Relu", ["m"], device=GPU)
    real = executor.ExecutorState._propagate

    def propagate(self, item, outputs):
        if item.name == faulty:
            raise RuntimeError(f"injected fault after {item.name}")
        return real(self, item, outputs)

    monkeypatch.setattr(executor.ExecutorState, "_propagate", propagate)
    outcome: list[BaseException | object] = []
    with rt.create_runtime(backend="sim", config_file=None, status_file=None) as ctx:
        session = ctx.new_session(g)

        def run() -> None:
            try:
                outcome.append(session.run(["last"]))
            except BaseException as exc:   # noqa: BLE001 - the outcome is the assertion
                outcome.append(exc)

        t = threading.Thread(target=run, daemon=True)
        t.start()
        t.join(LIMIT_S)
        assert not t.is_alive(), f"run() still waiting {LIMIT_S} s after a fault at {faulty}"
    (error,) = outcome
    assert isinstance(error, rt.UnknownError) and "internal executor error" in str(error), \
        f"run() ended with {error!r}"
