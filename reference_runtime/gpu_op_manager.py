"""GpuOpManager: idle slots before GPU kernel launches while throttled (SPEC.md, OPM).

AntMan's ``ExecutorState::AsyncGPUOpManager``. While a step is throttled (the estimated idle
time E of GPUResourceManagement is positive and perfControl is below 100), the executor
queues every kernel placed on a GPU instead of launching it; this manager's thread
(``antman-gpu-op-manager-...``) launches them first in, first out, and waits an idle slot
of ``floor(E / N)`` µs **before** each launch, where N is the number of the step's GPU ops
not launched yet (this one included). A slot is device idle time: before a non-zero slot the
manager drains the step's GPUs (``drain``: the backend's ``synchronize``), so that kernels
launched earlier do not run through the slot (OPM-8; AntMan's slots overlap them, D-OPM-12).
What is deducted from E is the idle time the slot really took, the drain excluded, measured on the injected clock (a real sleep oversleeps), so that the
throttle's arithmetic sees the idle time actually inserted. Waits go through the injected
clock and are interrupted by ``abort``/``shutdown``; the thread blocks on a condition (no
polling) while the queue is empty. A slot that raises (the drain, an RM call) fails the step
and its op is not launched (OPM-8). Ops queued by the manager thread itself (the GPU
consumers of the op it launched) need no wake-up: the loop takes them next.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass
from typing import Any, Callable

from .clock import Clock

__all__ = ["GpuOpManager", "QueuedOp", "THREAD_NAME_PREFIX"]

THREAD_NAME_PREFIX = "antman-gpu-op-manager"


@dataclass(frozen=True)
class QueuedOp:
    """A GPU op waiting for its launch: ``launch()`` runs it, ``skip()`` retires it unrun,
    ``fail(exc)`` fails the step with what its idle slot raised and retires it unrun (OPM-8)."""

    name: str
    launch: Callable[[], None]
    skip: Callable[[], None]
    fail: Callable[[BaseException], None]


class GpuOpManager:
    """One step's op manager: a FIFO of queued GPU ops and the thread that launches them."""

    def __init__(self, resource_management: Any, *, num_ops: int, clock: Clock,
                 drain: Callable[[], None] | None, label: str) -> None:
        self._rm = resource_management
        self._drain = drain                       # waits for the step's GPUs (OPM-8)
        self._clock = clock
        # GPU ops of the step not launched yet (OPM-4): each GPU node is queued once and has
        # at most one idle slot, so it is at least 1 at every slot
        self._remaining = int(num_ops)
        self._cv = threading.Condition()
        self._queue: collections.deque[QueuedOp] = collections.deque()
        self._cancel = threading.Event()          # interrupts an idle slot in progress
        self._terminate = False
        self._aborted = False
        self.num_queued = 0                       # ops queued so far in this step
        # Not a daemon, as the session's pool threads are not: the end of the step joins it
        # (OPM-6), and a daemon thread still in a kernel at interpreter shutdown is stopped
        # wherever it is, a device call included.
        self._thread = threading.Thread(target=self._run,
                                        name=f"{THREAD_NAME_PREFIX}-{label}")
        self._thread.start()

    def enqueue(self, op: QueuedOp) -> None:
        """Queue ``op`` behind the ops already queued (FIFO)."""
        with self._cv:
            self._queue.append(op)
            self.num_queued += 1
            self._cv.notify()                     # a no-op unless the thread is waiting

    def abort(self) -> None:
        """The step failed: wake an idle slot in progress; queued ops are retired unrun."""
        with self._cv:
            self._aborted = True
            self._cancel.set()
            self._cv.notify()

    def shutdown(self) -> None:
        """Stop the thread (TF ``Finish``): wake it, and join it unless called from it."""
        with self._cv:
            self._terminate = True
            self._cancel.set()
            self._cv.notify()
        self.join()

    def join(self) -> None:
        """Join the thread; a no-op on the manager thread itself (it exits on its own)."""
        if threading.current_thread() is not self._thread:
            self._thread.join()

    # -- the thread -----------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._queue and not self._terminate:
                    self._cv.wait()
                if not self._queue:
                    return
                op = self._queue.popleft()
            try:
                if not self._aborted:
                    self._idle_slot()
                if self._aborted:
                    op.skip()
                else:
                    op.launch()
            except BaseException as exc:  # the slot's drain or an RM call raised (OPM-8);
                op.fail(exc)              # launch and skip never raise: the step gets errors

    def _idle_slot(self) -> None:
        """Wait the idle slot ``E // N`` before a launch; deduct the idle time it took (OPM-4)."""
        n = self._remaining
        self._remaining -= 1
        slot = int(self._rm.get_estimated_idle_time()) // n
        if slot <= 0:
            return
        if self._drain is not None:
            self._drain()                        # the slot starts on idle GPUs (OPM-8)
        start = self._clock.now_us()
        self._clock.sleep_us(slot, self._cancel)
        spent = int(self._clock.now_us()) - start        # now_us never decreases (API-4)
        self._rm.spend_idle_time(spent)          # deducted from E, counted as idle (RM-14)
