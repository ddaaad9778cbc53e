"""DEVICE clauses: devices, the device manager, bus ids, backends and the runtime context."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import threading

import numpy
import pytest

from conformance import spec
from conformance.checks import names_identifier, raises
from conformance.control_helpers import (MiB, bus_id, control_env, gpus,  # noqa: F401
                                         pool_bytes, runtime_records, runtimes)
from fixtures.threads import antman_threads, no_thread_leak  # noqa: F401
from fixtures.virtual_clock import VirtualClock

pytestmark = pytest.mark.capability("resource_management")

PREFIX = "/job:localhost/replica:0/task:0/device:"
DESC = re.compile(r"^device: (\d+), name: (.+), pci bus id: ([0-9a-fA-F]{1,8}:[0-9a-fA-F]{2}:"
                  r"[0-9a-fA-F]{2}\.[0-7]), compute capability: (\d+)\.(\d+)$")


@pytest.mark.clause("DEVICE-1")
def test_names_and_order(rt, runtimes) -> None:
    ctx = runtimes(num_gpus=2, backend="sim")
    devices = ctx.device_mgr.list_devices()
    names = [d.name for d in devices]
    assert names == [PREFIX + "CPU:0", PREFIX + "GPU:0", PREFIX + "GPU:1"], \
        f"list_devices() names {names} [DEVICE-1]"
    assert [d.device_type for d in devices] == ["CPU", "GPU", "GPU"], "[DEVICE-1]"
    for d in devices:
        a = d.attributes
        assert isinstance(a, rt.DeviceAttributes) and a.name == d.name \
            and a.device_type == d.device_type and isinstance(a.memory_limit, int) \
            and isinstance(a.physical_device_desc, str), f"{d.name}.attributes = {a!r} [DEVICE-1]"


@pytest.mark.clause("DEVICE-1")
def test_device_attributes_are_an_immutable_value(rt, runtimes) -> None:
    ctx = runtimes(num_gpus=1, backend="sim")
    for d in ctx.device_mgr.list_devices():
        a = d.attributes
        fields = (a.name, a.device_type, a.memory_limit, a.physical_device_desc)
        for field, value in (("name", "GPU:9"), ("device_type", "TPU"), ("memory_limit", 1),
                             ("physical_device_desc", "")):
            try:
                setattr(a, field, value)
            except AttributeError:
                pass
            else:
                pytest.fail(f"{d.name}.attributes.{field} = {value!r} was accepted [DEVICE-1]")
        got = (a.name, a.device_type, a.memory_limit, a.physical_device_desc)
        assert got == fields, f"{d.name}.attributes changed to {got} [DEVICE-1]"
        twin = rt.DeviceAttributes(*fields)
        try:
            same_hash = hash(twin) == hash(a)
        except TypeError as exc:
            pytest.fail(f"{d.name}.attributes cannot be hashed ({exc}) [DEVICE-1]")
        assert twin == a and same_hash, (
            f"DeviceAttributes{fields} and {d.name}.attributes are not one value [DEVICE-1]")


@pytest.mark.clause("DEVICE-1")
def test_list_devices_is_a_copy(rt, runtimes) -> None:
    ctx = runtimes(num_gpus=2, backend="sim")
    got = ctx.device_mgr.list_devices()
    gpu1 = got[2]
    got.clear()
    assert [d.name for d in ctx.device_mgr.list_devices()] == \
        [PREFIX + "CPU:0", PREFIX + "GPU:0", PREFIX + "GPU:1"], \
        "clearing the list list_devices() returned changed the device manager [DEVICE-1]"
    assert ctx.device_mgr.lookup_device("GPU:1") is gpu1, \
        "lookup_device lost a device after the returned list was cleared [DEVICE-1]"


@pytest.mark.clause("DEVICE-2")
@pytest.mark.parametrize("name,expected", [
    (PREFIX + "GPU:1", "GPU:1"), ("/device:GPU:1", "GPU:1"), ("device:GPU:0", "GPU:0"),
    ("GPU:0", "GPU:0"), ("/gpu:1", "GPU:1"), ("gpu:0", "GPU:0"), ("CPU:0", "CPU:0"),
    ("/device:CPU:0", "CPU:0"), ("/job:localhost/replica:0/task:0/gpu:1", "GPU:1")])
def test_lookup_forms(rt, runtimes, name, expected) -> None:
    ctx = runtimes(num_gpus=2)
    found = ctx.device_mgr.lookup_device(name)
    target = next(d for d in ctx.device_mgr.list_devices() if d.name == PREFIX + expected)
    assert found is target, f"lookup_device({name!r}) = {found!r}, expected {target.name} [DEVICE-2]"


@pytest.mark.clause("DEVICE-2")
@pytest.mark.parametrize("name", ["GPU:2", "TPU:0", "garbage", "", "GPU:", "GPU:-1",
                                  "/job:worker/replica:0/task:0/device:GPU:0"])
def test_lookup_unknown_is_a_key_error(rt, runtimes, name) -> None:
    ctx = runtimes(num_gpus=2)
    with pytest.raises(KeyError) as info:
        ctx.device_mgr.lookup_device(name)
    assert "GPU:1" in str(info.value), \
        f"lookup_device({name!r}) error does not name the known devices: {info.value} [DEVICE-2]"


@pytest.mark.clause("DEVICE-2")
@pytest.mark.parametrize("name", ["GPU:2", "GPU: 0"])
def test_lookup_error_names_each_known_device_apart(rt, runtimes, name) -> None:
    """An unknown and a malformed name: the KeyError holds every device's full name, each
    set apart from the text around it, so that a reader can take the names back out."""
    ctx = runtimes(num_gpus=2)
    with pytest.raises(KeyError) as info:
        ctx.device_mgr.lookup_device(name)
    text = str(info.value)
    unread = [d.name for d in ctx.device_mgr.list_devices()
              if not re.search(rf"(?<![\w/:.-]){re.escape(d.name)}(?![\w/:.-])", text)]
    assert not unread, (f"lookup_device({name!r}) error {text!r} does not name {unread} each "
                        f"set apart from the text around it [DEVICE-2]")


@pytest.mark.clause("DEVICE-2")
@pytest.mark.parametrize("name", [" GPU:0", "GPU:0 ", "GPU: 0", "GPU:0\n", "\tGPU:1",
                                  "GPU:\uff10", "GPU:\u0661", "/device:GPU:0\n",
                                  PREFIX + "GPU:0 ", "/job:localhost/replica:\u0660/task:0/gpu:0"])
def test_lookup_takes_no_white_space_or_other_digits(rt, runtimes, name) -> None:
    ctx = runtimes(num_gpus=2)
    with pytest.raises(KeyError):
        ctx.device_mgr.lookup_device(name)
        pytest.fail(f"lookup_device({name!r}) found a device [DEVICE-2]")


@pytest.mark.clause("DEVICE-2")
@pytest.mark.parametrize("name,expected", [("GPU:01", "GPU:1"), ("gPu:1", "GPU:1"),
                                           ("/device:cpu:00", "CPU:0")])
def test_lookup_index_and_type_spellings(rt, runtimes, name, expected) -> None:
    ctx = runtimes(num_gpus=2)
    found = ctx.device_mgr.lookup_device(name)
    assert found.name == PREFIX + expected, \
        f"lookup_device({name!r}) = {found.name}, expected {PREFIX + expected} [DEVICE-2]"


@pytest.mark.clause("DEVICE-2")
@pytest.mark.parametrize("name", [None, 0, b"GPU:0", ("GPU", 0)], ids=repr)
def test_lookup_of_a_name_that_is_not_a_str_is_a_key_error(rt, runtimes, name) -> None:
    ctx = runtimes(num_gpus=2)
    with raises(KeyError, "DEVICE-2", f"lookup_device({name!r})"):
        ctx.device_mgr.lookup_device(name)


@pytest.mark.clause("DEVICE-2")
def test_device_mgr_holds_its_devices_in_order(rt, runtimes) -> None:
    cpu, gpu0, gpu1 = runtimes(num_gpus=2).device_mgr.list_devices()
    mgr = rt.DeviceMgr([cpu, gpu1, gpu0])
    assert mgr.list_devices() == [cpu, gpu1, gpu0], \
        f"DeviceMgr([CPU:0, GPU:1, GPU:0]).list_devices() = {mgr.list_devices()} [DEVICE-2]"
    assert mgr.lookup_device("GPU:0") is gpu0 and mgr.lookup_device("GPU:1") is gpu1, \
        "DeviceMgr(devices).lookup_device did not find the devices it was given [DEVICE-2]"


@pytest.mark.clause("DEVICE-2")
def test_device_mgr_keeps_its_own_list(rt, runtimes) -> None:
    """Changing the list given to DeviceMgr afterwards changes neither what it lists nor
    what it finds."""
    cpu, gpu0, gpu1 = runtimes(num_gpus=2).device_mgr.list_devices()
    given = [cpu, gpu0]
    mgr = rt.DeviceMgr(given)
    given.append(gpu1)
    given.remove(cpu)
    assert mgr.list_devices() == [cpu, gpu0], (
        f"DeviceMgr([CPU:0, GPU:0]) lists {mgr.list_devices()} after its caller changed the "
        f"list it was given [DEVICE-2]")
    with raises(KeyError, "DEVICE-2", "lookup_device('GPU:1') of a device appended later"):
        mgr.lookup_device("GPU:1")


@pytest.mark.clause("DEVICE-2")
@pytest.mark.parametrize("twice", ["the same device", "two runtimes' devices"])
def test_device_mgr_refuses_two_devices_of_one_name(rt, runtimes, twice) -> None:
    cpu, gpu0 = runtimes().device_mgr.list_devices()
    other = gpu0 if twice == "the same device" else runtimes().device_mgr.lookup_device("GPU:0")
    with pytest.raises(ValueError) as info:
        rt.DeviceMgr([cpu, gpu0, other])
        pytest.fail(f"DeviceMgr([CPU:0, GPU:0, GPU:0]) with {twice} as GPU:0 was built, "
                    f"so lookup_device('GPU:0') could find either [DEVICE-2]")
    assert "GPU:0" in str(info.value), \
        f"DeviceMgr's error for a second GPU:0 does not name it: {info.value} [DEVICE-2]"


@pytest.mark.clause("DEVICE-3")
@pytest.mark.capability("vmem", "bfc")
def test_gpu_allocator_stack(rt, runtimes) -> None:
    ctx = runtimes(num_gpus=2, gpu_memory_bytes=32 * MiB)
    g0, g1 = gpus(ctx)
    for i, g in enumerate((g0, g1)):
        a = g.get_allocator()
        assert isinstance(a, rt.GPUVMemAllocator) and a.name == f"GPUVMem_{i}_bfc", \
            f"GPU:{i} allocator {a!r} [DEVICE-3]"
        assert isinstance(a.device_allocator, rt.GPUBFCAllocator) \
            and a.device_allocator.name == f"GPU_{i}_bfc", \
            f"GPU:{i} device side {a.device_allocator!r} [DEVICE-3]"
        assert a.device_allocator.get_stats().bytes_limit == 32 * MiB \
            == g.attributes.memory_limit, "[DEVICE-3]"
    assert g0.get_allocator().device_allocator is not g1.get_allocator().device_allocator, (
        "[DEVICE-3]")
    p = g0.get_allocator().allocate_raw(256, 256)
    assert pool_bytes(g0) == 32 * MiB, "without growth the first region is not the whole limit [DEVICE-3]"
    assert pool_bytes(g1) == 0, "an allocation on GPU:0 reached GPU:1 [DEVICE-3]"
    g0.get_allocator().deallocate_raw(p)


@pytest.mark.clause("DEVICE-3")
@pytest.mark.capability("vmem", "bfc")
def test_environment_read_when_built(rt, runtimes, control_env) -> None:
    control_env.setenv("TF_GPU_VMEM", "false")
    control_env.setenv("TF_FORCE_GPU_ALLOW_GROWTH", "true")
    ctx = runtimes()
    g = gpus(ctx)[0]
    a = g.get_allocator()
    assert isinstance(a, rt.GPUBFCAllocator) and a.name == "GPU_0_bfc", \
        f"with TF_GPU_VMEM=false the allocator is {a!r} [DEVICE-3]"
    p = a.allocate_raw(256, 256)
    assert pool_bytes(g) == MiB, "TF_FORCE_GPU_ALLOW_GROWTH=true was not applied [DEVICE-3]"
    a.deallocate_raw(p)


@pytest.mark.clause("DEVICE-4")
def test_gpu_description(rt, runtimes) -> None:
    ctx = runtimes(num_gpus=3, backend="sim")
    buses = []
    for i, g in enumerate(gpus(ctx)):
        m = DESC.match(g.attributes.physical_device_desc)
        assert m is not None and int(m[1]) == i, \
            f"GPU:{i} physical_device_desc {g.attributes.physical_device_desc!r} [DEVICE-4]"
        buses.append(m[3].lower())
    assert buses == ["0000:3b:00.0", "0000:3c:00.0", "0000:3d:00.0"], \
        f"simulated bus ids {buses} [DEVICE-4]"
    assert [bus_id(rt, g) for g in gpus(ctx)] == ["3b:00.0", "3c:00.0", "3d:00.0"], "[DEVICE-4]"
    capabilities = [DESC.match(g.attributes.physical_device_desc).group(4, 5) for g in gpus(ctx)]
    assert capabilities == [("7", "0")] * 3, (
        f"simulated compute capabilities {capabilities}, expected 7.0 by default [DEVICE-4]")
    built = rt.SimBackend(1, MiB, compute_capability=(8, 6)).gpu_info(0).compute_capability
    assert tuple(built) == (8, 6), (f"SimBackend(1, compute_capability=(8, 6)) reports "
                                    f"{built} [DEVICE-4]")


@pytest.mark.clause("DEVICE-4")
def test_gpu_device_id_bus_id_and_array_module(rt, runtimes) -> None:
    backend = rt.SimBackend(3, MiB)
    ctx = runtimes(num_gpus=3, gpu_memory_bytes=MiB, backend=backend)
    for i, g in enumerate(gpus(ctx)):
        assert g.tf_gpu_id == i, f"GPU:{i}.tf_gpu_id is {g.tf_gpu_id!r} [DEVICE-4]"
        assert g.pci_bus_id == bus_id(rt, g) == f"{0x3b + i:02x}:00.0", (
            f"GPU:{i}.pci_bus_id is {g.pci_bus_id!r}, its description's bus id "
            f"{bus_id(rt, g)!r} [DEVICE-4]")
        assert g.xp is backend.xp is numpy, (
            f"GPU:{i}.xp is {g.xp!r}, the simulated backend's {backend.xp!r}, expected "
            f"NumPy [DEVICE-4]")


@pytest.mark.clause("DEVICE-4")
def test_simulated_gpu_model_name(rt, runtimes) -> None:
    ctx = runtimes(num_gpus=2, backend="sim")
    models = [DESC.match(g.attributes.physical_device_desc)[2] for g in gpus(ctx)]
    assert models == ["AntMan Simulated GPU"] * 2, (
        f"simulated GPU models {models}, expected 'AntMan Simulated GPU' by default [DEVICE-4]")
    default = rt.SimBackend(1, MiB).gpu_info(0).name
    assert default == "AntMan Simulated GPU", (
        f"SimBackend(1).gpu_info(0).name is {default!r} [DEVICE-4]")
    built = rt.SimBackend(1, MiB, model="Tesla V100-SXM2-16GB").gpu_info(0).name
    assert built == "Tesla V100-SXM2-16GB", (
        f"SimBackend(1, model='Tesla V100-SXM2-16GB') reports the model {built!r} [DEVICE-4]")


@pytest.mark.clause("DEVICE-4")
def test_simulated_backend_holds_197_gpus_and_not_198(rt) -> None:
    """Bus 0x3b + i stays a two-digit bus up to ``ff``: 197 GPUs, the last on bus ff."""
    try:
        backend = rt.SimBackend(197, MiB)
    except ValueError as exc:
        pytest.fail(f"SimBackend(197) was refused ({exc}): bus ff is free for GPU 196 "
                    f"[DEVICE-4]")
    assert backend.gpu_info(196).pci_bus_id.lower() == "0000:ff:00.0", (
        f"GPU 196's bus id {backend.gpu_info(196).pci_bus_id} [DEVICE-4]")
    with pytest.raises(ValueError, match="num_gpus") as refused:
        rt.SimBackend(198, MiB)
        pytest.fail("SimBackend(198) was built: GPU 197 has no two-digit bus [DEVICE-4]")
    assert re.search(r"\b197\b", str(refused.value)), (
        f"SimBackend(198)'s error does not name the bound 197: {refused.value} [DEVICE-4]")


@pytest.mark.clause("DEVICE-4")
def test_bus_ids_distinct_on_any_backend(rt, runtimes) -> None:
    ctx = runtimes()
    ids = [bus_id(rt, g) for g in gpus(ctx)]
    assert all(ids) and len(set(ids)) == len(ids), f"bus ids {ids} [DEVICE-4]"


@pytest.mark.clause("DEVICE-5")
@pytest.mark.parametrize("desc,expected", [
    ("device: 0, name: Tesla V100-SXM2-16GB, pci bus id: 0000:3b:00.0, compute capability: 7.0",
     "3b:00.0"),
    ("device: 0, name: X, pci bus id: 0000:3B:00.0, compute capability: 7.0", "3b:00.0"),
    ("device: 1, name: X, PCI Bus ID: 00000000:AF:1F.7", "af:1f.7"),
    ("pci bus id: 3b:00.0", "3b:00.0"),
    ("pci bus id:0000:3b:00.0,", "3b:00.0"),
    ("pci bus id: 0000:b:0.1, compute capability: 8.0", "0b:00.1"),
    ("device: 0, name: X, compute capability: 7.0", ""),
    ("device: 0, name: X, pci bus id: unknown, compute capability: 7.0", ""),
    ("pci bus id: , compute capability: 7.0", ""),
    ("pci bus id: 00.0, compute capability: 7.0", ""),
    ("pci bus id: 0000:3b:00.8", ""),
    ("", ""),
])
def test_get_pci_bus_id(rt, desc, expected) -> None:
    got = rt.get_pci_bus_id(desc)
    assert got == expected, f"get_pci_bus_id({desc!r}) = {got!r}, expected {expected!r} [DEVICE-5]"


@pytest.mark.clause("DEVICE-5")
@pytest.mark.parametrize("desc,expected", [
    ("pci bus id:\t0000:3b:00.0", "3b:00.0"),
    ("pci bus id:\u00a00000:3c:00.0\u2003, compute capability: 8.0", "3c:00.0"),
    ("pci bus id: 0000:3b:00.0, pci bus id: 0000:3c:00.0", "3b:00.0"),
    ("name: pci bus id: 0000:3d:00.0", "3d:00.0"),
    ("pci bus id: 12345678:3b:00.0", "3b:00.0"),
    ("pci bus id: 123456789:3b:00.0", ""),
    ("pci bus id: 0000:3b3:00.0", ""),
    ("pci bus id: 0000:3b:000.0", ""),
    ("pci bus id: 0000:3b:00.00", ""),
    ("pci bus id: 0000:3b:00.7", "3b:00.7"),
    ("pci bus id: 0000:3g:00.0", ""),
    ("pci  bus id: 0000:3b:00.0", ""),
    ("pci bus id 0000:3b:00.0", ""),
])
def test_get_pci_bus_id_edges(rt, desc, expected) -> None:
    got = rt.get_pci_bus_id(desc)
    assert got == expected, f"get_pci_bus_id({desc!r}) = {got!r}, expected {expected!r} [DEVICE-5]"


@pytest.mark.clause("DEVICE-5")
@pytest.mark.parametrize("bad", [None, 5, b"pci bus id: 0000:3b:00.0"])
def test_get_pci_bus_id_non_str(rt, bad) -> None:
    assert rt.get_pci_bus_id(bad) == "", f"get_pci_bus_id({bad!r}) [DEVICE-5]"


@pytest.mark.clause("DEVICE-6")
def test_cpu_device_pool_and_allocator(rt, no_thread_leak, runtimes) -> None:
    ctx = runtimes()
    cpu = ctx.device_mgr.lookup_device("CPU:0")
    names = [cpu.schedule(lambda: threading.current_thread().name).result(10) for _ in range(4)]
    assert all(n.startswith("antman-cpu-0") for n in names), f"CPU pool threads {names} [DEVICE-6]"
    assert cpu.attributes.memory_limit == 256 << 20, (
        f"the CPU device's memory_limit is {cpu.attributes.memory_limit!r}, expected "
        f"268435456 (256 MiB) [DEVICE-6]")
    assert cpu.attributes.physical_device_desc == "", (
        f"the CPU device's physical_device_desc is {cpu.attributes.physical_device_desc!r}, "
        f"expected '' [DEVICE-6]")
    a = cpu.get_allocator()
    p = a.allocate_raw(64, 1000)
    assert a.tracks_allocation_sizes() and a.requested_size(p) == 1000, "[DEVICE-6]"
    assert a.get_stats().bytes_in_use == 1000, "[DEVICE-6]"
    a.deallocate_raw(p)
    assert cpu.closed is False, f"an open CPU device's closed is {cpu.closed!r} [DEVICE-6]"
    cpu.close()
    cpu.close()
    assert cpu.closed is True, f"closed is {cpu.closed!r} after close() [DEVICE-6]"
    left = [t.name for t in antman_threads() if t.name.startswith("antman-cpu-0")]
    assert left == [], f"CPU device close() left threads {left} [DEVICE-6]"


@pytest.mark.clause("DEVICE-6")
def test_cpu_device_close_cancels_calls_not_started(rt, no_thread_leak, runtimes) -> None:
    """More calls than the pool has threads, each held until released: close() cancels the
    queued ones at once and waits for the running ones."""
    ctx = runtimes()
    cpu = ctx.device_mgr.lookup_device("CPU:0")
    n = max(128, 4 * (os.cpu_count() or 1))   # beyond a pool sized by the host's cores
    go, last_done = threading.Event(), threading.Event()
    lock = threading.Lock()
    ran: list[int] = []

    def call(i: int) -> int:
        with lock:
            ran.append(i)
        go.wait(30)
        return i

    futures = [cpu.schedule(call, i) for i in range(n)]
    futures[-1].add_done_callback(lambda _f: last_done.set())
    closer = threading.Thread(target=cpu.close, name="device-6-closer", daemon=True)
    closer.start()
    try:
        cancelled_at_close = last_done.wait(10)
        with lock:
            started = len(ran)
    finally:
        go.set()
        closer.join(60)
    assert not closer.is_alive(), "CPU device close() did not return [DEVICE-6]"
    if not cancelled_at_close and started == n:
        pytest.skip(f"the CPU pool ran all {n} calls at once: none was left to cancel")
    assert cancelled_at_close and futures[-1].cancelled(), (
        f"close() with {n - started} of {n} calls not started left the last one "
        f"{'running' if futures[-1].running() else 'pending'} until the running calls "
        f"returned: calls not yet started must be cancelled [DEVICE-6]")
    cancelled = {i for i, f in enumerate(futures) if f.cancelled()}
    assert cancelled and not cancelled & set(ran), (
        f"cancelled calls {sorted(cancelled & set(ran))} ran anyway [DEVICE-6]")
    unfinished = [i for i, f in enumerate(futures)
                  if i not in cancelled and not (f.done() and f.result() == i)]
    assert unfinished == [] and len(ran) + len(cancelled) == n, (
        f"calls {unfinished} neither finished nor were cancelled; {len(ran)} ran, "
        f"{len(cancelled)} cancelled of {n} [DEVICE-6]")


@pytest.mark.clause("DEVICE-6")
def test_cpu_allocator_statistics(rt, runtimes) -> None:
    ctx = runtimes()
    a = ctx.device_mgr.lookup_device("CPU:0").get_allocator()

    def figures():
        s = a.get_stats()
        return (s.num_allocs, s.bytes_in_use, s.peak_bytes_in_use, s.largest_alloc_size)

    assert figures() == (0, 0, 0, 0), f"a new CPU allocator's stats {figures()} [DEVICE-6]"
    p, q = a.allocate_raw(64, 100), a.allocate_raw(64, 300)
    assert figures() == (2, 400, 400, 300), f"after allocations of 100 and 300: {figures()} " \
                                            f"[DEVICE-6]"
    a.deallocate_raw(p)
    assert figures() == (2, 300, 400, 300), f"after freeing the 100: {figures()} [DEVICE-6]"
    a.clear_stats()
    assert figures() == (0, 300, 300, 0), f"after clear_stats(): {figures()} [DEVICE-6]"
    first = a.get_stats()
    first.num_allocs = 99
    assert figures() == (0, 300, 300, 0), \
        f"changing the returned stats changed the allocator's: {figures()} [DEVICE-6]"
    a.deallocate_raw(q)


@pytest.mark.clause("DEVICE-6")
def test_cpu_allocator_deallocate_none_is_a_no_op(rt, runtimes) -> None:
    ctx = runtimes()
    a = ctx.device_mgr.lookup_device("CPU:0").get_allocator()
    p = a.allocate_raw(64, 100)
    before = a.get_stats()
    try:
        a.deallocate_raw(None)
    except Exception as exc:   # noqa: BLE001 - any exception is the failure reported
        pytest.fail(f"the CPU allocator's deallocate_raw(None) raised {exc!r}; it must do "
                    f"nothing [DEVICE-6]")
    assert a.get_stats() == before and a.requested_size(p) == 100, (
        f"deallocate_raw(None) changed the stats {before} to {a.get_stats()} or the live "
        f"allocation [DEVICE-6]")
    a.deallocate_raw(p)
    assert a.get_stats().bytes_in_use == 0, (
        f"after freeing the one allocation: {a.get_stats()} [DEVICE-6]")


@pytest.mark.clause("DEVICE-7")
@pytest.mark.parametrize("name", ["sim", " SIM ", "Sim"])
def test_select_sim(rt, name) -> None:
    assert rt.select_backend(name).name == "sim", f"select_backend({name!r}) [DEVICE-7]"


@pytest.mark.clause("DEVICE-7")
def test_select_bad_names(rt, control_env) -> None:
    control_env.setenv("ANTMAN_DEVICE", "sim")         # valid: the argument is what is wrong
    with pytest.raises(ValueError, match="bogus") as info:
        rt.select_backend("bogus")
    assert names_identifier(info.value, "argument") \
            and not names_identifier(info.value, "ANTMAN_DEVICE"), (
        f"select_backend('bogus'): the ValueError {str(info.value)!r} does not say that the "
        f"value came from the argument [DEVICE-7]")
    control_env.setenv("ANTMAN_DEVICE", "gpu0")
    with pytest.raises(ValueError, match="ANTMAN_DEVICE"):
        rt.select_backend()
    control_env.setenv("ANTMAN_DEVICE", "sim")
    assert rt.select_backend().name == "sim", "ANTMAN_DEVICE=sim was not used [DEVICE-7]"


@pytest.mark.clause("DEVICE-7")
@pytest.mark.parametrize("name", ["\u00a0sim\u2003", "sim\n", "\tSIM"])
def test_select_strips_every_white_space(rt, name) -> None:
    assert rt.select_backend(name).name == "sim", f"select_backend({name!r}) [DEVICE-7]"


@pytest.mark.clause("DEVICE-7")
@pytest.mark.parametrize("name", ["\u017fim", "si m", "sim0", "simulated"])
def test_select_takes_no_other_spelling(rt, name) -> None:
    with pytest.raises(ValueError) as info:
        rt.select_backend(name)
        pytest.fail(f"select_backend({name!r}) chose a backend [DEVICE-7]")
    assert repr(name) in str(info.value) or name in str(info.value), \
        f"select_backend({name!r}) error does not name the value: {info.value} [DEVICE-7]"


@pytest.mark.clause("DEVICE-7")
def test_sim_backend_defaults(rt) -> None:
    backend = rt.SimBackend()
    got = (backend.name, backend.gpu_count(), backend.gpu_info(0).total_memory)
    assert got == ("sim", 1, 1 << 30), \
        f"SimBackend() has (name, GPUs, memory) {got}, expected ('sim', 1, 1 GiB) [DEVICE-7]"
    chosen = rt.select_backend("sim")
    got = (chosen.gpu_count(), chosen.gpu_info(0).total_memory)
    assert got == (1, 1 << 30), \
        f"select_backend('sim') gave (GPUs, memory) {got}, expected (1, 1 GiB) [DEVICE-7]"


@pytest.mark.clause("DEVICE-7")
def test_gpu_info_is_immutable(rt) -> None:
    """What a backend reports of a GPU: no field can be assigned, the value stays as read."""
    info = rt.SimBackend(2, 16 * MiB).gpu_info(1)
    before = (info.name, info.pci_bus_id, info.total_memory, info.compute_capability)
    for field, value in (("name", "other"), ("pci_bus_id", "0000:ff:00.0"),
                         ("total_memory", MiB), ("compute_capability", (9, 0))):
        with raises(AttributeError, "DEVICE-7", f"assigning GpuInfo.{field}"):
            setattr(info, field, value)
    after = (info.name, info.pci_bus_id, info.total_memory, info.compute_capability)
    assert after == before and before[1:3] == ("0000:3c:00.0", 16 * MiB), (
        f"gpu_info(1) read {before}, then {after} after assignments; expected it unchanged, "
        f"with bus id 0000:3c:00.0 and 16 MiB [DEVICE-7]")


@pytest.mark.clause("DEVICE-7")
def test_sim_backend_host_memory_holds_one_tib(rt) -> None:
    host = rt.SimBackend(2, 16 * MiB).host_memory(1)
    got = (type(host).__name__, host.capacity)
    assert isinstance(host, rt.SimulatedHostMemory) and host.capacity == 1 << 40, (
        f"SimBackend.host_memory(1) is (type, capacity) {got}, expected a SimulatedHostMemory "
        f"of 1 TiB [DEVICE-7]")


@pytest.mark.clause("DEVICE-7")
@pytest.mark.parametrize("index", [-1, 2, 3, 0.0, 1.0, True, False, "0", None])
@pytest.mark.parametrize("call", ["gpu_info", "device_memory", "host_memory"])
def test_sim_backend_refuses_a_bad_gpu_index(rt, call, index) -> None:
    backend = rt.SimBackend(2, 16 * MiB)
    args = (index, 16 * MiB) if call == "device_memory" else (index,)
    with pytest.raises(IndexError):
        getattr(backend, call)(*args)
        pytest.fail(f"SimBackend(num_gpus=2).{call}({index!r}) accepted a GPU index outside "
                    f"the ints 0 and 1 [DEVICE-7]")


#: Run in a process where no GPU is usable: what ``auto``, an empty name (argument or
#: variable), no name at all and ``cuda`` select. Prints one JSON object.
AUTO_PROBE = r"""
import importlib, json, os, sys
rt = importlib.import_module(sys.argv[1])
os.environ.pop("ANTMAN_DEVICE", None)
out = {"auto": rt.select_backend("auto").name, "unset": rt.select_backend().name}
for empty in ("", "   ", "\u00a0"):
    out[f"argument {empty!r}"] = rt.select_backend(empty).name
    os.environ["ANTMAN_DEVICE"] = empty
    out[f"variable {empty!r}"] = rt.select_backend().name
os.environ.pop("ANTMAN_DEVICE", None)
try:
    chosen = rt.select_backend("cuda")
    out["cuda"] = f"returned a backend named {chosen.name!r}"
except RuntimeError as exc:
    out["cuda"] = "RuntimeError"
except Exception as exc:
    out["cuda"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""

#: How the probe hides the GPU: ``CUDA_VISIBLE_DEVICES`` empty (CUDA sees no device), or a
#: ``cupy`` package that cannot be imported ahead of any installed one.
HIDDEN = {"no GPU visible": {"CUDA_VISIBLE_DEVICES": ""}, "no CuPy": None}


def auto_selection_without_a_gpu(rt, tmp_path, how: str) -> dict:
    """``AUTO_PROBE`` in a new process of ``rt`` where no GPU is usable (``how``): the rule
    of DEVICE-7 checked on any host, without the test process touching a GPU."""
    env = {k: v for k, v in os.environ.items() if k != "ANTMAN_DEVICE"}
    path = [str(spec.ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    extra = HIDDEN[how]
    if extra is None:
        stub = tmp_path / "no_cupy" / "cupy"
        stub.mkdir(parents=True)
        (stub / "__init__.py").write_text("raise ImportError('CuPy hidden by the test')\n")
        path.insert(0, str(stub.parent))
    else:
        env.update(extra)
    env["PYTHONPATH"] = os.pathsep.join(path)
    try:
        done = subprocess.run([sys.executable, "-c", AUTO_PROBE, rt.__name__], env=env,
                              capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"selecting backends in a process with {how} took over {PROBE_TIMEOUT_S} s "
                    f"[DEVICE-7]")
    assert done.returncode == 0, (f"selecting backends in a process with {how} failed: "
                                  f"{done.stderr[-2000:]} [DEVICE-7]")
    return json.loads(done.stdout.strip().splitlines()[-1])


PROBE_TIMEOUT_S = 60.0     # a Python start and the runtime's import (bounded, not a speed check)


@pytest.mark.clause("DEVICE-7")
@pytest.mark.parametrize("how", sorted(HIDDEN))
def test_without_a_usable_gpu_auto_and_empty_select_sim_and_cuda_is_an_error(rt, tmp_path,
                                                                             how) -> None:
    got = auto_selection_without_a_gpu(rt, tmp_path, how)
    chosen = {k: v for k, v in got.items() if k != "cuda"}
    assert set(chosen.values()) == {"sim"}, (
        f"with {how}, 'auto', an empty name and no name must select 'sim': {chosen} [DEVICE-7]")
    assert got["cuda"] == "RuntimeError", (
        f"with {how}, select_backend('cuda') must raise RuntimeError: {got['cuda']} "
        f"[DEVICE-7]")


@pytest.mark.clause("DEVICE-8")
def test_runtime_context_lifecycle(rt, no_thread_leak, control_env, tmp_path) -> None:
    cfg = tmp_path / "cfg.json"
    cfg.write_text('{"perfControl": 100}')
    with rt.create_runtime(num_gpus=1, gpu_memory_bytes=16 * MiB, config_file=str(cfg),
                           status_file=str(tmp_path / "s.json"), poll_interval_s=0.05) as ctx:
        assert isinstance(ctx.file_listener, rt.FileListener), "[DEVICE-8]"
        assert ctx.file_listener.is_running(), "[DEVICE-8]"
        cpu = ctx.device_mgr.lookup_device("CPU:0")
        cpu.schedule(lambda: None).result(10)
        assert ctx.resource_management is not None and ctx.statistics is not None, "[DEVICE-8]"
    ctx.close()
    with pytest.raises(RuntimeError):
        ctx.new_session(None)


@pytest.mark.clause("DEVICE-8")
def test_create_runtime_defaults(rt, control_env, tmp_path) -> None:
    """num_gpus=1, gpu_memory_bytes=1 << 30, allow_growth=False, poll_interval_s=1.0, a new
    registry."""
    cfg = tmp_path / "cfg.json"
    cfg.write_text('{"perfControl": 100}')
    clock = VirtualClock()
    control_env.setenv("TF_GPU_VMEM", "false")   # RM-1 forces growth; measure without RM first
    with rt.create_runtime(backend="sim", config_file=None, status_file=None) as ctx:
        (gpu,) = gpus(ctx)
        p = gpu.get_allocator().allocate_raw(256, 256)
        got = (gpu.attributes.memory_limit, pool_bytes(gpu))
        gpu.get_allocator().deallocate_raw(p)
        assert got == (1 << 30, 1 << 30), (
            f"create_runtime() built one GPU with (memory_limit, pool after a 256-byte "
            f"allocation) = {got}, expected (1 GiB, 1 GiB): no growth [DEVICE-8]")
        assert ctx.registry is not rt.global_registry(), \
            "create_runtime(registry=None) used the global registry [DEVICE-8]"
    with rt.create_runtime(backend="sim", config_file=str(cfg), status_file=None,
                           clock=clock) as ctx:
        clock.wait_for_waiters(1, clause="DEVICE-8")
        waits = clock.sleeps_of("antman-file-listener")
        assert waits == [1_000_000], (
            f"create_runtime() without poll_interval_s: listener waits {waits}, expected "
            f"[1000000] µs [DEVICE-8]")


@pytest.mark.clause("DEVICE-8")
def test_close_joins_the_listener_with_handlers_of_its_own(rt, no_thread_leak, control_env,
                                                           tmp_path) -> None:
    """A handler registered on the context's listener besides the runtime's keeps its thread
    running after the resource management left it; close() must still stop and join it."""
    cfg = tmp_path / "cfg.json"
    cfg.write_text('{"perfControl": 100}')
    ctx = rt.create_runtime(num_gpus=1, gpu_memory_bytes=16 * MiB, config_file=str(cfg),
                            status_file=None, poll_interval_s=0.05)
    ctx.file_listener.register_file_listener(str(tmp_path / "other.json"), "mine",
                                             lambda content: None)
    ctx.close()
    assert not ctx.file_listener.is_running(), \
        "RuntimeContext.close() left the file listener running [DEVICE-8]"
    left = [t.name for t in antman_threads() if t.name == "antman-file-listener"]
    assert left == [], f"RuntimeContext.close() returned with {left} alive [DEVICE-8]"


@pytest.mark.clause("DEVICE-8")
def test_a_session_whose_close_fails_does_not_cut_the_teardown_short(
        rt, no_thread_leak, control_env, tmp_path) -> None:
    """The first of two sessions fails to close: the other is closed all the same, the
    actions are unregistered, the listener stopped, and close() raises that failure."""
    cfg, status = tmp_path / "cfg.json", tmp_path / "status.json"
    cfg.write_text('{"perfControl": 100}')
    registry = rt.SessionRunActionRegistry()
    ctx = rt.create_runtime(num_gpus=1, gpu_memory_bytes=16 * MiB, config_file=str(cfg),
                            status_file=str(status), registry=registry, poll_interval_s=0.05)
    graph = rt.Graph()
    graph.add_node("c", "Const", value=1.0)
    failing, other = ctx.new_session(graph), ctx.new_session(graph)

    class CloseFailed(Exception):
        pass

    def failing_close() -> None:
        raise CloseFailed("injected: this session cannot close")

    failing.close = failing_close
    errors: list[BaseException] = []
    try:
        ctx.close()
    except Exception as exc:       # noqa: BLE001 - which error it is is checked below
        errors.append(exc)
    assert len(errors) == 1 and isinstance(errors[0], CloseFailed), (
        f"close() with a session whose close raises raised {errors!r}, expected that "
        f"session's error [DEVICE-8]")
    assert other.closed and not ctx.file_listener.is_running() \
        and registry.actions(rt.Grouping.POST_SESSION_RUN) == [], (
        f"after a session failed to close: other session closed {other.closed}, listener "
        f"running {ctx.file_listener.is_running()}, actions left "
        f"{registry.actions(rt.Grouping.POST_SESSION_RUN)} [DEVICE-8]")


@pytest.mark.clause("DEVICE-8")
def test_every_session_close_failure_is_logged(rt, no_thread_leak, caplog, tmp_path) -> None:
    """Two sessions fail to close: close() raises the first failure, and both failures are
    logged at ERROR, the one not raised included, each with its exception's text."""
    registry = rt.SessionRunActionRegistry()
    ctx = rt.create_runtime(num_gpus=1, gpu_memory_bytes=16 * MiB,
                            config_file=str(tmp_path / "cfg.json"),
                            status_file=str(tmp_path / "status.json"), registry=registry)
    graph = rt.Graph()
    graph.add_node("c", "Const", value=1.0)
    texts = ["injected: the first session cannot close", "injected: the second cannot close"]

    class CloseFailed(Exception):
        pass

    for text in texts:
        def failing_close(text: str = text) -> None:
            raise CloseFailed(text)

        ctx.new_session(graph).close = failing_close
    caplog.set_level(logging.ERROR)
    with pytest.raises(CloseFailed) as raised:
        ctx.close()
    logged = runtime_records(caplog, rt, logging.ERROR)

    def mentions(record: logging.LogRecord, text: str) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return text in record.getMessage() or (exc is not None and text in str(exc))

    missing = [t for t in texts if not any(mentions(r, t) for r in logged)]
    assert str(raised.value) in texts and not missing, (
        f"close() with two sessions whose close raises raised {raised.value!r}; the "
        f"failures {missing} were not logged at ERROR with their text: {logged!r} "
        f"[DEVICE-8]")


@pytest.mark.clause("DEVICE-8")
def test_a_failed_create_runtime_leaves_no_action_registered(rt, no_thread_leak, control_env,
                                                             tmp_path) -> None:
    """Both actions are built and registered before the devices: when the devices cannot
    be built (more GPUs than the backend has), neither stays in the caller's registry."""
    cfg, status = tmp_path / "cfg.json", tmp_path / "status.json"
    cfg.write_text('{"perfControl": 100}')
    registry = rt.SessionRunActionRegistry()
    with pytest.raises(ValueError):
        rt.create_runtime(num_gpus=2, backend=rt.SimBackend(1, 16 * MiB), config_file=str(cfg),
                          status_file=str(status), registry=registry)
        pytest.fail("create_runtime(num_gpus=2) over one GPU built a runtime [DEVICE-8]")
    left = registry.actions(rt.Grouping.POST_SESSION_RUN)
    assert left == [], (
        f"a create_runtime that raised left {[(phase, a.name) for phase, a in left]} "
        f"registered [DEVICE-8]")


@pytest.mark.clause("DEVICE-8")
def test_a_string_num_gpus_with_a_config_file_names_num_gpus(rt, control_env, tmp_path) -> None:
    """The resource management is built before the devices: a num_gpus that is no number
    at all still ends in the ValueError naming num_gpus, not in an error of the action."""
    cfg = tmp_path / "cfg.json"
    cfg.write_text('{"perfControl": 100}')
    registry = rt.SessionRunActionRegistry()
    with pytest.raises(Exception) as info:
        rt.create_runtime(num_gpus="two", backend=rt.SimBackend(2, 16 * MiB),
                          config_file=str(cfg), status_file=None, registry=registry).close()
        pytest.fail("create_runtime(num_gpus='two') built a runtime [DEVICE-8]")
    assert isinstance(info.value, ValueError) and names_identifier(info.value, "num_gpus"), (
        f"create_runtime(num_gpus='two') with a config file raised {info.value!r}, expected a "
        f"ValueError naming num_gpus [DEVICE-8]")


@pytest.mark.clause("DEVICE-8")
@pytest.mark.parametrize("bad", [0, True])
def test_bad_gpu_memory_bytes_over_a_backend_that_cannot_describe_its_gpus(
        rt, no_thread_leak, control_env, tmp_path, bad) -> None:
    """The resource management, built before the devices, asks the backend for its GPUs'
    bus ids: a backend that cannot describe a GPU still ends, with a bad gpu_memory_bytes,
    in the ValueError naming gpu_memory_bytes, not in an error of the bus id lookup."""

    class Undescribable(rt.SimBackend):
        def gpu_info(self, index):
            raise RuntimeError(f"GPU {index} cannot be described")

    cfg = tmp_path / "cfg.json"
    cfg.write_text('{"perfControl": 100}')
    with pytest.raises(Exception) as info:
        rt.create_runtime(num_gpus=2, gpu_memory_bytes=bad, backend=Undescribable(2, 16 * MiB),
                          config_file=str(cfg), status_file=None).close()
        pytest.fail(f"create_runtime(gpu_memory_bytes={bad!r}) built a runtime [DEVICE-8]")
    assert isinstance(info.value, ValueError) \
        and names_identifier(info.value, "gpu_memory_bytes"), (
        f"create_runtime(gpu_memory_bytes={bad!r}) over a backend whose gpu_info raises, with "
        f"a config file, raised {info.value!r}, expected a ValueError naming "
        f"gpu_memory_bytes [DEVICE-8]")


@pytest.mark.clause("DEVICE-8")
@pytest.mark.parametrize("bad", [-1, True, 1.0, "1", 4, 5])
def test_num_gpus_must_be_an_int_in_range(rt, control_env, bad) -> None:
    """The error names num_gpus, the value given and the count of the backend (3) that
    bounds it, whatever is wrong with the value."""
    with pytest.raises(ValueError) as refused:
        rt.create_runtime(num_gpus=bad, backend=rt.SimBackend(3, 16 * MiB), config_file=None,
                          status_file=None)
        pytest.fail(f"create_runtime(num_gpus={bad!r}) built a runtime [DEVICE-8]")
    message = str(refused.value)
    assert (names_identifier(refused.value, "num_gpus") and repr(bad) in message
            and re.search(r"(?<![0-9.'-])3(?![0-9.'])", message)), (
        f"create_runtime(num_gpus={bad!r}) over a backend of 3 GPUs raised {message!r}: it "
        f"must name num_gpus, the value {bad!r} and the backend's count 3 [DEVICE-8]")


@pytest.mark.clause("DEVICE-8")
def test_zero_gpus_is_a_cpu_only_runtime(rt, control_env) -> None:
    with rt.create_runtime(num_gpus=0, backend=rt.SimBackend(2, 16 * MiB), config_file=None,
                           status_file=None) as ctx:
        names = [d.name for d in ctx.device_mgr.list_devices()]
        assert names == [PREFIX + "CPU:0"], \
            f"create_runtime(num_gpus=0) built {names}, expected the CPU device only [DEVICE-8]"


@pytest.mark.clause("DEVICE-8")
def test_too_many_gpus(rt, control_env) -> None:
    with pytest.raises(ValueError):
        rt.create_runtime(num_gpus=2, backend=rt.SimBackend(1, 16 * MiB), config_file=None,
                          status_file=None)


@pytest.mark.clause("DEVICE-6")
@pytest.mark.parametrize("device", ["CPU:0"])
def test_allocation_ids_are_positive_and_never_reused(rt, runtimes, device) -> None:
    """The CPU device's allocator tracks sizes, so it gives each allocation its own id > 0
    (API-3), an address freed and handed out again included (a GPU's BFC: BFC-15)."""
    a = runtimes().device_mgr.lookup_device(device).get_allocator()
    if not a.tracks_allocation_sizes():
        pytest.skip(f"the {device} allocator does not track sizes: allocation_id may be 0")
    ptrs = [a.allocate_raw(64, 1024) for _ in range(3)]
    ids = {p: a.allocation_id(p) for p in ptrs}
    a.deallocate_raw(ptrs[1])
    again = a.allocate_raw(64, 1024)
    new_id = a.allocation_id(again)
    every = list(ids.values()) + [new_id]
    assert all(i > 0 for i in every) and len(set(every)) == 4, (
        f"{device} allocator ({a.name}): allocation ids {every} of four allocations (the last "
        f"one after a free): expected four distinct ids greater than 0 [DEVICE-6]")
    for p in (ptrs[0], ptrs[2], again):
        a.deallocate_raw(p)


# -- argument edges of create_runtime -----------------------------------------------------------

@pytest.mark.clause("DEVICE-8")
@pytest.mark.parametrize("argument,bad", [
    ("num_gpus", -1), ("num_gpus", True), ("num_gpus", 1.0), ("num_gpus", None),
    ("num_gpus", 3), ("gpu_memory_bytes", 0), ("gpu_memory_bytes", -1),
    ("gpu_memory_bytes", True), ("gpu_memory_bytes", float(MiB)), ("gpu_memory_bytes", "1024"),
    ("gpu_memory_bytes", None), ("poll_interval_s", 0), ("poll_interval_s", -1.0),
    ("poll_interval_s", float("nan")), ("poll_interval_s", float("inf")),
    ("poll_interval_s", True), ("poll_interval_s", None)])
def test_create_runtime_arguments_name_themselves(rt, control_env, argument, bad) -> None:
    before = set(antman_threads())
    backend = "sim" if bad is None else rt.SimBackend(2, 16 * MiB)   # None: see below
    with pytest.raises(ValueError) as info:
        ctx = rt.create_runtime(backend=backend, config_file=None,
                                status_file=None, **{argument: bad})
        ctx.close()
    assert names_identifier(info.value, argument), (
        f"create_runtime({argument}={bad!r}): the ValueError {info.value!r} does not name the "
        f"argument (as a whole word) [DEVICE-8]")
    started = sorted(t.name for t in set(antman_threads()) - before if t.is_alive())
    assert not started, f"create_runtime({argument}={bad!r}) left threads {started} [DEVICE-8]"


@pytest.mark.clause("DEVICE-8")
def test_smallest_gpu_memory_is_one_byte(rt, control_env) -> None:
    with rt.create_runtime(gpu_memory_bytes=1, backend=rt.SimBackend(1, 16 * MiB),
                           config_file=None, status_file=None) as ctx:
        gpu = [d for d in ctx.device_mgr.list_devices() if str(d.device_type).upper() == "GPU"]
        stats = gpu[0].get_allocator().get_stats()
        assert stats.bytes_limit == 1, \
            f"gpu_memory_bytes=1 gave a limit of {stats.bytes_limit} [DEVICE-8]"


@pytest.mark.clause("DEVICE-8")
def test_none_with_a_backend_object_takes_the_backends_own(rt, control_env) -> None:
    with rt.create_runtime(num_gpus=None, gpu_memory_bytes=None,
                           backend=rt.SimBackend(2, 16 * MiB), config_file=None,
                           status_file=None) as ctx:
        gpu = [d for d in ctx.device_mgr.list_devices() if str(d.device_type).upper() == "GPU"]
        limits = [d.get_allocator().get_stats().bytes_limit for d in gpu]
        assert limits == [16 * MiB, 16 * MiB], (
            f"num_gpus=None, gpu_memory_bytes=None on a 2-GPU backend of 16 MiB each gave "
            f"limits {limits}, expected every GPU with its whole memory [DEVICE-8]")


@pytest.mark.clause("DEVICE-8")
def test_the_backend_is_attached_once_and_detached_once_after_the_devices_closed(
        rt, control_env) -> None:
    """create_runtime attaches its device manager to the backend once the devices exist; close()
    detaches that same manager once, when every device is already closed, and a second close()
    detaches nothing more."""
    calls: list = []

    class Recording:
        def __init__(self, inner) -> None:
            self._inner, self.name, self.xp = inner, inner.name, inner.xp

        def __getattr__(self, attr: str):
            return getattr(self._inner, attr)

        def attach(self, device_mgr) -> None:
            calls.append(("attach", device_mgr, [d.closed for d in device_mgr.list_devices()]))
            self._inner.attach(device_mgr)

        def detach(self, device_mgr) -> None:
            calls.append(("detach", device_mgr, [d.closed for d in device_mgr.list_devices()]))
            self._inner.detach(device_mgr)

    ctx = rt.create_runtime(num_gpus=2, backend=Recording(rt.SimBackend(2, 16 * MiB)),
                            config_file=None, status_file=None)
    mgr = ctx.device_mgr
    assert calls == [("attach", mgr, [False, False, False])], (
        f"create_runtime on a 2-GPU backend called {calls}; expected attach(device_mgr) once, "
        f"with the three devices built and open [DEVICE-8]")
    ctx.close()
    ctx.close()
    assert calls[1:] == [("detach", mgr, [True, True, True])], (
        f"close() twice called {calls[1:]} on the backend; expected detach(device_mgr) once, "
        f"with every device already closed [DEVICE-8]")


# the CPU allocator's public methods, each called on an allocator holding one allocation p
CPU_ALLOCATOR_METHODS = {
    "allocate_raw": lambda a, p: a.deallocate_raw(a.allocate_raw(64, 100)),
    "deallocate_raw": lambda a, p: a.deallocate_raw(a.allocate_raw(64, 100)),
    "get_stats": lambda a, p: a.get_stats(),
    "clear_stats": lambda a, p: a.clear_stats(),
}


@pytest.mark.clause("DEVICE-6")
@pytest.mark.parametrize("method", sorted(CPU_ALLOCATOR_METHODS))
def test_every_method_of_the_cpu_allocator_takes_its_lock(rt, monkeypatch, runtimes,
                                                          method) -> None:
    """The CPU device's host allocator is shared by every kernel of the CPU device, run on
    several threads at once (the inter-op pool): an allocation bumps the cursor, records the
    pointer and adds to four statistics, a free removes the pointer and subtracts its size,
    get_stats copies the statistics field by field and clear_stats resets three of them from
    a fourth. Forced, not hoped for: the allocator's lock is watched (fixtures/interleave.py)
    and each line the method runs records whether the calling thread held it; some line
    must."""
    from fixtures.interleave import lock_held_in, watch_lock
    a = runtimes().device_mgr.lookup_device("CPU:0").get_allocator()
    p = a.allocate_raw(64, 1000)
    watched = watch_lock(monkeypatch, a, "_lock", "the CPU allocator's lock")
    # get_stats' copy is made by a function of its own: the lines of get_stats itself are
    # those that must hold the lock while it is made
    _, held = lock_held_in(lambda: CPU_ALLOCATOR_METHODS[method](a, p), method, watched)
    a.deallocate_raw(p)
    if not held:
        pytest.skip(f"the check follows the reference's design ({method} a method of the "
                    f"allocator's class); this runtime's {method} ran no line of its own")
    assert any(held), (
        f"{method} ran {len(held)} line(s), none with the CPU allocator's lock held: a "
        f"concurrent allocation or free can be lost or seen half made, two allocations can "
        f"get the same pointer, and the statistics stop adding up [DEVICE-6]")


@pytest.mark.clause("DEVICE-6")
def test_cpu_allocator_name_sizes_and_alignment(rt, runtimes) -> None:
    a = runtimes().device_mgr.lookup_device("CPU:0").get_allocator()
    assert isinstance(a.name, str) and a.name, f"the CPU allocator's name {a.name!r} [DEVICE-6]"
    size = MiB + 1
    p = a.allocate_raw(64, size)
    got = (a.requested_size(p), a.allocated_size(p))
    a.deallocate_raw(p)
    assert got[0] == size and got[1] >= size, (
        f"an allocation of {size} bytes has (requested_size, allocated_size) {got}: expected "
        f"{size} and at least {size} [DEVICE-6]")
    held = []
    for alignment in (1, 64, 128, 4096, 64, 256, 2, 4, 8, 16, 32, 512, 1024, 2048, 2, 32):
        held.append(a.allocate_raw(alignment, 3 * alignment + 1))   # odd sizes: no luck
        assert held[-1] % alignment == 0, (
            f"allocate_raw({alignment}, {3 * alignment + 1}) returned {held[-1]:#x}, not a "
            f"multiple of {alignment} (allocations before it: "
            f"{[hex(q) for q in held[:-1]]}) [DEVICE-6]")
    for q in held:
        a.deallocate_raw(q)


@pytest.mark.clause("DEVICE-6")
def test_cpu_allocator_aligns_to_8_bytes_at_least(rt, runtimes) -> None:
    """Alignments 1, 2 and 4 of odd sizes, from a new device's allocator (its first address
    included): every address is still a multiple of 8, as malloc's are."""
    a = runtimes().device_mgr.lookup_device("CPU:0").get_allocator()
    held = [a.allocate_raw(alignment, 2 * alignment + 1) for alignment in (1, 2, 4, 1, 1, 2)]
    for q in held:
        a.deallocate_raw(q)
    odd = [hex(q) for q in held if q % 8]
    assert not odd, (f"allocate_raw with alignments 1, 2, 4, 1, 1, 2 returned {odd}, not "
                     f"multiples of 8 (all: {[hex(q) for q in held]}) [DEVICE-6]")


#: Run in a new process: the id of the CPU allocator's first allocation (DEVICE-6, API-3).
FIRST_ID_PROBE = r"""
import importlib, json, sys
rt = importlib.import_module(sys.argv[1])
with rt.create_runtime(backend="sim", num_gpus=0, config_file=None, status_file=None) as ctx:
    a = ctx.device_mgr.lookup_device("CPU:0").get_allocator()
    p = a.allocate_raw(64, 16)
    print(json.dumps({"id": a.allocation_id(p)}))
    a.deallocate_raw(p)
"""


@pytest.mark.clause("DEVICE-6")
def test_the_first_cpu_allocation_of_a_process_has_id_1(rt) -> None:
    """Every other test runs in a process that has allocated before: only a new process sees
    the first id a runtime hands out."""
    env = {k: v for k, v in os.environ.items() if k != "ANTMAN_DEVICE"}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(spec.ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
    try:
        done = subprocess.run([sys.executable, "-c", FIRST_ID_PROBE, rt.__name__], env=env,
                              capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"a new process's first CPU allocation took over {PROBE_TIMEOUT_S} s "
                    f"[DEVICE-6]")
    assert done.returncode == 0, (f"a new process's first CPU allocation failed: "
                                  f"{done.stderr[-2000:]} [DEVICE-6]")
    first = json.loads(done.stdout.strip().splitlines()[-1])["id"]
    assert first == 1, (f"the first CPU allocation of a new process has allocation_id {first}, "
                        f"expected 1 (ids count from 1) [DEVICE-6]")


@pytest.mark.clause("DEVICE-6")
@pytest.mark.parametrize("call", ["deallocate_raw", "requested_size", "allocated_size",
                                  "allocation_id"])
def test_cpu_allocator_refuses_a_pointer_that_is_not_live(rt, runtimes, call) -> None:
    a = runtimes().device_mgr.lookup_device("CPU:0").get_allocator()
    kept = a.allocate_raw(64, 256)
    freed = a.allocate_raw(64, 128)
    a.deallocate_raw(freed)
    before = a.get_stats()
    for ptr, what in ((freed, "a freed pointer"), (kept + 64, "a pointer inside an allocation"),
                      (max(kept, freed) + (1 << 20), "a pointer never returned")):
        refused: list[Exception] = []
        with raises(rt.InvalidPointerError, "DEVICE-6", f"{call}({ptr:#x}), {what},"):
            try:
                getattr(a, call)(ptr)
            except rt.InvalidPointerError as exc:
                refused.append(exc)
                raise
        assert names_identifier(refused[0], call), (
            f"{call}({ptr:#x}), {what}, raised {refused[0]!r}, which does not name the call "
            f"[DEVICE-6]")
    after = a.get_stats()
    a.deallocate_raw(kept)
    got = (after.num_allocs, after.bytes_in_use, after.peak_bytes_in_use)
    want = (before.num_allocs, before.bytes_in_use, before.peak_bytes_in_use)
    assert got == want, (f"refused {call} calls changed the CPU allocator's (num_allocs, "
                         f"bytes_in_use, peak_bytes_in_use) from {want} to {got} [DEVICE-6]")


@pytest.mark.clause("DEVICE-6")
def test_cpu_allocations_never_overlap(rt, runtimes) -> None:
    a = runtimes().device_mgr.lookup_device("CPU:0").get_allocator()
    sizes = [1000, 1, 4096, 65, 64, 3 * MiB, 7]
    held = sorted((a.allocate_raw(64, n), n) for n in sizes)
    for q, _ in held:
        a.deallocate_raw(q)
    overlaps = [(hex(p), n, hex(q)) for (p, n), (q, _) in zip(held, held[1:]) if p + n > q]
    assert not overlaps, (f"live CPU allocations overlap: (address, size, next address) "
                          f"{overlaps} [DEVICE-6]")


@pytest.mark.clause("DEVICE-6")
def test_cpu_addresses_are_never_null(rt, runtimes) -> None:
    a = runtimes().device_mgr.lookup_device("CPU:0").get_allocator()
    held = [a.allocate_raw(alignment, n) for alignment, n in ((64, 256), (4096, 0), (1, 1))]
    for q in held:
        a.deallocate_raw(q)
    assert all(q > 0 for q in held), (
        f"a new CPU allocator's first allocations returned {held}: an address is greater "
        f"than 0, C's null pointer [DEVICE-6]")


@pytest.mark.clause("DEVICE-6")
@pytest.mark.parametrize("bad", [-1, -4096, 256.0, "256"], ids=repr)
def test_cpu_allocator_refuses_a_bad_size(rt, runtimes, bad) -> None:
    a = runtimes().device_mgr.lookup_device("CPU:0").get_allocator()
    kept = a.allocate_raw(64, 256)
    before = a.get_stats()
    refused: list[ValueError] = []
    with raises(ValueError, "DEVICE-6", f"allocate_raw(64, {bad!r})"):
        try:
            a.allocate_raw(64, bad)
        except ValueError as exc:
            refused.append(exc)
            raise
    after = a.get_stats()
    a.deallocate_raw(kept)
    assert names_identifier(refused[0], a.name), (
        f"allocate_raw(64, {bad!r}) error {refused[0]!r} does not name the allocator "
        f"{a.name!r} [DEVICE-6]")
    assert after == before, (f"a refused allocate_raw(64, {bad!r}) changed the CPU "
                             f"allocator's statistics from {before} to {after} [DEVICE-6]")


@pytest.mark.clause("DEVICE-7")
@pytest.mark.parametrize("name", [5, 1.5, ["sim"]], ids=repr)
def test_select_refuses_a_name_that_is_not_a_str(rt, name) -> None:
    with raises(ValueError, "DEVICE-7", f"select_backend({name!r})"):
        rt.select_backend(name)


@pytest.mark.clause("DEVICE-8")
def test_close_closes_every_device(rt, control_env) -> None:
    ctx = rt.create_runtime(backend="sim", num_gpus=2, gpu_memory_bytes=16 * MiB,
                            config_file=None, status_file=None)
    devices = ctx.device_mgr.list_devices()
    open_before = [d.name for d in devices if d.closed is not False]
    ctx.close()
    not_closed = [d.name for d in devices if d.closed is not True]
    assert (open_before, not_closed) == ([], []), (
        f"devices closed before close(): {open_before}; devices whose closed is not True after "
        f"the context's close(): {not_closed} [DEVICE-8]")
