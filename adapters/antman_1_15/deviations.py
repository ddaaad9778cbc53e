"""The deviations of SPEC.md section 8, each a switch that restores AntMan 1.15's behaviour.

Every entry of SPEC.md section 8 (``D-RM-3``, ...) is a ``Deviation``: the clauses the entry
names, what AntMan 1.15 does, and the text patches that make the adapter's copy of the
reference runtime behave that way. A switch that is on (the default) applies its patches;
``ANTMAN_1_15_OFF="D-RM-3,D-FL-1"`` turns switches off (``all`` turns every one off, which
gives the reference runtime's behaviour). An entry AntMan's behaviour cannot be shown for
through the public API says why (``unobservable``); one the adapter does not reproduce says
why (``not_implemented``).

A patch is ``(module, old, new)``: ``old`` must occur exactly once in the reference module's
source as patched by the switches before it (in this list's order), so a patch that no
longer applies fails loudly at import.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Mapping

__all__ = ["Deviation", "DEVIATIONS", "BY_ID", "OFF_ENV_VAR", "switches_from_env",
           "active_patches"]

OFF_ENV_VAR = "ANTMAN_1_15_OFF"


@dataclass(frozen=True)
class Deviation:
    id: str
    clauses: tuple[str, ...]
    antman: str                                   # what AntMan 1.15 does, in one sentence
    patches: tuple[tuple[str, str, str], ...] = ()
    unobservable: str | None = None               # why no test through the API can see it
    not_implemented: str | None = None            # why the adapter does not reproduce it
    bounded: str | None = None                    # how a hang or abort is bounded here
    modules: tuple[str, ...] = field(default=())  # conformance modules that observe it
    #: clauses beyond ``clauses`` that AntMan's behaviour truly breaks too, with the reason
    also: Mapping[str, str] = field(default_factory=dict)


_FUTURE = "from __future__ import annotations\n"


def _imports(module: str, line: str) -> tuple[str, str, str]:
    return (module, _FUTURE, _FUTURE + line + "\n")


VMEM, BFC, RETRY = "gpu_vmem_allocator", "bfc_allocator", "allocator_retry"
ADJ, RM, FL = "gpu_adjustable_allocator", "gpu_resource_management", "file_listener"
STAT, REG, SESS = "gpu_statistics", "session_run_action_registry", "direct_session"
EXEC, OPM, ENV, DEV = "executor", "gpu_op_manager", "env", "device"

DEVIATIONS: tuple[Deviation, ...] = (
    # -- API ---------------------------------------------------------------------------------
    Deviation("D-API-1", ("API-8",),
              "a path is a C string: a NUL ends it, and another file is watched or written",
              ((ENV, '    if b"\\0" in encoded:\n'
                     '        raise ValueError(f"{what} {path!r} contains a NUL character")\n',
                     '    if b"\\0" in encoded:                 # AntMan: the C string ends here\n'
                     '        path = os.fsdecode(encoded.split(b"\\0", 1)[0])\n'),),
              modules=("conformance/test_file_listener_faults.py",
                       "conformance/test_resource_management_faults.py")),
    # -- ENV, BFC, VMEM, ADJ ---------------------------------------------------------------------
    Deviation("D-VMEM-1", ("VMEM-9",),
              "the VMem lock is held through the host allocation and its 10 s retry, so frees "
              "through the allocator block and the retry cannot succeed",
              ((VMEM, "import logging\n", "import logging\nimport threading\n"),
               (VMEM, "        self._device_ptrs: set[int] = set()\n",
                      "        self._device_ptrs: set[int] = set()\n"
                      "        self._lock = threading.RLock()      # AntMan: one lock, held throughout\n"),
               (VMEM, "        try:\n"
                      "            self._device_ptrs.remove(ptr)         # atomic: of two frees of ptr, one wins\n"
                      "        except KeyError:\n"
                      "            self._host_call(\"deallocate_raw\", ptr)\n"
                      "            return\n"
                      "        self._device.deallocate_raw(ptr)\n",
                      "        with self._lock:                    # AntMan: frees wait for the lock\n"
                      "            if ptr not in self._device_ptrs:\n"
                      "                self._host_call(\"deallocate_raw\", ptr)\n"
                      "                return\n"
                      "            self._device_ptrs.remove(ptr)\n"
                      "            self._device.deallocate_raw(ptr)\n"),
               (VMEM, "        return self._host.allocate_raw(alignment, num_bytes, attributes)\n",
                      "        with self._lock:                    # AntMan: the retry waits under the lock\n"
                      "            return self._host.allocate_raw(alignment, num_bytes, attributes)\n")),
              modules=("conformance/test_vmem.py",)),
    Deviation("D-BFC-1", ("BFC-10",),
              "the backpedal loop never ends when RoundedBytes(0.9 x size) == size and the "
              "sub-allocator keeps refusing",
              (_imports(BFC, "from .guards import SPIN_LIMIT, AntManGuardError"),
               (BFC, "            self._started_backpedal = True   # only once per allocator lifetime\n",
                     "            self._started_backpedal = True   # only once per allocator lifetime\n"
                     "            spins = 0\n"),
               (BFC, "                if smaller < rounded or smaller >= size:  # D-BFC-1: stop when not shrinking\n"
                     "                    break\n",
                     "                if smaller < rounded:           # AntMan (TF 1.15): no check that it shrinks\n"
                     "                    break\n"
                     "                spins += 1\n"
                     "                if spins > SPIN_LIMIT:\n"
                     "                    raise AntManGuardError(\n"
                     "                        f\"AntMan 1.15 (TF 1.15) loops for ever here: the backpedal from \"\n"
                     "                        f\"{size} bytes no longer shrinks and the sub-allocator keeps \"\n"
                     "                        f\"refusing ({spins} attempts)\")\n")),
              bounded="the loop gives up with AntManGuardError after 10 000 refused attempts of "
                      "the same size",
              modules=("conformance/test_bfc.py",)),
    Deviation("D-ADJ-1", ("ADJ-5",),
              "GetMemPoolStats walks the regions without the BFC lock, racing with Extend",
              ((ADJ, "        with bfc._lock:\n            pool = stable = 0\n",
                     "        if True:                                # AntMan: no BFC lock\n"
                     "            pool = stable = 0\n"),),
              modules=("conformance/test_adjustable.py",)),
    Deviation("D-ADJ-2", ("ADJ-3",),
              "FreeEmptyMemory never returns the chunk handles of released regions (one "
              "leaked Chunk per region)",
              ((BFC, "    def _adj_release_region(self, ptr: int) -> None:\n",
                     "    def _adj_release_region(self, ptr: int) -> None:\n"
                     "        # AntMan: the region's chunk handle is never deleted (leaked)\n"
                     "        self.__dict__.setdefault(\"_leaked_chunk_handles\", []).append(self._chunks[ptr])\n"),),
              unobservable="a leaked chunk handle holds host memory of the allocator only; no "
                           "figure of the API (stats, memory map, pool) counts it"),
    Deviation("D-ADJ-3", ("ADJ-3",),
              "FreeEmptyMemory returns true (1 as size_t) when the target equals the pool",
              ((ADJ, "        to_free = pool - target\n        if to_free <= 0:\n            return pool\n",
                     "        to_free = pool - target\n"
                     "        if to_free == 0:\n"
                     "            return 1                            # AntMan: `return true` as size_t\n"
                     "        if to_free < 0:\n"
                     "            return pool\n"),),
              modules=("conformance/test_adjustable.py",)),
    Deviation("D-ADJ-4", ("ADJ-6",),
              "a negative limit converts to a huge size_t",
              ((ADJ, "        new_limit = _check_limit(new_limit, \"GPUAdjustableAllocator.adjust_memory_limit: new_limit\")\n",
                     "        if isinstance(new_limit, int) and not isinstance(new_limit, bool) and new_limit < 0:\n"
                     "            new_limit &= (1 << 64) - 1          # AntMan: size_t\n"
                     "        new_limit = _check_limit(new_limit, \"GPUAdjustableAllocator.adjust_memory_limit: new_limit\")\n"),
               (ADJ, "        target = _check_limit(target, \"GPUAdjustableAllocator.free_empty_memory: target\")\n",
                     "        if isinstance(target, int) and not isinstance(target, bool) and target < 0:\n"
                     "            target &= (1 << 64) - 1             # AntMan: size_t\n"
                     "        target = _check_limit(target, \"GPUAdjustableAllocator.free_empty_memory: target\")\n")),
              modules=("conformance/test_adjustable.py",)),
    Deviation("D-VMEM-2", ("VMEM-7",),
              "a pointer unknown to both sides goes to the host BFC, whose CHECK aborts the "
              "process",
              (_imports(VMEM, "from .guards import AntManGuardError"),
               (VMEM, "            shown = f\"{ptr:#x}\" if isinstance(ptr, int) else repr(ptr)\n"
                      "            raise InvalidPointerError(\n",
                      "            shown = f\"{ptr:#x}\" if isinstance(ptr, int) else repr(ptr)\n"
                      "            raise AntManGuardError(         # AntMan: CHECK failure, abort()\n")),
              bounded="the abort is an AntManGuardError (not an InvalidPointerError)",
              modules=("conformance/test_vmem.py",)),
    Deviation("D-VMEM-3", ("VMEM-2",),
              "a negative TF_CUDA_HOST_MEM_LIMIT_IN_MB becomes a huge size_t (no host limit), "
              "and a value above 2^43-1 overflows",
              ((VMEM, "    if mb < 0 or mb * (1 << 20) > INT64_MAX:\n",
                      "    if False:                                   # AntMan: no range check\n"),
               (VMEM, "    return mb * (1 << 20)\n",
                      "    return (mb * (1 << 20)) & ((1 << 64) - 1)   # AntMan: wraps as size_t\n")),
              modules=("conformance/test_vmem.py",)),
    Deviation("D-BFC-2", ("BFC-1", "VMEM-3"),
              "a request above 2^64-256 rounds to 0 and is served from any free chunk; a "
              "negative size wraps to a huge size_t",
              ((BFC, "            num_bytes = check_size(num_bytes, f\"{self._name}.allocate_raw num_bytes\")\n"
                     "            if num_bytes == 0 or num_bytes > MAX_SIZE_T:\n",
                     "            if isinstance(num_bytes, Integral) and not isinstance(num_bytes, bool) \\\n"
                     "                    and num_bytes < 0:              # AntMan: size_t wraps\n"
                     "                num_bytes = int(num_bytes) & MAX_SIZE_T\n"
                     "                if num_bytes > self._memory_limit:  # its 10 s retry: None (at once here)\n"
                     "                    return None\n"
                     "            num_bytes = check_size(num_bytes, f\"{self._name}.allocate_raw num_bytes\")\n"
                     "            if num_bytes == 0 or num_bytes > MAX_SIZE_T:\n"),
               (BFC, "        rounded = (num_bytes + 255) & ~255\n        bins = self._bins\n"
                     "        if chunk is None:\n            b = (rounded >> 8).bit_length() - 1\n",
                     "        rounded = ((num_bytes + 255) & ~255) & MAX_SIZE_T   # AntMan: RoundedBytes wraps\n"
                     "        bins = self._bins\n"
                     "        if chunk is None:\n            b = max((rounded >> 8).bit_length() - 1, 0)\n"),
               (BFC, "        if size >= rounded * 2 or size - rounded >= K_MAX_INTERNAL_FRAGMENTATION:\n",
                     "        if rounded and (size >= rounded * 2 or size - rounded >= K_MAX_INTERNAL_FRAGMENTATION):\n")),
              modules=("conformance/test_bfc.py", "conformance/test_vmem.py")),
    Deviation("D-BFC-3", ("BFC-6", "BFC-15"),
              "an unknown pointer or a double free CHECK-fails (aborts the process)",
              (_imports(BFC, "from .guards import AntManGuardError as _CheckFailed"),
               (BFC, "                raise InvalidPointerError(self._bad_pointer(\"deallocate_raw\", ptr, c))\n",
                     "                raise _CheckFailed(\"Check failed (AntMan 1.15 aborts the process): \"\n"
                     "                                   + self._bad_pointer(\"deallocate_raw\", ptr, c))\n"),
               (BFC, "            raise InvalidPointerError(self._bad_pointer(what, ptr, None))\n",
                     "            raise _CheckFailed(\"Check failed (AntMan 1.15 aborts the process): \"\n"
                     "                               + self._bad_pointer(what, ptr, None))\n")),
              bounded="the abort is an AntManGuardError (not an InvalidPointerError)",
              modules=("conformance/test_bfc.py",),
              also={"BFC-5": "the coalescing test queries a pointer that merged into its "
                             "neighbour; the abort is an untagged failure of both its clauses"}),
    Deviation("D-BFC-4", ("BFC-12",),
              "AllocatorRetry waits in whole milliseconds and misses a NotifyDealloc that "
              "comes between a failed attempt and the wait",
              ((RETRY, "                with self._mu:\n"
                       "                    event = self._event\n"
                       "                ptr = alloc_func(False)\n",
                       "                ptr = alloc_func(False)\n"),
               (RETRY, "                    clock.wait(event, deadline - now)\n",
                       "                    with self._mu:              # AntMan: a free before this is missed\n"
                       "                        event = self._event\n"
                       "                    ms = (deadline - now) // 1000   # AntMan: whole milliseconds\n"
                       "                    clock.wait(event, ms * 1000 if ms else deadline - now)\n")),
              modules=("conformance/test_bfc.py",)),
    Deviation("D-BFC-5", ("BFC-8",),
              "with total_memory == 0 the next region size is 0 and doubling it never ends "
              "once the limit is raised",
              (_imports(BFC, "from .guards import AntManGuardError"),
               (BFC, "        if self._curr_region_bytes == 0:\n"
                     "            self._curr_region_bytes = K_MIN_ALLOCATION_SIZE  # D-BFC-5: 0 never doubles\n",
                     "        if self._curr_region_bytes == 0 and rounded > 0:\n"
                     "            raise AntManGuardError(\"AntMan 1.15 (TF 1.15) loops for ever here: the \"\n"
                     "                                   \"next region size is 0 and doubling it never \"\n"
                     "                                   f\"reaches {rounded} bytes\")\n"),),
              bounded="the endless doubling is an AntManGuardError at once",
              modules=("conformance/test_adjustable.py",),
              also={"ADJ-2": "the abort is an untagged failure of the test, which raises the "
                             "limit (ADJ-2) to grow the pool"}),
    # -- CLK, REG, FL, RM, STAT, DEVICE ------------------------------------------------------------
    Deviation("D-CLK-1", ("CLK-2", "CLK-3", "RM-12", "RM-16"),
              "the throttle sleeps with usleep, which close() cannot interrupt",
              (_imports(RM, "from .guards import LateEvent"),
               (RM, "            if self._clock.sleep_us(sleep_us, self._closed):\n",
                    "            if self._clock.sleep_us(sleep_us, LateEvent(self._closed)):  # AntMan: usleep\n")),
              bounded="the sleep ends 8 s of real time after close() instead of never; the "
                      "suspension busy loop is D-RM-9's",
              modules=("conformance/test_clock.py", "conformance/test_resource_management.py"),
              also={"API-10": "close() of the runtime context cannot end a throttle sleep that "
                             "usleep holds, so it waits for it, which API-10 forbids"}),
    Deviation("D-REG-1", ("REG-8",),
              "the registry has no locking and a run iterates the live map, so an action "
              "registered during a run runs in it",
              ((REG, "        for _, action in snapshot:\n            action.run_action(options)\n",
                     "        regs = self._groups[_grouping(grouping)]   # AntMan: the live std::map\n"
                     "        p = None\n"
                     "        while True:                         # an iterator: later phases added now are seen\n"
                     "            later = [q for q, _ in regs if p is None or q > p]\n"
                     "            if not later:\n"
                     "                break\n"
                     "            p, i = min(later), 0\n"
                     "            while True:                         # the live vector of phase p\n"
                     "                actions = [a for q, a in regs if q == p]   # read again once\n"
                     "                if i >= len(actions):          # its end is reached: what\n"
                     "                    break                      # was appended runs too\n"
                     "                while i < len(actions):\n"
                     "                    actions[i].run_action(options)\n"
                     "                    i += 1\n"),),
              modules=("conformance/test_session_run_actions.py",)),
    Deviation("D-FL-1", ("FL-6", "FL-7"),
              "handlers run under the listener's lock, so a handler that (un)registers "
              "deadlocks",
              ((FL, "            try:\n                callback(content)\n",
                    "            try:\n"
                    "                with self._lock:                # AntMan: under the listener's lock\n"
                    "                    callback(content)\n"),),
              bounded="the deadlocked monitor thread is a daemon; the suite's bounded waits and "
                      "per-test timeout end the test",
              modules=("conformance/test_file_listener.py",),
              also={"FL-5": "a registration's start-up handler runs under the listener's lock, "
                            "which the monitor thread's next check takes to list the paths, so a "
                            "handler that blocks holds up the checks of every other path",
                    "FL-11": "a close() from a handler takes the listener's lock, which the "
                             "monitor thread holds while that handler runs: the close deadlocks "
                             "instead of ending the round"}),
    Deviation("D-FL-2", ("FL-3",),
              "change detection by mtime/size: a touch (identical content, new mtime) fires",
              ((FL, "            if st.st_size > self.max_file_bytes:\n",
                    "            touched = sig != watch.signature    # AntMan: a new mtime is a change\n"
                    "            if st.st_size > self.max_file_bytes:\n"),
               (FL, "        if digest == watch.delivered:\n",
                    "        if digest == watch.delivered and not touched:\n")),
              modules=("conformance/test_file_listener.py",),
              also={"FL-4": "a file deleted and re-created with the same content has a new "
                           "modification time over content already delivered: the same spurious "
                           "delivery, seen by FL-4's re-creation check"}),
    Deviation("D-FL-3", ("FL-5",),
              "the start-up content is delivered by the monitor thread's first scan, not by "
              "the registration",
              ((FL, "        if created:\n"
                    "            with watch.scan_lock:\n"
                    "                content = self._read_if_changed(watch)\n"
                    "                if content is not None:\n"
                    "                    self._deliver(watch, content)\n",
                    "        # AntMan: the content waits for the monitor thread's next scan\n"),
               (FL, "        while not self._clock.wait(stop, self.poll_interval_us):\n",
                    "        first = True                            # AntMan: the first scan at once\n"
                    "        while first or not self._clock.wait(stop, self.poll_interval_us):\n"
                    "            first = False\n")),
              modules=("conformance/test_file_listener.py",),
              also={"FL-6": "a path a handler registers is delivered by the next scan, not "
                            "before register_file_listener returns, so the handler test of "
                            "FL-6 sees nothing delivered"}),
    Deviation("D-FL-4", ("FL-9",),
              "a failed load consumes the change, non-regular files are opened, raw bytes are "
              "handed over, and there is no size cap",
              ((FL, "        if not stat_module.S_ISREG(st.st_mode):\n"
                    "            self._problem(watch, f\"not a regular file ({_kind(st.st_mode)})\")\n"
                    "            watch.signature = None\n"
                    "            return None\n",
                    "        # AntMan: any file type is opened\n"),
               (FL, "            if not stat_module.S_ISREG(st.st_mode):\n"
                    "                watch.signature = None\n",
                    "            if False:                            # AntMan: any file type is read\n"
                    "                watch.signature = None\n"),
               (FL, "            if st.st_size > self.max_file_bytes:\n",
                    "            if False:                            # AntMan: no size cap\n"),
               (FL, "        if len(data) > self.max_file_bytes:\n",
                    "        if False:                                # AntMan: no size cap\n"),
               (FL, "        left = self.max_file_bytes + 1\n",
                    "        left = 1 << 62                           # AntMan: no size cap\n"),
               (FL, "            watch.signature = None\n"
                    "            self._problem(watch, f\"cannot read ({exc.strerror or exc})\")\n",
                    "            watch.signature = _signature(st)     # AntMan: the change is consumed\n"
                    "            self._problem(watch, f\"cannot read ({exc.strerror or exc})\")\n"),
               (FL, "            content = data.decode(\"utf-8\")\n",
                    "            content = data.decode(\"utf-8\", \"surrogateescape\")   # AntMan: raw bytes\n")),
              modules=("conformance/test_file_listener.py",
                       "conformance/test_file_listener_faults.py"),
              also={"FL-13": "a FIFO at the path is opened and read, so it is delivered (as "
                             "empty content) instead of refused"}),
    Deviation("D-FL-5", ("FL-12",),
              "stopping the monitor thread joins it however long it takes",
              (_imports(FL, "from .guards import GUARD_S"),
               (FL, "            t.join(max(0.0, deadline - time.monotonic()))\n",
                    "            t.join(GUARD_S)                     # AntMan: join() without a bound\n")),
              bounded="the join gives up after 8 s of real time instead of never",
              modules=("conformance/test_file_listener.py",
                       "conformance/test_file_listener_faults.py"),
              also={"RM-16": "the runtime context's close() closes its listener, so it waits "
                             "for the handler as long as the listener's close does"}),
    Deviation("D-FL-6", ("FL-13",),
              "the path is stat'ed, then opened and read with blocking calls: a FIFO swapped "
              "in stops the thread for good",
              ((FL, "_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC",
                    "_OPEN_FLAGS = os.O_RDONLY | os.O_NOCTTY | os.O_CLOEXEC   # AntMan: blocking"),
               (FL, "            st = os.fstat(fd)\n",
                    "            pass                                 # AntMan: checked on the path only\n")),
              bounded="a monitor thread blocked in open() is a daemon and close() stops waiting "
                      "for it after 2 s",
              modules=("conformance/test_file_listener_faults.py",)),
    Deviation("D-RM-1", ("RM-4", "RM-6"),
              "the perfControl range check never fires and the uint64 is truncated to int",
              (_imports(RM, "from .original import c_int"),
               (RM, "            return _uint(value, \"perfControl\", 100)\n",
                    "            return c_int(_uint(value, \"perfControl\", UINT64_MAX))   # AntMan: no range check\n")),
              modules=("conformance/test_resource_management.py",
                       "conformance/test_resource_management_faults.py"),
              also={"RM-5": "perfControl 2^32, truncated to an int, is 0: the job suspends on a "
                           "bad input, which RM-5 forbids"}),
    Deviation("D-RM-2", ("RM-11",),
              "returning to perfControl 100 never resets the estimated idle time and the slot",
              ((RM, "        if perf >= 100:\n",
                    "        if perf >= 100:\n"
                    "            return 0                            # AntMan: E and S are kept\n"),),
              modules=("conformance/test_resource_management.py",)),
    Deviation("D-RM-3", ("RM-13",),
              "gpu_perf_control_ is read again for the division: 0 in between raises SIGFPE",
              (_imports(RM, "from .original import sigfpe"),
               (RM, "            total_time = actual_run * 100 // perf\n",
                    "            total_time = actual_run * 100 // (self._perf or sigfpe())   # AntMan: read again\n")),
              bounded="SIGFPE is an AntManGuardError raised from the step",
              modules=("conformance/test_resource_management.py",)),
    Deviation("D-RM-4", ("RM-5",),
              "a root, gpuConfigInfo or entry that is not an object aborts the process "
              "(jsoncpp assertion)",
              (_imports(RM, "from .original import jsoncpp_abort"),
               (RM, "        if not isinstance(doc, dict):\n",
                    "        if not isinstance(doc, dict):\n"
                    "            jsoncpp_abort(f\"the root ({_describe(doc)})\")\n"),
               (RM, "            problems.add(f\"gpuConfigInfo: is {_describe(info)}, not an object\")\n",
                    "            jsoncpp_abort(f\"gpuConfigInfo ({_describe(info)})\")\n"),
               (RM, "                problems.add(f\"{where}: is {_describe(entry)}, not an object\")\n",
                    "                jsoncpp_abort(f\"{where} ({_describe(entry)})\")\n")),
              bounded="the abort is an AntManGuardError raised in the handler (logged by the "
                      "listener) or by parse_manage_info_from_json",
              also={"RM-4": "the wrong-type tests also check the values RM-4 accepts; the "
                            "abort stops them (an untagged failure)",
                    "RM-6": "likewise for perfControl's values (RM-6)",
                    "RM-21": "a root that is a string aborts before anything is logged"},
              modules=("conformance/test_resource_management.py",
                       "conformance/test_resource_management_faults.py")),
    Deviation("D-RM-5", ("RM-9",),
              "a shrink that falls short is never retried until the config content changes",
              ((RM, "                if outcome is AdjustOutcome.FELL_SHORT:\n",
                    "                if False:                       # AntMan: no retry\n"),),
              modules=("conformance/test_resource_management.py",)),
    Deviation("D-RM-6", ("RM-7",),
              "on any new gpuConfigInfo every limit ever seen is re-applied",
              ((RM, "            if perf is not None and perf != self._perf:\n",
                    "            if doc.get(\"gpuConfigInfo\") is not None:   # AntMan: all limits again\n"
                    "                self._pending.update(self._limits)\n"
                    "            if perf is not None and perf != self._perf:\n"),),
              unobservable="re-applying a limit that was reached is a no-op of "
                           "GPUUsageAdjustment (its cached limit equals it, RM-8), and one "
                           "that was not reached is retried at every boundary anyway (RM-9): "
                           "nothing the API shows changes"),
    Deviation("D-RM-7", ("RM-2",),
              "the handler looks the action up in the registry, which at start-up does not "
              "hold it yet: the start-up config is dropped until the file changes",
              ((RM, "            self._listener.register_file_listener(self.config_file, FILE_LISTENER_NAME,\n",
                    "            # AntMan: the first delivery finds no action in the registry yet\n"
                    "            self._startup_lookup_fails = os.path.exists(self.config_file)\n"
                    "            self._listener.register_file_listener(self.config_file, FILE_LISTENER_NAME,\n"),
               (RM, "    def _on_config_changed(self, content: str) -> None:\n",
                    "    def _on_config_changed(self, content: str) -> None:\n"
                    "        if getattr(self, \"_startup_lookup_fails\", False):\n"
                    "            self._startup_lookup_fails = False\n"
                    "            print(\"Cannot get the instance of GPUResourceManagement\")\n"
                    "            return\n")),
              modules=("conformance/test_resource_management.py", "conformance/test_clock.py",
                       "conformance/test_session.py", "conformance/test_worker_protocol.py"),
              also={c: "the test writes its config (perfControl 0) before the runtime starts, "
                       "and AntMan drops the start-up content"
                    for c in ("CLK-2", "RM-1")}
              | {"WORKER-2": "AntMan prints \"Cannot get the instance of "
                             "GPUResourceManagement\" on standard output, which the worker "
                             "protocol reserves for its records, so a worker started with a "
                             "config file breaks the protocol in every worker test"}
              | {"RM-4": "the tests that arrange perfControl 0 through a start-up config find "
                         "the default 100 in force, which their arrangement's check (the value "
                         "given is the value read, RM-4) cannot tell from a misread value",
                 "RM-10": "the close-during-sleep test's start-up perfControl 10 is dropped, so "
                          "no step sleeps where RM-10 is checked"}),
    Deviation("D-RM-8", ("RM-5",),
              "jsoncpp's Reader accepts text after the root value",
              ((RM, "from .bounded_json import loads as bounded_loads\n",
                    "from .bounded_json import loads as _bounded_loads\n"
                    "from .original import jsoncpp_reader\n"
                    "bounded_loads = jsoncpp_reader(_bounded_loads)   # AntMan: text after the root is ignored\n"),),
              modules=("conformance/test_resource_management.py",
                       "conformance/test_resource_management_faults.py")),
    Deviation("D-RM-9", ("RM-12",),
              "suspension busy-polls every 100 us and only a non-zero perfControl ends it",
              (_imports(RM, "from .guards import AntManGuardError, LateEvent, WhenEvent"),
               (RM, "            while self._perf == 0 and not self._closed.is_set() \\\n"
                    "                    and not getattr(session, \"closed\", False):\n"
                    "                self._clock.wait(wake, SUSPEND_RECHECK_US)\n"
                    "                wake.clear()\n",
                    "            ended = WhenEvent(lambda: self._closed.is_set()   # close() or a closed\n"
                    "                              or getattr(session, \"closed\", False))  # session\n"
                    "            late = LateEvent(ended)             # seen inside the clock wait too\n"
                    "            while self._perf == 0:             # AntMan: usleep(100) until perf != 0\n"
                    "                if late.is_set():\n"
                    "                    raise AntManGuardError(\"AntMan 1.15 stays suspended for ever: only \"\n"
                    "                                           \"a non-zero perfControl ends the suspension\")\n"
                    "                self._clock.wait(late, 100)\n")),
              bounded="a suspension that close() or a closed session ends in the specification "
                      "raises AntManGuardError 8 s of real time later instead of never ending",
              modules=("conformance/test_resource_management.py",)),
    Deviation("D-RM-10", ("RM-4",),
              "integral doubles are judged in double precision",
              (_imports(RM, "from .original import jsoncpp_double_uint"),
               (RM, "    m = _NUMBER_PARTS.fullmatch(value.text)\n",
                    "    try:\n"
                    "        as_double = jsoncpp_double_uint(value.text)   # AntMan: a double\n"
                    "    except ValueError:\n"
                    "        raise _Reject(f\"{what} is {value}, not a uint64\") from None\n"
                    "    if as_double is not None:\n"
                    "        if as_double > upper:\n"
                    "            raise _Reject(f\"{what} is {value}, above the maximum {upper}\")\n"
                    "        return as_double\n"
                    "    m = _NUMBER_PARTS.fullmatch(value.text)\n")),
              modules=("conformance/test_resource_management.py",
                       "conformance/test_resource_management_faults.py"),
              also={"RM-19": "a number is a double, so an exponent beyond its range reads as "
                             "0 or infinity instead of the literal's exact value"}),
    Deviation("D-RM-11", ("RM-10", "RM-11"),
              "the post-step usleep oversleeps and nothing accounts for it",
              ((RM, "                sleep_us = max(total_time - d - FIXED_COST_US - self._oversleep_us, 0)\n",
                    "                sleep_us = max(total_time - d - FIXED_COST_US, 0)   # AntMan\n"),),
              modules=("conformance/test_resource_management.py",)),
    Deviation("D-RM-12", ("RM-10", "RM-14", "OPM-4"),
              "E = S = sleep after every throttled step, so the next step spends E as idle "
              "slots, and the in-step idle is S - E",
              ((RM, "            consumed = self._in_step_idle_us      # idle the executor spent in the step\n",
                    "            consumed = (self._total_time_slot_us - self._estimated_idle_us  # AntMan: S - E\n"
                    "                        if self._total_time_slot_us > self._estimated_idle_us else 0)\n"),
               (RM, "            self._total_time_slot_us = sleep_us   # all of it after the step (D-RM-12)\n",
                    "            self._total_time_slot_us = sleep_us\n"
                    "            self._estimated_idle_us = sleep_us    # AntMan: E = S = sleep\n")),
              modules=("conformance/test_resource_management.py",
                       "conformance/test_gpu_op_manager.py")),
    Deviation("D-RM-13", ("RM-19",),
              "jsoncpp's Reader builds every value of the document, without bound",
              ((RM, "            doc = bounded_loads(content, max_depth=MAX_CONFIG_DEPTH,\n"
                    "                                max_values=MAX_CONFIG_VALUES, members=CONFIG_MEMBERS)\n",
                    "            doc = bounded_loads(content, max_depth=1 << 30,   # AntMan: no bound\n"
                    "                                max_values=1 << 62, members=None)\n"),),
              modules=("conformance/test_resource_management_faults.py",)),
    Deviation("D-RM-14", ("RM-20", "RM-7"),
              "every bus id ever seen is kept and re-applied, one failure logged per id at "
              "each new config",
              ((RM, "                if bus_id not in self._limits and len(self._limits) >= MAX_BUS_IDS \\\n"
                    "                        and not (bus_id in known and self._drop_one_unknown_locked()):\n",
                    "                if False:                       # AntMan: every bus id is held\n"),
               (RM, "            if unknown:\n                self._forget_unknown(unknown)\n",
                    "            for bus_id in unknown:              # AntMan: kept; one error per id\n"
                    "                log.error(\"AdjustMemLimit: cannot find the GPU of bus id %s\", bus_id)\n"
                    "                with self._manage_lock:\n"
                    "                    self._pending.pop(bus_id, None)\n"
                    "                    self._unknown[bus_id] = None\n"),
               (RM, "        if beyond:\n",
                    "        if doc.get(\"gpuConfigInfo\") is not None:   # AntMan: re-applied at each config\n"
                    "            with self._manage_lock:\n"
                    "                for bus_id in self._unknown:\n"
                    "                    if bus_id in self._limits:\n"
                    "                        self._pending[bus_id] = self._limits[bus_id]\n"
                    "        if beyond:\n")),
              modules=("conformance/test_resource_management_faults.py",
                       "conformance/test_resource_management.py"),
              also={"RM-21": "the error logged for each unknown bus id prints it as it is "
                             "(as every AntMan log line does, D-RM-15)"}),
    Deviation("D-RM-15", ("RM-21",),
              "keys and values are printed as they are (a newline forges a log line)",
              ((RM, "from .log_text import quote\n",
                    "from .log_text import quote as _quoted\n"
                    "quote = lambda text, *_: str(text)  # noqa: E731 - AntMan prints text as it is\n"),),
              modules=("conformance/test_resource_management_faults.py",)),
    Deviation("D-STAT-1", ("STAT-6",),
              "deviceMax + hostMax > pool is labelled FRAGMENT and the opposite OOM",
              ((STAT, '            return "OOM"\n        return "FRAGMENT"\n',
                      '            return "FRAGMENT"                   # AntMan: swapped\n'
                      '        return "OOM"\n'),),
              modules=("conformance/test_statistics.py",)),
    Deviation("D-STAT-2", ("STAT-8",),
              "std::ofstream truncates and writes the status file in place",
              (_imports(STAT, "from .original import write_in_place"),
               (STAT, "            _replace_atomically(target, text.encode(\"utf-8\"))\n",
                      "            write_in_place(target, text.encode(\"utf-8\"))   # AntMan: std::ofstream\n")),
              modules=("conformance/test_statistics.py", "conformance/test_statistics_faults.py"),
              also={"STAT-10": "written in place, there is no temporary file to hold locked, "
                               "nor one a killed writer leaves"}),
    Deviation("D-STAT-3", ("STAT-5",),
              "GetMemPoolStats walks the regions without the BFC lock",
              (_imports(STAT, "from .original import unlocked_pool_stats"),
               (STAT, "            pool = GPUAdjustableAllocator().get_mem_pool_stats(device)\n",
                      "            pool = unlocked_pool_stats(device)  # AntMan: no BFC lock\n")),
              unobservable="the statistics read the device BFC's stats under its lock just "
                           "before the pool figures, so an Extend in progress is waited for "
                           "anyway; what is left is a race between two reads that no test "
                           "can order through the API"),
    Deviation("D-STAT-4", ("STAT-9",),
              "whatever is at the status path (a device, a FIFO, a directory) is written",
              ((STAT, "    if not stat_module.S_ISREG(st.st_mode):\n        raise OSError(errno.EEXIST",
                      "    if False:                                   # AntMan: written whatever it is\n"
                      "        raise OSError(errno.EEXIST"),),
              modules=("conformance/test_statistics_faults.py",)),
    Deviation("D-STAT-5", ("STAT-10",),
              "a temporary file left by a writer killed before its rename stays for ever",
              ((STAT, "                removed = _remove_stale_temporaries(target)\n",
                      "                removed = 0                     # AntMan: never removed\n"),),
              modules=("conformance/test_statistics_faults.py",)),
    Deviation("D-DEVICE-1", ("DEVICE-5",),
              "GetPciBusId returns the line prefix when no ':' follows the marker and "
              "collapses a domain-less address to device.function",
              ((DEV, "    desc = physical_device_desc.lower()\n"
                     "    pos = desc.find(_BUS_MARKER)\n"
                     "    if pos < 0:\n"
                     "        return \"\"\n",
                     "    desc = physical_device_desc.lower()\n"
                     "    pos = desc.find(_BUS_MARKER)\n"
                     "    if pos < 0:\n"
                     "        return \"\"\n"
                     "    start = desc.find(\":\", pos + len(_BUS_MARKER)) + 1   # AntMan: npos + 1 == 0\n"
                     "    end = desc.find(\",\", start)\n"
                     "    return desc[start:] if end < 0 else desc[start:end]\n"),),
              modules=("conformance/test_devices.py",)),
    # -- SESS, EXEC, OPM, E2E ----------------------------------------------------------------------
    Deviation("D-SESS-1", ("SESS-4",),
              "PRE actions get graph_id = 0",
              ((SESS, "graph_id=eak.graph_id, sess_duration_us=0)\n",
                      "graph_id=0, sess_duration_us=0)   # AntMan: 0 for PRE\n"),),
              modules=("conformance/test_session.py", "conformance/test_session_run_actions.py")),
    Deviation("D-SESS-2", ("SESS-3",),
              "graph_id is the address of the ExecutorsAndKeys, which a later session reuses",
              ((SESS, "_graph_ids = itertools.count(1)\n",
                      "_graph_ids = itertools.count(1)\n"
                      "_free_graph_ids: list[int] = []         # AntMan: freed addresses are reused\n"
                      "_graph_id_lock = threading.Lock()\n"
                      "\n\n"
                      "def _new_graph_id() -> int:\n"
                      "    with _graph_id_lock:\n"
                      "        if _free_graph_ids:\n"
                      "            return _free_graph_ids.pop(0)\n"
                      "        return 0x55D0_0000_0000 + 0x1C0 * next(_graph_ids)\n"),
               (SESS, "eak = _ExecutorsAndKeys(impl, next(_graph_ids),",
                      "eak = _ExecutorsAndKeys(impl, _new_graph_id(),"),
               (SESS, "        self._resources.release_all()\n",
                      "        self._resources.release_all()\n"
                      "        with _graph_id_lock:                   # AntMan: the memory is freed\n"
                      "            _free_graph_ids.extend(e.graph_id for e in self._executors.values())\n")),
              modules=("conformance/test_session.py",)),
    Deviation("D-SESS-3", ("SESS-4",),
              "start_time_usecs is taken after the feeds are converted and the executors found",
              ((SESS, "        start_us = self._clock.now_us()  # sess_duration_us counts from run entry (SESS clauses)\n",
                      "        start_us = 0                        # AntMan: taken in RunInternal (_run)\n"),
               (SESS, "        eak = self._get_or_create(fetch_names, feeds, targets)    # keyed by the fed nodes\n",
                      "        eak = self._get_or_create(fetch_names, feeds, targets)\n"
                      "        start_us = self._clock.now_us()     # AntMan: in RunInternal\n")),
              modules=("conformance/test_session.py", "conformance/test_session_run_actions.py")),
    Deviation("D-SESS-4", ("SESS-9",),
              "a run left by an exception (Ctrl-C) does not cancel its step",
              ((SESS, "            for state in started:            # the one step of this run, once it started\n"
                      "                if not state.done:\n"
                      "                    state.cancel(CancelledError(\n"
                      "                        f\"the run was interrupted ({type(exc).__name__})\"))\n",
                      "            pass                               # AntMan: the step runs on\n"),),
              modules=("conformance/test_session_interrupt.py",)),
    Deviation("D-EXEC-1", ("EXEC-9",),
              "after an error the nodes already ready keep running",
              ((EXEC, "                if self._abort.is_set():\n"
                      "                    completed = self._skip(item)\n",
                      "                if False:                       # AntMan: ready nodes still run\n"
                      "                    completed = self._skip(item)\n"),),
              modules=("conformance/test_executor.py", "conformance/test_session.py"),
              also={"SESS-8": "a step cancelled by close() from a PRE action still runs the "
                              "nodes that were ready: the cancellation stops no node",
                    "SESS-7": "a run the pool can no longer take (at interpreter exit) records "
                              "its CancelledError, and the nodes already ready still run, on "
                              "the thread that called run"}),
    Deviation("D-EXEC-2", ("EXEC-11", "OPM-3"),
              "the graph is partitioned per device with _Send/_Recv, one ExecutorState and "
              "one GpuOpManager per partition",
              not_implemented="a structural difference: the reference has no partitioning to "
                              "switch to"),
    Deviation("D-EXEC-3", ("EXEC-3",),
              "PyFunc nodes cannot choose is_expensive / is_async",
              not_implemented="the override is the suite's own test instrument: without it "
                              "the instrument cannot make the nodes the other tests need"),
    Deviation("D-OPM-1", ("OPM-4",),
              "the op is launched and then its idle slot is slept",
              ((OPM, "                if not self._aborted:\n"
                     "                    self._idle_slot()\n"
                     "                if self._aborted:\n"
                     "                    op.skip()\n"
                     "                else:\n"
                     "                    op.launch()\n",
                     "                if self._aborted:\n"
                     "                    op.skip()\n"
                     "                else:\n"
                     "                    op.launch()\n"
                     "                    self._idle_slot()           # AntMan: after the launch\n"),),
              modules=("conformance/test_gpu_op_manager.py",),
              also={"OPM-8": "the slot runs after its op's launch, so an op whose slot raises "
                             "was launched already, which the test of a raising slot refuses",
                    "OPM-7": "the slot runs after its op's launch, so the op whose launch "
                             "fails the step still takes one: the manager drains the GPUs and "
                             "reads and deducts E after the failure, which OPM-7 refuses"}),
    Deviation("D-OPM-2", ("OPM-2",),
              "only asynchronous GPU kernels are queued",
              ((EXEC, "elif self.opm is not None and item.is_gpu:\n",
                      "elif self.opm is not None and item.is_gpu and item.is_async:   # AntMan\n"),
               (EXEC, "if opm is not None and items[nid].is_gpu:\n",
                      "if opm is not None and items[nid].is_gpu and items[nid].is_async:   # AntMan\n")),
              modules=("conformance/test_gpu_op_manager.py",),
              also={c: "the managed-step tests queue synchronous GPU kernels, which AntMan "
                       "launches directly: none of the queueing, slots and counts they check "
                       "happens" for c in ("OPM-1", "OPM-3", "OPM-4", "OPM-5", "OPM-7",
                                           "OPM-8", "SESS-8")}),
    Deviation("D-OPM-3", ("OPM-4",),
              "N is the per-executor high-water mark of ops queued by one Process call, 0 "
              "in the first throttled step, fixed during a step",
              ((EXEC, "self.opm = GpuOpManager(resource_management, num_ops=impl.num_gpu_nodes,\n",
                      "self.opm = GpuOpManager(resource_management,  # AntMan: N = the high-water mark\n"
                      "                                        num_ops=resource_management.get_executor_queued_op_num(key),\n"),
               (OPM, "        n = self._remaining\n        self._remaining -= 1\n",
                     "        n = self._remaining                     # AntMan: fixed for the step\n"
                     "        if n <= 0:\n"
                     "            return\n")),
              modules=("conformance/test_gpu_op_manager.py",),
              also={c: "a step's first throttled run has N = 0 and inserts no slot, so the "
                       "tests that close or fail a step during its slot find none"
                    for c in ("OPM-7", "OPM-8", "SESS-8")}),
    Deviation("D-OPM-4", ("OPM-6",),
              "when the last queued op completes on the manager thread, Finish joins the "
              "thread from itself (std::system_error, abort)",
              (_imports(OPM, "from .guards import AntManGuardError"),
               (OPM, "        if threading.current_thread() is not self._thread:\n"
                     "            self._thread.join()\n",
                     "        if threading.current_thread() is self._thread:   # AntMan: joins itself\n"
                     "            raise AntManGuardError(\"std::system_error (AntMan 1.15 aborts the \"\n"
                     "                                   \"process): Finish joins the GpuOpManager \"\n"
                     "                                   \"thread from that thread\")\n"
                     "        self._thread.join()\n")),
              bounded="the abort is an AntManGuardError that fails the step",
              modules=("conformance/test_gpu_op_manager.py",),
              also={c: "a managed step whose last op completes on the manager thread fails "
                       "with the abort, so every test that runs such a step fails (untagged)"
                    for c in ("OPM-1", "OPM-2", "OPM-3", "OPM-4", "OPM-5", "OPM-7", "OPM-8",
                              "EXEC-13")}),
    Deviation("D-OPM-5", ("OPM-1",),
              "a manager thread is started for every ExecutorState whenever E > 0, CPU "
              "partitions and un-throttled steps included",
              ((EXEC, "        if resource_management is not None and impl.num_gpu_nodes > 0:\n"
                      "            perf = resource_management.perf_control                      # read once (OPM-1)\n"
                      "            if perf < 100 and resource_management.get_estimated_idle_time() > 0:\n",
                      "        if resource_management is not None:     # AntMan: E > 0 is enough\n"
                      "            if resource_management.get_estimated_idle_time() > 0:\n"),),
              modules=("conformance/test_gpu_op_manager.py",)),
    Deviation("D-OPM-6", ("OPM-3",),
              "every Process call busy-waits until the queue of GPU ops drains",
              ((EXEC, "import threading\n", "import threading\nimport time\n"),
               (EXEC, "            if completed:\n                self._finish()\n        except BaseException as exc:  # an executor bug",
                      "            while self.opm is not None and self.opm._queue and not self._abort.is_set():\n"
                      "                time.sleep(1e-6)                # AntMan: usleep(1) until the queue drains\n"
                      "            if completed:\n                self._finish()\n        except BaseException as exc:  # an executor bug")),
              modules=("conformance/test_gpu_op_manager.py",)),
    Deviation("D-OPM-7", ("OPM-6", "OPM-7"),
              "Finish waits for an idle usleep in progress, and a failed step still launches "
              "the queued ops",
              (_imports(OPM, "from .guards import LateEvent"),
               (OPM, "            self._aborted = True\n            self._cancel.set()\n",
                     "            self._cancel.set()                  # AntMan: the queued ops still launch\n"),
               (OPM, "        self._clock.sleep_us(slot, self._cancel)\n",
                     "        self._clock.sleep_us(slot, LateEvent(self._cancel))   # AntMan: the slot runs out\n"),
               (EXEC, "        if self._abort.is_set():\n"
                      "            self._retire_unrun(item)     # the step failed since the caller's check (OPM-7)\n",
                      "        if False:                               # AntMan: queued ops still launch\n"
                      "            self._retire_unrun(item)\n")),
              bounded="Finish and a failed step wait for the idle slot in progress at most 8 s "
                      "of real time after the step ends instead of the slot's whole length",
              modules=("conformance/test_gpu_op_manager.py",)),
    Deviation("D-OPM-8", ("OPM-1", "OPM-2"),
              "E > 0 is re-evaluated for every op, so a step may queue some GPU ops and "
              "launch others directly",
              ((EXEC, "                elif self.opm is not None and item.is_gpu",
                      "                elif self.opm is not None and self.rm.get_estimated_idle_time() > 0 and item.is_gpu"),),
              modules=("conformance/test_gpu_op_manager.py",)),
    Deviation("D-OPM-9", ("OPM-5",),
              "the count is the most ops one Process call queued, not the step's",
              ((EXEC, "log = logging.getLogger(__name__)\n",
                      "log = logging.getLogger(__name__)\n"
                      "_tls = threading.local()                # AntMan: ops queued by this Process call\n"),
               # the high-water mark is raised as each op is queued, before the op can
               # complete the step: AntMan raises it when the Process call returns, which
               # races with a step finished on another thread; the emulation takes the
               # order in which the call's bookkeeping comes first, so that the count a
               # step leaves does not depend on the machine's scheduling
               (EXEC, "        assert self.opm is not None\n        self.opm.enqueue(",
                      "        assert self.opm is not None\n"
                      "        _tls.queued = getattr(_tls, \"queued\", 0) + 1\n"
                      "        with self._lock:\n"
                      "            self._hwm = max(getattr(self, \"_hwm\", 0), _tls.queued)\n"
                      "        self.opm.enqueue("),
               (EXEC, "        inline: collections.deque[int] = collections.deque([nid])\n",
                      "        _tls.queued = 0\n"
                      "        inline: collections.deque[int] = collections.deque([nid])\n"),
               # ops made ready outside a Process call (the step's roots, a queued op's
               # consumers) are where AntMan starts new Process calls (D-OPM-11): the count
               # starts again there, not where the thread's previous step left it
               (EXEC, "        if inline is None:\n",
                      "        if inline is None:\n"
                      "            _tls.queued = 0\n"),
               (EXEC, "                if self.opm.num_queued:\n"
                      "                    self.rm.set_executor_queued_op_num(self.key, self.opm.num_queued)\n",
                      "                if getattr(self, \"_hwm\", 0):       # AntMan: per Process call\n"
                      "                    self.rm.set_executor_queued_op_num(self.key, self._hwm)\n")),
              modules=("conformance/test_gpu_op_manager.py",)),
    Deviation("D-OPM-10", ("OPM-4", "RM-10", "RM-14"),
              "E is decremented by the requested slot, not by the idle time the slot took",
              ((OPM, "        spent = int(self._clock.now_us()) - start        # now_us never decreases (API-4)\n"
                     "        self._rm.spend_idle_time(spent)",
                     "        self._rm.spend_idle_time(slot)          # AntMan: the requested slot"),),
              modules=("conformance/test_gpu_op_manager.py",)),
    Deviation("D-OPM-11", ("OPM-2", "EXEC-11"),
              "a queued kernel's consumers go back through the runner, and a pool thread's "
              "Process queues the GPU ones",
              ((EXEC, "            items, opm = self.impl.items, self.opm\n",
                      "            items, opm = self.impl.items, None   # AntMan: through the runner\n"),),
              modules=("conformance/test_gpu_op_manager.py", "conformance/test_executor.py")),
    Deviation("D-OPM-12", ("OPM-8",),
              "the idle slot starts right after the previous launch, while the GPU may still "
              "run the kernels launched before it",
              ((OPM, "        if self._drain is not None:\n"
                     "            self._drain()                        # the slot starts on idle GPUs (OPM-8)\n",
                     "        pass                                    # AntMan: no drain\n"),),
              modules=("conformance/test_gpu_op_manager.py",)),
)

BY_ID: dict[str, Deviation] = {d.id: d for d in DEVIATIONS}


def switches_from_env(environ: Mapping[str, str] | None = None) -> dict[str, bool]:
    """``{deviation id: on}`` from ``ANTMAN_1_15_OFF`` (comma-separated ids, or ``all``)."""
    environ = os.environ if environ is None else environ
    raw = environ.get(OFF_ENV_VAR, "")
    names = {n.strip() for n in raw.split(",") if n.strip()}
    if "all" in names:
        return {d.id: False for d in DEVIATIONS}
    unknown = sorted(names - set(BY_ID))
    if unknown:
        raise ValueError(f"{OFF_ENV_VAR} names unknown deviations {', '.join(unknown)}; "
                         f"known: {', '.join(BY_ID)}")
    return {d.id: d.id not in names for d in DEVIATIONS}


def active_patches(switches: Mapping[str, bool]) -> list[tuple[str, str, str, str]]:
    """``(deviation, module, old, new)`` of the switches that are on, in list order."""
    return [(d.id, module, old, new) for d in DEVIATIONS if switches.get(d.id)
            for module, old, new in d.patches]
