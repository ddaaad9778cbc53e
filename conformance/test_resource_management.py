"""RM clauses: GPUResourceManagement and GPUUsageAdjustment.

Config parsing and the fault matrix go through a FileListener on the virtual clock (the
config writer rewrites the file, ``poll`` delivers it); limits are observed on the GPU
allocators of a runtime from ``create_runtime``; the throttle arithmetic is checked
exactly on the virtual clock against a model of the formula.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import re
import sys
import tempfile
import threading
import time
import weakref
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.checks import names_identifier
from conformance.control_helpers import (MiB, bus_id, bytes_limit, control_env,  # noqa: F401
                                         device_bfc, gpus, joined, listener, not_joined, poll,
                                         pool_bytes, run_in_thread, runtime_records, runtimes,
                                         perf_in_force, vclock, wait_for_poller)
from conformance.control_helpers import expect_value_error
from conformance.preconditions import precondition, precondition_holds
from fixtures.config_writer import BAD_TYPES, MALFORMED, config_document
from fixtures.threads import no_thread_leak  # noqa: F401
from fixtures.virtual_clock import VirtualClock

pytestmark = pytest.mark.capability("resource_management", "file_listener", "virtual_clock")

BUS = "3b:00.0"     # the key the fault fixtures use; tests on devices use the real bus ids
UINT64_MAX = (1 << 64) - 1


def make_rm(rt, path, clock, fl, **kw):
    return rt.GPUResourceManagement(str(path), clock=clock, file_listener=fl, **kw)


def post(rt, ctx=None, duration=1000, session=None):
    return rt.SessionRunActionOptions(device_mgr=None if ctx is None else ctx.device_mgr,
                                      session=session, graph_id=1, sess_duration_us=duration)


@pytest.fixture
def managed(rt, control_env, vclock, listener, config_writer):
    """(rm, writer): a GPUResourceManagement on the config writer's path, virtual clock."""
    rm = make_rm(rt, config_writer.path, vclock, listener)
    yield rm, config_writer
    rm.close()


def deliver(writer_call, clock) -> None:
    """Run a ConfigWriter call, then let the listener check once."""
    writer_call()
    clock.wait_for_waiters(1, clause="FL-2")
    poll(clock)


# -- RM-1, RM-2: enabling ---------------------------------------------------------------

@pytest.mark.clause("RM-1")
def test_enabling_forces_growth_and_vmem(rt, control_env, vclock, listener, tmp_path) -> None:
    control_env.setenv("TF_GPU_VMEM", "false")
    control_env.setenv("TF_FORCE_GPU_ALLOW_GROWTH", "false")
    rm = make_rm(rt, tmp_path / "cfg.json", vclock, listener)
    try:
        got = (os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH"), os.environ.get("TF_GPU_VMEM"))
        assert got == ("true", "true"), \
            f"GPUResourceManagement(path) left (ALLOW_GROWTH, VMEM) = {got} [RM-1]"
    finally:
        rm.close()


@pytest.mark.clause("RM-1")
@pytest.mark.parametrize("path", [None, ""])
def test_disabled_changes_nothing(rt, control_env, vclock, listener, path, tmp_path) -> None:
    """``None`` and ``""`` disable the instance, also while ``$GPU_CONFIG_FILE`` names a
    config file (only the argument left out reads the variable)."""
    (tmp_path / "cfg.json").write_text('{"perfControl": 35}', encoding="utf-8")
    control_env.setenv("GPU_CONFIG_FILE", str(tmp_path / "cfg.json"))
    control_env.setenv("TF_GPU_VMEM", "false")
    rm = rt.GPUResourceManagement(path, clock=vclock, file_listener=listener)
    try:
        assert os.environ.get("TF_GPU_VMEM") == "false", "a disabled instance set TF_GPU_VMEM [RM-1]"
        assert "TF_FORCE_GPU_ALLOW_GROWTH" not in os.environ, "[RM-1]"
        assert not listener.is_running(), "a disabled instance registered a file handler [RM-1]"
        rm.run_action(post(rt))
        assert rm.perf_control == 100 and vclock.records == [], "[RM-1]"
    finally:
        rm.close()


@pytest.mark.clause("RM-1")
def test_default_path_from_environment(rt, control_env, vclock, listener, config_writer) -> None:
    config_writer.write(perf=35)
    control_env.setenv("GPU_CONFIG_FILE", str(config_writer.path))
    rm = rt.GPUResourceManagement(clock=vclock, file_listener=listener)
    try:
        assert rm.perf_control == 35, "GPU_CONFIG_FILE was not used as the default path [RM-1]"
    finally:
        rm.close()


@pytest.mark.clause("RM-1", "DEVICE-8")
def test_runtime_builds_management_before_the_gpus(rt, runtimes, control_env, tmp_path) -> None:
    control_env.setenv("TF_GPU_VMEM", "false")
    ctx = runtimes(config_file=str(tmp_path / "cfg.json"))
    gpu = gpus(ctx)[0]
    allocator = gpu.get_allocator()
    assert allocator.name == "GPUVMem_0_bfc", \
        f"GPU allocator {allocator.name!r}: TF_GPU_VMEM was not forced before the GPUs [RM-1]"
    p = allocator.allocate_raw(256, 256)
    try:
        assert pool_bytes(gpu) == MiB, (f"pool after a 256-byte allocation is {pool_bytes(gpu)}, "
                                        f"expected 1 MiB (growth forced on) [RM-1]")
    finally:
        allocator.deallocate_raw(p)


@pytest.mark.clause("RM-2")
def test_startup_config_in_effect_when_constructed(rt, control_env, vclock, listener,
                                                   config_writer) -> None:
    config_writer.write(perf=30, limits={BUS: 8 * MiB})
    registry = rt.SessionRunActionRegistry()
    rm = make_rm(rt, config_writer.path, vclock, listener, registry=registry)
    try:
        assert rm.perf_control == 30, f"start-up perfControl not applied: {rm.perf_control} [RM-2]"
        assert rm.memory_limits == {BUS: 8 * MiB}, f"start-up limits: {rm.memory_limits} [RM-2]"
        assert registry.get_action(1, 2, "GPUResourceManagement") is rm, \
            "GPUResourceManagement(registry=r) is not at (POST, 2) in r [RM-2]"
        listener.unregister_file_listener(str(config_writer.path), "GPUResourceManage")
        assert not listener.is_running(), \
            "no handler named 'GPUResourceManage' was registered on the config path [RM-2]"
    finally:
        rm.close()


@pytest.mark.clause("RM-2")
def test_without_a_listener_the_global_one_delivers(rt, no_thread_leak, control_env,
                                                    config_writer) -> None:
    """``file_listener`` None (the default) registers the handler with the global listener
    (on the real clock): the start-up content is delivered on the constructing thread, so
    it is in effect when the constructor returns, and close() unregisters it."""
    config_writer.write(perf=30, limits={BUS: 8 * MiB})
    rm = rt.GPUResourceManagement(str(config_writer.path), clock=VirtualClock())
    try:
        assert (rm.perf_control, rm.memory_limits) == (30, {BUS: 8 * MiB}), (
            f"GPUResourceManagement(path) without a file_listener holds "
            f"{(rm.perf_control, rm.memory_limits)}: the start-up config was not delivered "
            f"through the global listener [RM-2]")
    finally:
        rm.close()


@pytest.mark.clause("RM-2", "RM-16")
def test_after_close_content_is_ignored(rt, managed, vclock, listener) -> None:
    rm, writer = managed
    deliver(lambda: writer.write(perf=40), vclock)
    assert rm.perf_control == 40, "[RM-2]"
    rm.close()
    rm.close()
    assert not listener.is_running(), "close() left the file handler registered [RM-16]"
    writer.write(perf=60)
    listener.register_file_listener(str(writer.path), "probe", lambda content: None)
    vclock.wait_for_waiters(1, clause="FL-2")
    poll(vclock)
    assert rm.perf_control == 40, "content written after close() was applied [RM-16]"


# -- RM-3 .. RM-6: parsing ----------------------------------------------------------------

@pytest.mark.clause("RM-3")
def test_layout_and_ignored_keys(rt, managed, vclock) -> None:
    rm, writer = managed
    doc = {"name": "Odps/trip_search_0/worker@h04a13286.nt12#18", "extra": [1, 2],
           "gpuConfigInfo": {BUS: {"maxDeviceMem": MiB, "note": "x"},
                             "3B:00.0": {"maxDeviceMem": 2 * MiB}},
           "perfControl": 70}
    assert rm.parse_manage_info_from_json(json.dumps(doc)) is True, \
        "parse_manage_info_from_json(good doc) returned False [RM-3]"
    assert rm.perf_control == 70, "[RM-3]"
    assert rm.memory_limits == {BUS: MiB, "3B:00.0": 2 * MiB}, \
        f"keys must be exact: {rm.memory_limits} [RM-3]"
    assert rm.parse_manage_info_from_json(b'{"perfControl": 71}') is True, "[RM-3]"
    assert rm.perf_control == 71, "bytes content was not parsed [RM-3]"


@pytest.mark.clause("RM-3")
@pytest.mark.parametrize("doc", [
    '{"perfControl":70,"gpuConfigInfo":{"%s":{"maxDeviceMem":1048576}}}' % BUS,
    '{"name": "", "perfControl": 70, "gpuConfigInfo": {"%s": {"note": "", '
    '"maxDeviceMem": 1048576}, "": {}}, "extra": ["", ""]}' % BUS],
    ids=["without_white_space", "empty_strings"])
def test_compact_documents_and_empty_strings(rt, managed, doc) -> None:
    """JSON as a program writes it: no white space between tokens, and empty strings in the
    members a config ignores."""
    rm, _ = managed
    ok = rm.parse_manage_info_from_json(doc)
    assert ok is True and (rm.perf_control, rm.memory_limits) == (70, {BUS: MiB}), (
        f"{doc} gave {(rm.perf_control, rm.memory_limits)} (returned {ok}), expected "
        f"perfControl 70 and {{{BUS!r}: {MiB}}} [RM-3]")


@pytest.mark.clause("RM-3")
@pytest.mark.parametrize("ws", [" ", "\t", "\n", "\r", " \t\n\r "],
                         ids=["space", "tab", "line_feed", "carriage_return", "all_four"])
def test_white_space_between_every_two_tokens(rt, managed, ws) -> None:
    """JSON's white space (RFC 8259: space, tab, line feed, carriage return) before and after
    every token, a member name and its colon included, at the root, in the members the config
    reads and in those it ignores."""
    rm, _ = managed
    tokens = ["{", '"name"', ":", '"x"', ",", '"perfControl"', ":", "70", ",", '"extra"', ":",
              "[", "1", ",", "{", '"k"', ":", "2", "}", "]", ",", '"gpuConfigInfo"', ":", "{",
              f'"{BUS}"', ":", "{", '"note"', ":", "null", ",", '"maxDeviceMem"', ":",
              "1048576", "}", "}", "}"]
    doc = ws + ws.join(tokens) + ws
    ok = rm.parse_manage_info_from_json(doc)
    assert ok is True and (rm.perf_control, rm.memory_limits) == (70, {BUS: MiB}), (
        f"{doc!r} gave {(rm.perf_control, rm.memory_limits)} (returned {ok}), expected "
        f"perfControl 70 and {{{BUS!r}: {MiB}}} [RM-3]")


@pytest.mark.clause("RM-3")
def test_member_names_in_other_spellings_are_other_keys(rt, managed) -> None:
    rm, _ = managed
    rm.parse_manage_info_from_json(json.dumps(
        {"gpuConfigInfo": {BUS: {"maxDeviceMem": 4 * MiB}}, "perfControl": 40}))
    doc = ('{"PerfControl": 10, "perfcontrol": 20, "perfControl ": 30, " perfControl": 31, '
           '"perfControl\\u00a0": 32, "GPUConfigInfo": {"%s": {"maxDeviceMem": 1048576}}, '
           '"gpuconfiginfo": {"%s": {"maxDeviceMem": 1048576}}, '
           '"gpuConfigInfo": {"%s": {"MaxDeviceMem": 1048576, "maxdevicemem": 2097152, '
           '"maxDeviceMem ": 3145728}}}' % (BUS, BUS, BUS))
    assert rm.parse_manage_info_from_json(doc) is True, \
        "ignored keys in other spellings were counted as rejections [RM-3]"
    assert (rm.perf_control, rm.memory_limits) == (40, {BUS: 4 * MiB}), (
        f"keys spelled differently from perfControl / gpuConfigInfo / maxDeviceMem changed "
        f"the state to {(rm.perf_control, rm.memory_limits)} [RM-3]")


@pytest.mark.clause("RM-3")
def test_the_last_of_duplicate_keys_counts(rt, managed) -> None:
    rm, _ = managed
    assert rm.parse_manage_info_from_json(
        '{"perfControl": 10, "gpuConfigInfo": {"%s": {"maxDeviceMem": 1, "maxDeviceMem": 2}}, '
        '"perfControl": 20}' % BUS), "a document with duplicate keys was rejected [RM-3]"
    assert (rm.perf_control, rm.memory_limits) == (20, {BUS: 2}), \
        f"duplicate keys gave {(rm.perf_control, rm.memory_limits)}, expected the last [RM-3]"


@pytest.mark.clause("RM-3")
@pytest.mark.parametrize("doc", [
    {}, {"gpuConfigInfo": None}, {"perfControl": None},
    {"gpuConfigInfo": {BUS: {}}}, {"gpuConfigInfo": {BUS: {"maxDeviceMem": None}}},
    {"gpuConfigInfo": {}}, {"name": "only a name"}])
def test_missing_members_change_nothing(rt, managed, doc) -> None:
    rm, _ = managed
    rm.parse_manage_info_from_json(json.dumps(
        {"gpuConfigInfo": {BUS: {"maxDeviceMem": 4 * MiB}}, "perfControl": 40}))
    assert rm.parse_manage_info_from_json(json.dumps(doc)) is True, "[RM-3]"
    assert (rm.perf_control, rm.memory_limits) == (40, {BUS: 4 * MiB}), \
        f"{doc} changed the state to {(rm.perf_control, rm.memory_limits)} [RM-3]"


@pytest.mark.clause("RM-3")
def test_entries_after_one_without_a_limit_apply(rt, managed) -> None:
    """An entry without ``maxDeviceMem``, or with null, leaves its GPU unchanged and the
    entries after it are read all the same."""
    rm, _ = managed
    doc = ('{"gpuConfigInfo": {"3a:00.0": {}, "3b:00.0": {"maxDeviceMem": null}, '
           '"3c:00.0": {"maxDeviceMem": 1048576}}}')
    ok = rm.parse_manage_info_from_json(doc)
    assert ok is True and rm.memory_limits == {"3c:00.0": MiB}, (
        f"{doc} gave {rm.memory_limits} (returned {ok}), expected {{'3c:00.0': {MiB}}}: the "
        f"entries without a limit stopped the reading of the ones after them [RM-3]")


@pytest.mark.clause("RM-4")
@pytest.mark.parametrize("text,value", [
    ("1048576", 1048576), ("1048576.0", 1048576), ("1e6", 1_000_000),
    ("1.048576e6", 1048576), ("0", 0), (str(UINT64_MAX), UINT64_MAX),
    ("1.8446744073709551615e19", UINT64_MAX)])
def test_integer_forms_accepted_for_max_device_mem(rt, managed, text, value) -> None:
    rm, _ = managed
    ok = rm.parse_manage_info_from_json(f'{{"gpuConfigInfo": {{"{BUS}": {{"maxDeviceMem": {text}}}}}}}')
    assert ok and rm.memory_limits == {BUS: value}, \
        f"maxDeviceMem {text} gave {rm.memory_limits} (returned {ok}), expected {value} [RM-4]"


@pytest.mark.clause("RM-4")
@pytest.mark.parametrize("text,value", [("0", 0), ("100", 100), ("50.0", 50), ("5e1", 50),
                                        ("1", 1)])
def test_integer_forms_accepted_for_perf_control(rt, managed, text, value) -> None:
    rm, _ = managed
    rm.parse_manage_info_from_json('{"perfControl": 77}')
    ok = rm.parse_manage_info_from_json(f'{{"perfControl": {text}}}')
    assert ok and rm.perf_control == value, \
        f"perfControl {text} gave {rm.perf_control} (returned {ok}) [RM-4]"
    rm.parse_manage_info_from_json('{"perfControl": 100}')       # never leave it suspended


@pytest.mark.clause("RM-4")
@pytest.mark.parametrize("text,value", [("-0", 0), ("-0.0", 0), ("1E2", 100), ("1.00e2", 100),
                                        ("100e-2", 1), ("0e5", 0), ("99.000", 99),
                                        ("1000e-1", 100)])
def test_perf_control_integer_edges(rt, managed, text, value) -> None:
    rm, _ = managed
    rm.parse_manage_info_from_json('{"perfControl": 77}')
    ok = rm.parse_manage_info_from_json(f'{{"perfControl": {text}}}')
    got = rm.perf_control
    rm.parse_manage_info_from_json('{"perfControl": 100}')       # never leave it suspended
    assert ok and got == value, \
        f"perfControl {text} gave {got} (returned {ok}), expected {value} [RM-4]"


@pytest.mark.clause("RM-4", "RM-6")
@pytest.mark.parametrize("text", ["100.0000000000000000001", "1001e-1", "-1e-400", "101e0",
                                  "-0.5", "99.5"])
def test_perf_control_just_out_of_range_or_fractional(rt, managed, text) -> None:
    rm, _ = managed
    rm.parse_manage_info_from_json('{"perfControl": 77}')
    ok = rm.parse_manage_info_from_json(f'{{"perfControl": {text}}}')
    clause = "RM-6" if text in ("1001e-1", "101e0") else "RM-4"   # integers out of range
    assert not ok and rm.perf_control == 77, \
        f"perfControl {text} gave {rm.perf_control} (returned {ok}), expected 77 kept [{clause}]"


@pytest.mark.clause("RM-4")
@pytest.mark.parametrize("text,accepted", [("1.8446744073709551616e19", False),
                                           ("18446744073709551615.0", True),
                                           ("-0.0", True), ("1.8446744073709551615e19", True),
                                           ("18446744073709551615.5", False)])
def test_max_device_mem_at_the_uint64_bound(rt, managed, text, accepted) -> None:
    rm, _ = managed
    rm.parse_manage_info_from_json(f'{{"gpuConfigInfo": {{"{BUS}": {{"maxDeviceMem": 5}}}}}}')
    ok = rm.parse_manage_info_from_json(
        f'{{"gpuConfigInfo": {{"{BUS}": {{"maxDeviceMem": {text}}}}}}}')
    expected = int(Decimal(text)) if accepted else 5
    assert ok is accepted and rm.memory_limits == {BUS: expected}, (
        f"maxDeviceMem {text}: returned {ok}, limits {rm.memory_limits}; expected "
        f"{'accepted' if accepted else 'rejected'} [RM-4]")


GOOD = {"name": "good", "gpuConfigInfo": {BUS: {"maxDeviceMem": 8 * MiB}}, "perfControl": 40}


def assert_kept(rm, what: str, clause: str = "RM-5") -> None:
    state = (rm.perf_control, rm.memory_limits)
    assert state == (40, {BUS: 8 * MiB}), (
        f"{what}: state became {state}, expected the last good (40, {{{BUS!r}: {8 * MiB}}}) "
        f"[{clause}]")


#: perfControl values out of range (RM-6); other rejected values of a field break RM-4.
PERF_OUT_OF_RANGE = frozenset({"perf_negative", "perf_101", "perf_150", "perf_2_31",
                               "perf_2_32", "perf_2_64"})


def rejection_clause(kind: str) -> str:
    """The clause that rejects the bad value ``kind`` of BAD_TYPES (RM-4, RM-5, RM-6)."""
    if kind in PERF_OUT_OF_RANGE:
        return "RM-6"
    return "RM-4" if kind.startswith(("mem_", "perf_")) else "RM-5"


def one_warning(caplog, rt, path, what: str) -> None:
    recs = runtime_records(caplog, rt, containing=str(path))
    assert len(recs) == 1, (f"{what}: {len(recs)} log lines naming {path}, expected exactly 1: "
                            f"{[r.getMessage()[:120] for r in recs]} [RM-5]")


def bad_config_is_rejected(rt, managed, vclock, caplog, kind: str, content: str,
                           clause: str = "RM-5") -> None:
    """After a good config, the fault ``kind`` (whose content is ``content``) is written:
    the last good state stays and parsing it returns False (``clause``: the clause that
    rejects it), and one warning names the file (RM-5)."""
    rm, writer = managed
    deliver(lambda: writer.write(GOOD), vclock)
    caplog.set_level(logging.WARNING)
    caplog.clear()
    deliver(lambda: writer.write_malformed(kind), vclock)
    assert_kept(rm, f"config {kind!r}", clause)
    one_warning(caplog, rt, writer.path, f"config {kind!r}")
    assert rm.parse_manage_info_from_json(content) is False, \
        f"parse_manage_info_from_json({kind!r}) returned True [{clause}]"


@pytest.mark.clause("RM-5")
@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_malformed_document_changes_nothing(rt, managed, vclock, caplog, kind) -> None:
    rm, writer = managed
    bad_config_is_rejected(rt, managed, vclock, caplog, kind, MALFORMED[kind])
    deliver(lambda: writer.write(perf=41), vclock)
    assert rm.perf_control == 41, f"a good config after {kind!r} was not applied [RM-5]"


@pytest.mark.clause("RM-5", "RM-4", "RM-6")
@pytest.mark.parametrize("kind", sorted(BAD_TYPES))
def test_wrong_type_keeps_last_good_value(rt, managed, vclock, caplog, kind) -> None:
    bad_config_is_rejected(rt, managed, vclock, caplog, kind, BAD_TYPES[kind],
                           rejection_clause(kind))


@pytest.mark.clause("RM-5")
def test_valid_parts_of_a_partly_bad_document_apply(rt, managed, vclock, caplog) -> None:
    rm, writer = managed
    deliver(lambda: writer.write(GOOD), vclock)
    caplog.set_level(logging.WARNING)
    caplog.clear()
    doc = {"gpuConfigInfo": {BUS: {"maxDeviceMem": "16MiB"}, "3c:00.0": {"maxDeviceMem": MiB},
                             "3d:00.0": [1]},
           "perfControl": 60}
    deliver(lambda: writer.write(doc), vclock)
    assert rm.perf_control == 60, "a valid perfControl beside bad entries was not applied [RM-5]"
    assert rm.memory_limits == {BUS: 8 * MiB, "3c:00.0": MiB}, \
        f"limits after a partly bad document: {rm.memory_limits} [RM-5]"
    one_warning(caplog, rt, writer.path, "two bad entries")
    msg = runtime_records(caplog, rt, containing=str(writer.path))[0].getMessage()
    assert BUS in msg and "3d:00.0" in msg, f"the log line does not name every reason: {msg} [RM-5]"


@pytest.mark.clause("RM-5")
def test_reasons_are_separated_and_alike_for_parts_rejected_alike(rt, managed, vclock,
                                                                    caplog) -> None:
    """Three entries with the same bad ``maxDeviceMem``: the warning's reasons, split at
    ``; ``, name one entry each, and the second and third differ only in the bus id."""
    rm, writer = managed
    deliver(lambda: writer.write(GOOD), vclock)
    caplog.set_level(logging.WARNING)
    caplog.clear()
    ids = ["ea:ff.f", "eb:ff.f", "ec:ff.f"]
    deliver(lambda: writer.write({"gpuConfigInfo": {b: {"maxDeviceMem": "x"} for b in ids}}),
            vclock)
    one_warning(caplog, rt, writer.path, "three bad entries")
    msg = runtime_records(caplog, rt, containing=str(writer.path))[0].getMessage()
    pieces = msg.split("; ")
    naming = {b: [p for p in pieces if b in p] for b in ids}
    assert all(len(found) == 1 for found in naming.values()), (
        f"split at '; ', the warning does not give one reason per rejected entry: "
        f"{naming} [RM-5]")
    second, third = naming["eb:ff.f"][0], naming["ec:ff.f"][0]
    assert third == second.replace("eb:ff.f", "ec:ff.f"), (
        f"the reasons of two entries rejected alike differ in more than the bus id: "
        f"{second!r} and {third!r} [RM-5]")


@pytest.mark.clause("RM-5")
def test_entries_after_a_rejected_one_apply(rt, managed) -> None:
    """Entries that are not objects are rejected one by one: the entries after them in the
    same document are applied."""
    rm, _ = managed
    doc = ('{"gpuConfigInfo": {"3a:00.0": [1], "3b:00.0": 7, '
           '"3c:00.0": {"maxDeviceMem": 1048576}}}')
    ok = rm.parse_manage_info_from_json(doc)
    assert ok is False and rm.memory_limits == {"3c:00.0": MiB}, (
        f"{doc} gave {rm.memory_limits} (returned {ok}), expected False and "
        f"{{'3c:00.0': {MiB}}}: a rejected entry stopped the reading of the ones after it "
        f"[RM-5]")


def the_warning(managed, caplog, rt, content, what: str) -> str:
    """The one warning naming the config file that parsing ``content`` logs (RM-5)."""
    rm, writer = managed
    caplog.set_level(logging.WARNING)
    caplog.clear()
    assert rm.parse_manage_info_from_json(content) is False, \
        f"parse_manage_info_from_json({what}) returned True [RM-5]"
    one_warning(caplog, rt, writer.path, what)
    return runtime_records(caplog, rt, containing=str(writer.path))[0].getMessage()


@pytest.mark.clause("RM-5")
@pytest.mark.parametrize("content", ["", "  \n\t ", "\r\n", b""], ids=["empty", "white_space",
                                                                       "line_break", "bytes"])
def test_an_empty_document_is_reported_as_empty(rt, managed, caplog, content) -> None:
    message = the_warning(managed, caplog, rt, content, f"{content!r}")
    assert names_identifier(message.lower(), "empty"), (
        f"the warning for the document {content!r} does not say it is empty: "
        f"{message[:300]} [RM-5]")


@pytest.mark.clause("RM-5")
@pytest.mark.parametrize("doc,size", [
    ('{"perfControl": [1, 2, 3]}', 3),
    ('{"gpuConfigInfo": {"3b:00.0": [7, 8]}}', 2),
    ('{"gpuConfigInfo": [[], {}, 5, "x"]}', 4),
    ('{"perfControl": {"a": 1, "b": [2], "c": {}}}', 3),
])
def test_what_a_reason_says_of_a_value_is_true(rt, managed, caplog, doc, size) -> None:
    """A reason may give the size of a rejected array or object (it need not): if it does,
    it is the value's own."""
    message = the_warning(managed, caplog, rt, doc, doc)
    said = {int(n) for n in re.findall(r"(\d+)\s+(?:elements?|members?|items?|entries|values)\b",
                                       message)}
    assert said <= {size}, (
        f"the warning for {doc} gives the rejected value {sorted(said)} elements or members; "
        f"it holds {size}: {message[:300]} [RM-5]")


@pytest.mark.clause("RM-5")
@pytest.mark.parametrize("doc", ['{"perfControl" 40}', '{"perfControl" = 40}',
                                 '{"perfControl"= 40}', '{"gpuConfigInfo" {}, "perfControl": 40}'],
                         ids=["space", "spaced_equals", "equals", "before_an_object"])
def test_member_name_without_a_colon_is_unparsable(rt, managed, doc) -> None:
    """A member name followed by anything but ``:`` (RFC 8259's name separator) makes the
    document unparsable: nothing of it is applied, not even the members around it, and no
    character after the name is taken for the separator."""
    rm, _ = managed
    ok = rm.parse_manage_info_from_json(doc)
    state = (rm.perf_control, rm.memory_limits)
    assert ok is False and state == (100, {}), (
        f"{doc} returned {ok} and changed the state to {state}: a member name without its "
        f"':' separator was accepted [RM-5]")


@pytest.mark.clause("RM-5")
@pytest.mark.parametrize("doc", ['{"perfControl": 40, "other": 1\u0663}',
                                 '{"perfControl": 40, "other": \uff15}',
                                 '{"perfControl": 4\u0660}',
                                 '{"perfControl": 40, "other": 1.\u0665}',
                                 '{"perfControl": 40, "other": 1e\u0665}'],
                         ids=["arabic_indic", "fullwidth", "in_perf_control", "fraction",
                              "exponent"])
def test_a_number_with_non_ascii_digits_is_unparsable(rt, managed, doc) -> None:
    """RFC 8259's digits are the ASCII ones: a number holding another Unicode decimal digit
    (U+0660..U+0669, U+FF10..U+FF19), even in a member the config ignores, makes the
    document unparsable: nothing of it is applied."""
    rm, _ = managed
    try:
        ok = rm.parse_manage_info_from_json(doc)
    except Exception as exc:  # noqa: BLE001 - reported with the clause
        pytest.fail(f"{doc!a} raised {exc!r} [RM-5]")
    state = (rm.perf_control, rm.memory_limits)
    assert ok is False and state == (100, {}), (
        f"{doc!a} returned {ok} and changed the state to {state}: a number with a non-ASCII "
        f"digit was read [RM-5]")


@pytest.mark.clause("RM-5")
@pytest.mark.parametrize("separators", [(", ", ": "), (",", ":")], ids=["spaced", "compact"])
def test_every_truncation_of_a_document_is_rejected(rt, managed, separators) -> None:
    """A document cut after any of its characters (a torn write stopped anywhere: inside a
    name, after it, after a comma) is unparsable: it changes nothing, and parsing it returns
    False and raises nothing."""
    rm, _ = managed
    doc = json.dumps({"name": "job", "gpuConfigInfo": {BUS: {"maxDeviceMem": 4 * MiB,
                                                             "note": [True, None, "x"]}},
                      "perfControl": 40}, separators=separators)
    for cut in range(len(doc)):
        torn = doc[:cut]
        try:
            ok = rm.parse_manage_info_from_json(torn)
        except Exception as exc:                  # noqa: BLE001 - any exception is the failure
            pytest.fail(f"parse_manage_info_from_json({torn!r}) raised {exc!r} [RM-5]")
        state = (rm.perf_control, rm.memory_limits)
        assert ok is False and state == (100, {}), (
            f"the document cut after {cut} characters, {torn!r}, returned {ok} and changed the "
            f"state to {state} [RM-5]")


@pytest.mark.clause("RM-5")
@pytest.mark.parametrize("bad", [16, 20])
def test_the_warning_counts_the_reasons_it_does_not_name(rt, managed, vclock, caplog,
                                                          bad) -> None:
    """``bad`` rejected entries: up to 16 are all named; of 20, the first 16 are named with
    the number of the other 4 (bus ids of letters only, so that no other number is 4)."""
    rm, writer = managed
    deliver(lambda: writer.write(GOOD), vclock)
    caplog.set_level(logging.WARNING)
    caplog.clear()
    ids = [f"e{chr(ord('a') + i)}:ff.f" for i in range(bad)]
    doc = {"gpuConfigInfo": {b: {"maxDeviceMem": "x"} for b in ids}, "perfControl": 60}
    deliver(lambda: writer.write(doc), vclock)
    assert rm.perf_control == 60, "a valid perfControl beside bad entries was not applied [RM-5]"
    one_warning(caplog, rt, writer.path, f"{bad} bad entries")
    msg = runtime_records(caplog, rt, containing=str(writer.path))[0].getMessage()
    named = [b for b in ids if b in msg]
    others = bad - min(bad, 16)
    assert len(named) == min(bad, 16), (
        f"the warning for {bad} bad entries names {len(named)} of them, expected "
        f"{min(bad, 16)}: {msg[:400]} [RM-5]")
    if others:
        assert re.search(rf"\b{others}\b", msg), (
            f"the warning for {bad} bad entries does not give the number of the {others} "
            f"it does not name: {msg[:600]} [RM-5]")


#: A rejected part -> (the document, the words that name its path, the words that describe
#: its value): each JSON type the part does not take, and a number out of range (RM-5).
DESCRIBED = {
    "perf_true": ('{"perfControl": true}', ("perfControl",), ("boolean", "true")),
    "perf_false": ('{"perfControl": false}', ("perfControl",), ("boolean", "false")),
    "perf_string": ('{"perfControl": "forty"}', ("perfControl",), ("string",)),
    "perf_array": ('{"perfControl": [40, 41]}', ("perfControl",), ("array",)),
    "perf_object": ('{"perfControl": {"value": 40}}', ("perfControl",), ("object",)),
    "perf_number": ('{"perfControl": 101}', ("perfControl",), ("101",)),
    "info_true": ('{"gpuConfigInfo": true}', ("gpuConfigInfo",), ("boolean", "true")),
    "info_array": ('{"gpuConfigInfo": [1]}', ("gpuConfigInfo",), ("array",)),
    "info_number": ('{"gpuConfigInfo": 12345}', ("gpuConfigInfo",), ("12345",)),
    "entry_number": ('{"gpuConfigInfo": {"%s": 7.25}}' % BUS, (BUS,), ("7.25",)),
    "root_number": ('31337', (), ("31337",)),
    "entry_null": ('{"gpuConfigInfo": {"%s": null}}' % BUS, (BUS,), ("null",)),
    "entry_false": ('{"gpuConfigInfo": {"%s": false}}' % BUS, (BUS,), ("boolean", "false")),
    "mem_true": ('{"gpuConfigInfo": {"%s": {"maxDeviceMem": true}}}' % BUS,
                 (BUS, "maxDeviceMem"), ("boolean", "true")),
    "mem_array": ('{"gpuConfigInfo": {"%s": {"maxDeviceMem": []}}}' % BUS,
                  (BUS, "maxDeviceMem"), ("array",)),
}


@pytest.mark.clause("RM-5")
@pytest.mark.parametrize("kind", sorted(DESCRIBED))
def test_the_warning_describes_the_rejected_value(rt, managed, caplog, kind) -> None:
    rm, writer = managed
    doc, path, words = DESCRIBED[kind]
    caplog.set_level(logging.WARNING)
    ok = rm.parse_manage_info_from_json(doc)
    if kind == "perf_number":       # a number out of range is rejected by RM-6's range
        precondition_holds("RM-6", ok is False, f"{doc} is rejected as out of range: "
                                                f"returned {ok}")
    recs = runtime_records(caplog, rt, containing=str(writer.path))
    assert ok is False and len(recs) == 1, (
        f"{doc}: returned {ok} and logged {[r.getMessage()[:160] for r in recs]}, expected "
        f"False and one warning naming {writer.path} [RM-5]")
    reason = recs[0].getMessage().replace(str(writer.path), "")
    missing = [w for w in path + words if not names_identifier(reason, w)]
    assert not missing, (f"the warning for {doc} does not name {missing} (the path of the "
                         f"rejected part and its value's type or literal): {reason[:400]} "
                         f"[RM-5]")


#: What a reason may say of a rejected number, each claim with the words that make it.
NUMBER_CLAIMS = {
    "above the maximum": r"\babove\b|\bexceeds?\b|\btoo (?:large|big|high)\b|\b(?:greater|larger) than\b",
    "not an integer": r"\bnot an? integer\b|\bnot integral\b|\bfraction(?:al)?\b",
    "negative": r"(?<!non-)\bnegative\b|\bbelow zero\b",
}


@pytest.mark.clause("RM-5")
@pytest.mark.parametrize("part", ["perfControl", "maxDeviceMem"])
@pytest.mark.parametrize("literal,true_of_it", [
    ("1e-99999999999999999999", {"not an integer"}),
    ("1e-0000000000000000000000001", {"not an integer"}),
    ("1e99999999999999999999", {"above the maximum"}),
    ("-1e99999999999999999999", {"negative", "above the maximum"}),
    ("-1e-99999999999999999999", {"negative", "not an integer"}),
    ("0.5", {"not an integer"}),
    ("-3", {"negative"}),
], ids=["tiny", "tiny_zeros", "huge", "huge_negative", "tiny_negative", "half", "minus_3"])
def test_what_a_reason_says_of_a_number_is_true(rt, managed, caplog, part, literal,
                                                true_of_it) -> None:
    """A rejected number whose exponent has more digits than any machine integer holds is
    still read for what it is (RM-4, RM-19): the reason may say why the number is rejected,
    and what it says is true of it (``1e-99999999999999999999`` is below 1, not above the
    maximum; ``1e99999999999999999999`` is an integer)."""
    doc = ('{"perfControl": %s}' % literal if part == "perfControl"
           else '{"gpuConfigInfo": {"%s": {"maxDeviceMem": %s}}}' % (BUS, literal))
    rm, writer = managed
    caplog.set_level(logging.WARNING)
    caplog.clear()
    ok = rm.parse_manage_info_from_json(doc)
    precondition_holds("RM-4", ok is False, f"{doc} is rejected: returned {ok}")
    one_warning(caplog, rt, writer.path, doc)
    message = runtime_records(caplog, rt, containing=str(writer.path))[0].getMessage()
    reason = message.replace(str(writer.path), "<path>").replace(literal, "<literal>")
    false = sorted(claim for claim, words in NUMBER_CLAIMS.items()
                   if claim not in true_of_it and re.search(words, reason, re.IGNORECASE))
    assert not false, (f"the warning for {part} {literal} says the value is {false}, which "
                       f"it is not: {reason[:400]} [RM-5]")


@pytest.mark.clause("RM-5")
def test_a_short_number_is_described_by_its_literal_alone(rt, managed, caplog) -> None:
    """Two fractions rejected for the same reason: a number is described by its literal
    (RM-5), and a short literal is no excerpt (RM-21 cuts long texts only), so the warning
    for ``40.25`` is the warning for ``40.5`` with the one literal in place of the other (a
    short literal marked as cut, with its length, differs in more than the literal)."""
    rm, writer = managed
    caplog.set_level(logging.WARNING)
    reasons = []
    for literal in ("40.5", "40.25"):
        caplog.clear()
        assert rm.parse_manage_info_from_json('{"perfControl": %s}' % literal) is False, \
            f"perfControl {literal} was accepted [RM-5]"
        recs = runtime_records(caplog, rt, containing=str(writer.path))
        assert len(recs) == 1, f"perfControl {literal} logged {len(recs)} warnings [RM-5]"
        reasons.append(recs[0].getMessage().replace(str(writer.path), "<path>"))
    assert names_identifier(reasons[0], "40.5") \
        and reasons[1] == reasons[0].replace("40.5", "40.25"), (
        f"the warnings for perfControl 40.5 and 40.25 differ in more than the literal: "
        f"{reasons[0][:300]!r} and {reasons[1][:300]!r} [RM-5]")


@pytest.mark.clause("RM-5")
def test_torn_write_then_completion(rt, managed, vclock, caplog) -> None:
    rm, writer = managed
    deliver(lambda: writer.write(GOOD), vclock)
    caplog.set_level(logging.WARNING)
    deliver(lambda: writer.write_torn(perf=55, limits={BUS: 2 * MiB}), vclock)
    assert_kept(rm, "a torn write")
    deliver(writer.finish_torn, vclock)
    assert (rm.perf_control, rm.memory_limits) == (55, {BUS: 2 * MiB}), \
        "the completed write was not applied [RM-5]"


@pytest.mark.clause("RM-5", "FL-9")
def test_non_utf8_and_deleted_and_directory_keep_state(rt, managed, vclock) -> None:
    rm, writer = managed
    deliver(lambda: writer.write(GOOD), vclock)
    deliver(writer.write_non_utf8, vclock)
    assert_kept(rm, "non-UTF-8 bytes")
    deliver(writer.delete, vclock)
    assert_kept(rm, "a deleted config")
    deliver(writer.replace_with_directory, vclock)
    assert_kept(rm, "a directory at the config path")
    deliver(writer.delete, vclock)
    deliver(lambda: writer.write(perf=45), vclock)
    assert rm.perf_control == 45, "[RM-5]"


@pytest.mark.clause("RM-5", "FL-9")
def test_very_large_valid_config_applies(rt, managed, vclock) -> None:
    rm, writer = managed
    deliver(lambda: writer.write_large(perf=33, limits={BUS: 3 * MiB}, size=4 * MiB), vclock)
    assert (rm.perf_control, rm.memory_limits) == (33, {BUS: 3 * MiB}), \
        "a 4 MiB (padded) config was not applied [RM-5]"


@pytest.mark.clause("RM-5")
def test_rapid_rewrites_apply_the_last(rt, managed, vclock) -> None:
    rm, writer = managed
    deliver(lambda: writer.rapid_rewrites(
        [config_document(perf=p, limits={BUS: p * MiB}) for p in range(1, 60)]), vclock)
    assert (rm.perf_control, rm.memory_limits) == (59, {BUS: 59 * MiB}), "[RM-5]"


@pytest.mark.clause("RM-5")
def test_bad_input_keeps_the_job_running(rt, runtimes, vclock, config_writer) -> None:
    config_writer.write(perf=100)
    ctx = runtimes(config_file=str(config_writer.path), clock=vclock)
    rm = ctx.resource_management
    vclock.wait_for_waiters(1, clause="FL-2")
    for kind in ("truncated", "root_array", "entry_number", "perf_2_32"):
        deliver(lambda: config_writer.write_malformed(kind), vclock)
        rm.run_action(post(rt, ctx))           # a step boundary: no exception, no block
    assert ctx.file_listener.is_running(), "bad input stopped the file listener [RM-5]"
    deliver(lambda: config_writer.write(limits={bus_id(rt, gpus(ctx)[0]): 16 * MiB}), vclock)
    rm.run_action(post(rt, ctx))
    assert bytes_limit(gpus(ctx)[0]) == 16 * MiB, "the job stopped applying configs [RM-5]"


@pytest.mark.clause("RM-6")
@pytest.mark.parametrize("value", [101, 150, 1 << 31, 1 << 32, (1 << 32) + 50, -1, -100])
def test_perf_control_out_of_range_is_rejected(rt, managed, value) -> None:
    rm, _ = managed
    rm.parse_manage_info_from_json('{"perfControl": 40}')
    assert rm.parse_manage_info_from_json(f'{{"perfControl": {value}}}') is False, "[RM-6]"
    assert rm.perf_control == 40, \
        f"perfControl {value} changed the value to {rm.perf_control}, expected 40 kept [RM-6]"


# -- RM-7 .. RM-9: limits -------------------------------------------------------------

@pytest.fixture
def rt_managed(rt, runtimes, vclock, config_writer):
    """(ctx, writer, gpu list): a 2-GPU runtime with resource management on the clock."""
    ctx = runtimes(config_file=str(config_writer.path), clock=vclock, num_gpus=2)
    return ctx, config_writer, gpus(ctx)


def limits_doc(rt, mapping):
    return config_document(limits={bus_id(rt, g): v for g, v in mapping.items()})


@pytest.mark.clause("RM-8")
def test_limit_in_force_at_the_next_boundary(rt, rt_managed, vclock) -> None:
    ctx, writer, (g0, g1) = rt_managed
    rm = ctx.resource_management
    deliver(lambda: writer.write(limits_doc(rt, {g0: 16 * MiB})), vclock)
    assert bytes_limit(g0) == 64 * MiB, \
        f"parsing changed the allocator limit to {bytes_limit(g0)} before a boundary [RM-8]"
    rm.run_action(post(rt, ctx))
    assert (bytes_limit(g0), bytes_limit(g1)) == (16 * MiB, 64 * MiB), \
        f"after the boundary limits are {(bytes_limit(g0), bytes_limit(g1))} [RM-8]"


@pytest.mark.clause("RM-8")
def test_newer_value_supersedes_a_pending_one(rt, rt_managed, vclock) -> None:
    ctx, writer, (g0, _) = rt_managed
    deliver(lambda: writer.write(limits_doc(rt, {g0: 16 * MiB})), vclock)
    deliver(lambda: writer.write(limits_doc(rt, {g0: 32 * MiB})), vclock)
    ctx.resource_management.run_action(post(rt, ctx))
    assert bytes_limit(g0) == 32 * MiB, f"limit {bytes_limit(g0)}, expected the newer 32 MiB [RM-8]"


def by_bus_id(rt, devices) -> list:
    """The devices in ascending bus-id order (the order RM-8 applies limits in)."""
    return sorted(devices, key=lambda d: bus_id(rt, d))


def bus_id_below(rt, devices) -> str:
    """A bus id that names none of the devices and sorts before all of them: a well-formed
    one where there is one, else the lowest one's with a leading space (RM-3: no GPU's)."""
    ids = {bus_id(rt, d) for d in devices}
    lowest = min(ids)
    return next((b for b in (f"00:{n:02x}.0" for n in range(32)) if b not in ids and b < lowest),
                " " + lowest)


def applied(rt, devices) -> dict[str, int]:
    return {bus_id(rt, d): bytes_limit(d) for d in devices}


@pytest.mark.clause("RM-8")
def test_each_gpu_gets_its_own_limit_listed_in_descending_bus_id_order(rt, rt_managed,
                                                                        vclock) -> None:
    """Limits applied in ascending bus-id order still go each to its own GPU: the config
    lists them in the other order, so pairing the sorted bus ids with the entries in the
    order they came would swap them."""
    ctx, writer, devices = rt_managed
    low, high = by_bus_id(rt, devices)
    listed = {bus_id(rt, high): 8 * MiB, bus_id(rt, low): 16 * MiB}
    deliver(lambda: writer.write(config_document(limits=listed)), vclock)
    ctx.resource_management.run_action(post(rt, ctx))
    expected = {bus_id(rt, low): 16 * MiB, bus_id(rt, high): 8 * MiB}
    assert applied(rt, (low, high)) == expected, (
        f"the config listed {listed}; after the boundary the GPUs have "
        f"{applied(rt, (low, high))}: each GPU must get its own limit [RM-8]")


@pytest.mark.clause("RM-8")
def test_each_gpu_gets_its_own_limit_with_an_unknown_bus_id_listed(rt, rt_managed,
                                                                   vclock) -> None:
    """A bus id naming no GPU, sorting before the GPUs' and listed between them (higher bus
    id first): whatever order a runtime keeps the entries in (as listed, or its GPUs' first,
    RM-20), pairing sorted bus ids with them gives a GPU another entry's limit."""
    ctx, writer, devices = rt_managed
    low, high = by_bus_id(rt, devices)
    unknown = bus_id_below(rt, devices)
    listed = {bus_id(rt, high): 8 * MiB, unknown: 4 * MiB, bus_id(rt, low): 16 * MiB}
    deliver(lambda: writer.write(config_document(limits=listed)), vclock)
    ctx.resource_management.run_action(post(rt, ctx))
    expected = {bus_id(rt, low): 16 * MiB, bus_id(rt, high): 8 * MiB}
    assert applied(rt, (low, high)) == expected, (
        f"the config listed {listed} ({unknown!r} names no GPU); after the boundary the "
        f"GPUs have {applied(rt, (low, high))}, expected {expected}: each GPU must get its "
        f"own limit [RM-8]")


@pytest.mark.clause("RM-7")
def test_limits_accumulate_and_left_out_gpus_keep_theirs(rt, rt_managed, vclock) -> None:
    ctx, writer, (g0, g1) = rt_managed
    rm = ctx.resource_management
    deliver(lambda: writer.write(limits_doc(rt, {g0: 16 * MiB})), vclock)
    rm.run_action(post(rt, ctx))
    deliver(lambda: writer.write(limits_doc(rt, {g1: 8 * MiB})), vclock)
    rm.run_action(post(rt, ctx))
    assert rm.memory_limits == {bus_id(rt, g0): 16 * MiB, bus_id(rt, g1): 8 * MiB}, \
        f"memory_limits = {rm.memory_limits} [RM-7]"
    assert (bytes_limit(g0), bytes_limit(g1)) == (16 * MiB, 8 * MiB), \
        "a GPU left out of the newer config lost its limit [RM-7]"
    deliver(lambda: writer.write(limits_doc(rt, {g0: 64 * MiB})), vclock)
    rm.run_action(post(rt, ctx))
    assert bytes_limit(g0) == 64 * MiB, "writing the initial limit did not lift the limit [RM-7]"


@pytest.mark.clause("RM-7")
def test_memory_limits_is_a_copy(rt, rt_managed, vclock) -> None:
    ctx, writer, (g0, _) = rt_managed
    rm = ctx.resource_management
    deliver(lambda: writer.write(limits_doc(rt, {g0: 16 * MiB})), vclock)
    got = rm.memory_limits
    got[bus_id(rt, g0)] = MiB
    got["ff:00.0"] = MiB
    assert rm.memory_limits == {bus_id(rt, g0): 16 * MiB}, \
        f"changing the dict memory_limits returned changed it: {rm.memory_limits} [RM-7]"
    rm.run_action(post(rt, ctx))
    assert bytes_limit(g0) == 16 * MiB, \
        f"changing memory_limits' copy changed the limit applied: {bytes_limit(g0)} [RM-7]"


@pytest.mark.clause("RM-9")
def test_short_shrink_is_retried_until_reached(rt, rt_managed, vclock) -> None:
    ctx, writer, (g0, _) = rt_managed
    rm = ctx.resource_management
    alloc = g0.get_allocator()
    live = alloc.allocate_raw(256, 8 * MiB)
    pool = pool_bytes(g0)
    deliver(lambda: writer.write(limits_doc(rt, {g0: MiB})), vclock)
    rm.run_action(post(rt, ctx))
    short = bytes_limit(g0)
    assert MiB < short <= pool, f"the shrink with 8 MiB live set the limit {short} [ADJ-2]"
    rm.run_action(post(rt, ctx))
    assert bytes_limit(g0) == short, "[RM-9]"
    alloc.deallocate_raw(live)
    rm.run_action(post(rt, ctx))
    assert bytes_limit(g0) == MiB, (f"after the live chunk was freed the next boundary left the "
                                    f"limit at {bytes_limit(g0)}, expected 1 MiB (retry) [RM-9]")


@pytest.mark.clause("RM-3", "RM-17", "RM-20")
def test_bus_ids_in_other_spellings_name_no_gpu(rt, rt_managed, vclock, caplog) -> None:
    ctx, writer, (g0, g1) = rt_managed
    rm = ctx.resource_management
    bus = bus_id(rt, g0)
    spellings = [bus.upper(), " " + bus, bus + " ", "0000:" + bus, bus + "\u00a0",
                 bus.replace(":00.", ":0.")]
    caplog.set_level(logging.WARNING)
    deliver(lambda: writer.write(config_document(limits={k: 16 * MiB for k in spellings})),
            vclock)
    assert set(rm.memory_limits) == set(spellings), \
        f"memory_limits keys {sorted(rm.memory_limits)}, expected the keys as written [RM-3]"
    caplog.clear()
    rm.run_action(post(rt, ctx))
    assert (bytes_limit(g0), bytes_limit(g1)) == (64 * MiB, 64 * MiB), (
        f"limits under bus id keys spelled differently from {bus!r} were applied: "
        f"{(bytes_limit(g0), bytes_limit(g1))}: a GPU is found by its exact bus id [RM-17]")
    errors = runtime_records(caplog, rt, logging.ERROR)
    assert len(errors) == 1, (
        f"{len(spellings)} keys naming no GPU logged {len(errors)} errors, expected one "
        f"naming them all [RM-20]")
    message = errors[0].getMessage()
    unnamed = [k for k in spellings if repr(k) not in message and json.dumps(k) not in message]
    assert not unnamed, (f"the error does not name {unnamed}, each quoted with its special "
                         f"characters escaped (Python or JSON quoting) [RM-20]")


@pytest.mark.clause("RM-9")
def test_unknown_bus_id_logs_and_is_dropped(rt, rt_managed, vclock, caplog) -> None:
    ctx, writer, (g0, _) = rt_managed
    rm = ctx.resource_management
    caplog.set_level(logging.WARNING)
    deliver(lambda: writer.write(config_document(limits={"ff:1f.7": MiB,
                                                         bus_id(rt, g0): 4 * MiB})), vclock)
    caplog.clear()
    before = bytes_limit(g0)
    rm.run_action(post(rt, ctx))
    assert bytes_limit(g0) in (4 * MiB, before), (
        f"{bus_id(rt, g0)} was given the limit {bytes_limit(g0)}, another bus id's [RM-8]")
    assert bytes_limit(g0) == 4 * MiB, "an unknown bus id stopped the other limits [RM-9]"
    errors = runtime_records(caplog, rt, logging.ERROR, containing="ff:1f.7")
    assert len(errors) == 1, f"an unknown bus id logged {len(errors)} errors [RM-9]"
    caplog.clear()
    rm.run_action(post(rt, ctx))
    assert runtime_records(caplog, rt, logging.ERROR) == [], \
        "an unknown bus id is still retried at later boundaries [RM-9]"


@pytest.mark.clause("RM-20")
def test_unknown_bus_ids_are_named_separated_by_a_comma(rt, managed, caplog) -> None:
    """Two bus ids found unknown at one boundary: the one error names them, each quoted,
    separated by ``, `` (a reader splits the list as RM-5's reasons split at ``; ``)."""
    rm, _ = managed
    first, second = "ff:1e.7", "ff:1f.7"

    class NoDevices:
        def list_devices(self):
            return []

    rm.parse_manage_info_from_json(json.dumps(config_document(limits={first: MiB,
                                                                      second: MiB})))
    caplog.set_level(logging.WARNING)
    rm.run_action(rt.SessionRunActionOptions(device_mgr=NoDevices(), sess_duration_us=1))
    errors = [r.getMessage() for r in runtime_records(caplog, rt, logging.ERROR)]
    precondition_holds("RM-20", len(errors) == 1, "two unknown bus ids log one error")
    joined_as = [q(a) + ", " + q(b) for q in (repr, json.dumps)
                 for a, b in ((first, second), (second, first))]
    assert any(j in errors[0] for j in joined_as), (
        f"the error for the unknown bus ids {first!r} and {second!r} does not name them "
        f"quoted and separated by ', ': {errors[0][:300]!r} [RM-20]")


@pytest.mark.clause("RM-9")
def test_reached_limit_stops_being_pending(rt, rt_managed, runtimes, vclock, caplog) -> None:
    """A limit a boundary reached is pending no more: a later boundary whose device manager
    has no GPU of that bus id (another runtime's, without GPUs) neither logs it as unknown
    nor forgets it (RM-20 drops only pending limits)."""
    ctx, writer, (g0, _) = rt_managed
    rm = ctx.resource_management
    deliver(lambda: writer.write(limits_doc(rt, {g0: 4 * MiB})), vclock)
    rm.run_action(post(rt, ctx))
    assert bytes_limit(g0) == 4 * MiB, "[RM-8]"
    caplog.set_level(logging.WARNING)
    caplog.clear()
    rm.run_action(post(rt, runtimes(num_gpus=0)))
    bus = bus_id(rt, g0)
    assert rm.memory_limits.get(bus) == 4 * MiB and not runtime_records(
        caplog, rt, logging.ERROR, containing=bus), (
        f"the limit of {bus}, reached at a boundary, was still pending at the next: a device "
        f"manager without that GPU made it {rm.memory_limits.get(bus)} in memory_limits and "
        f"logged {[r.getMessage()[:200] for r in runtime_records(caplog, rt, logging.ERROR)]} "
        f"[RM-9]")


@pytest.mark.clause("RM-9")
def test_pending_without_device_manager(rt, rt_managed, vclock) -> None:
    ctx, writer, (g0, _) = rt_managed
    rm = ctx.resource_management
    deliver(lambda: writer.write(limits_doc(rt, {g0: 4 * MiB})), vclock)
    rm.run_action(post(rt, None))
    rm.run_action(post(rt, ctx))
    assert bytes_limit(g0) == 4 * MiB, \
        "a limit seen at a boundary without a device manager was dropped [RM-9]"


@pytest.mark.clause("RM-9")
def test_a_short_shrink_holds_back_no_other_limit(rt, rt_managed, vclock, caplog) -> None:
    """The lowest bus id's shrink falls short (a live chunk): the same boundary still applies
    the limit of the GPU after it, forgets a bus id sorting after both that names no GPU
    (RM-20), and logs an error naming the GPU whose shrink fell short."""
    ctx, writer, devices = rt_managed
    rm = ctx.resource_management
    low, high = by_bus_id(rt, devices)
    unknown = bus_id(rt, high) + " "            # sorts after both; names no GPU (RM-3)
    live = low.get_allocator().allocate_raw(256, 8 * MiB)
    try:
        deliver(lambda: writer.write(config_document(limits={
            bus_id(rt, low): MiB, bus_id(rt, high): 8 * MiB, unknown: MiB})), vclock)
        caplog.set_level(logging.WARNING)
        caplog.clear()
        rm.run_action(post(rt, ctx))
        precondition_holds("ADJ-2", bytes_limit(low) > MiB,
                           "a shrink below a live chunk falls short")
        assert bytes_limit(high) == 8 * MiB, (
            f"{bus_id(rt, low)}'s shrink fell short and {bus_id(rt, high)}'s limit was "
            f"left at {bytes_limit(high)} at the same boundary, expected 8 MiB [RM-9]")
        assert unknown not in rm.memory_limits, (
            f"{unknown!r}, naming no GPU, was not forgotten at a boundary where another "
            f"GPU's shrink fell short [RM-20]")
        short = runtime_records(caplog, rt, logging.ERROR, containing=bus_id(rt, low))
        assert short, (f"the shrink of {bus_id(rt, low)} fell short (limit "
                       f"{bytes_limit(low)}) and logged no error naming it [RM-9]")
    finally:
        low.get_allocator().deallocate_raw(live)


def no_bfc_device_manager(bus: str):
    """A device manager of one duck-typed GPU of bus id ``bus`` whose allocator is neither a
    BFC allocator nor a VMem allocator (RM-17: nothing is found)."""

    class NotABFC:
        name = "not_a_bfc"

        def get_stats(self):
            return None

    class Attrs:
        physical_device_desc = (f"device: 0, name: X, pci bus id: 0000:{bus}, "
                                "compute capability: 7.0")

    class Dev:
        device_type = "GPU"
        attributes = Attrs()

        def get_allocator(self, attrs=None):
            return NotABFC()

    class Mgr:
        def list_devices(self):
            return [Dev()]

    return Mgr()


@pytest.mark.clause("RM-20")
def test_a_gpu_without_a_bfc_is_no_gpu_of_that_bus_id(rt, managed, caplog) -> None:
    """A device manager whose GPU of the bus id has an allocator that is no BFC has no GPU
    BFC of that bus id: its pending limit is forgotten, with one error naming it."""
    rm, _ = managed
    assert rm.parse_manage_info_from_json(json.dumps(config_document(limits={BUS: 8 * MiB}))), "[RM-3]"
    caplog.set_level(logging.WARNING)
    rm.run_action(rt.SessionRunActionOptions(device_mgr=no_bfc_device_manager(BUS),
                                             sess_duration_us=1000))
    assert BUS not in rm.memory_limits, (
        f"the limit of {BUS}, whose only GPU has no BFC allocator, is still in memory_limits "
        f"after a boundary: {rm.memory_limits} [RM-20]")
    assert runtime_records(caplog, rt, logging.ERROR, containing=BUS), \
        f"a limit for {BUS}, a GPU without a BFC, was dropped without an error [RM-20]"


# -- RM-10 .. RM-13: throttle -----------------------------------------------------------

@contextlib.contextmanager
def throttled(rt, clock):
    """An enabled GPUResourceManagement on ``clock`` (its config file does not exist; the
    tests set values with parse_manage_info_from_json)."""
    saved = {k: os.environ.get(k) for k in ("TF_FORCE_GPU_ALLOW_GROWTH", "TF_GPU_VMEM")}
    with tempfile.TemporaryDirectory() as tmp:
        fl = rt.FileListener(clock=VirtualClock())
        rm = rt.GPUResourceManagement(os.path.join(tmp, "cfg.json"), clock=clock,
                                      file_listener=fl)
        try:
            yield rm
        finally:
            rm.close()
            fl.close()
            for k, v in saved.items():      # RM-1 forces these; give the process its own back
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


class ThrottleModel:
    """antman-behaviour §6.5 with the idle time slept after the step (D-RM-12) and the reset
    at 100 of RM-11: E is the idle budget only ``set_estimated_idle_time`` gives, X the idle
    time spent in the step (RM-14), S the last period's sleep."""

    def __init__(self) -> None:
        self.est = self.slot = 0
        self.in_step = 0

    def spend(self, us: int) -> int:
        us = max(us, 0)
        self.est = max(self.est - us, 0)
        self.in_step += us
        return self.est

    def step(self, perf: int, d: int) -> int:
        if perf >= 100:
            self.est = self.slot = self.in_step = 0
            return 0
        consumed, self.in_step = self.in_step, 0
        actual = d - consumed if d > consumed else 1
        total = actual * 100 // perf
        sleep = total - d - 50 if total > d + 50 else 0
        self.slot = sleep
        return sleep


@pytest.mark.clause("RM-10")
@pytest.mark.parametrize("perf,d,expected", [
    (50, 1000, 950), (25, 1000, 2950), (99, 1000, 0), (90, 1000, 61), (1, 0, 50),
    (1, 1, 49), (95, 1000, 2), (96, 1000, 0), (50, 0, 0), (10, 123_456, 1_111_054)])
def test_sleep_after_a_step(rt, control_env, perf, d, expected) -> None:
    clock = VirtualClock(auto_advance=True)
    with throttled(rt, clock) as rm:
        rm.parse_manage_info_from_json(json.dumps({"perfControl": perf}))
        rm.run_action(rt.SessionRunActionOptions(sess_duration_us=d))
        sleeps = [r.duration_us for r in clock.records]
        assert sleeps == ([expected] if expected else []), \
            f"run_action(sess_duration_us={d}) at perf {perf} slept {sleeps}, expected [{expected}] [RM-10]"
        assert (rm.total_time_slot, rm.get_estimated_idle_time()) == (expected, 0), (
            f"after a sleep of {expected}: S = {rm.total_time_slot}, E = "
            f"{rm.get_estimated_idle_time()}; expected S = {expected} and no idle budget given "
            f"to the next step [RM-10]")
        assert rm.do_sleep_or_suspend(d) == expected, \
            "do_sleep_or_suspend did not follow the formula [RM-10]"


@pytest.mark.clause("RM-10")
@pytest.mark.parametrize("d", [-1, -5, -1_000_000])
def test_a_negative_duration_counts_as_0(rt, control_env, d) -> None:
    """do_sleep_or_suspend(d) with d < 0 sleeps as with d = 0: at perfControl 1,
    actual = 1, total = 100 > 0 + 50, so 50 µs."""
    clock = VirtualClock(auto_advance=True)
    with throttled(rt, clock) as rm:
        rm.parse_manage_info_from_json('{"perfControl": 1}')
        perf_in_force(rm, 1)
        got = rm.do_sleep_or_suspend(d)
        sleeps = [r.duration_us for r in clock.records]
        assert (got, sleeps) == (50, [50]), (
            f"do_sleep_or_suspend({d}) at perfControl 1 returned {got!r} and slept {sleeps}, "
            f"expected 50 and [50]: a negative duration counts as 0 [RM-10]")


@pytest.mark.clause("RM-10", "RM-11", "RM-14")
@given(steps=st.lists(st.tuples(st.sampled_from([1, 2, 10, 33, 50, 75, 99, 100]),
                                st.integers(0, 200_000), st.integers(0, 5_000),
                                st.integers(0, 6_000)),
                      min_size=1, max_size=12))
def test_throttle_matches_the_formula(rt, steps) -> None:
    """Each step: perf, duration, an idle budget given before it (0: none) and the idle time
    the executor spent in it (more than the budget: its slots overslept)."""
    clock = VirtualClock(auto_advance=True)
    with throttled(rt, clock) as rm:
        run_model(rt, rm, clock, steps)


def run_model(rt, rm, clock, steps) -> None:
    model = ThrottleModel()
    for perf, d, budget, spent in steps:
        if perf != rm.perf_control:
            rm.parse_manage_info_from_json(json.dumps({"perfControl": perf}))
        if budget:
            rm.set_estimated_idle_time(budget)
            model.est = budget
        left = rm.spend_idle_time(spent)
        assert left == model.spend(spent) and rm.in_step_idle == model.in_step, (
            f"spend_idle_time({spent}) left E = {left}, in-step idle {rm.in_step_idle}; "
            f"expected {model.est}, {model.in_step} [RM-14]")
        expected = model.step(perf, d)
        before = len(clock.records)
        rm.run_action(rt.SessionRunActionOptions(sess_duration_us=d))
        sleeps = [r.duration_us for r in clock.records[before:]]
        # at perfControl 100 the model's state is the reset of RM-11, else RM-10's arithmetic
        assert sleeps == ([expected] if expected else []), (
            f"step perf={perf} d={d} after {spent} µs of in-step idle slept {sleeps}, "
            f"expected [{expected}] [{'RM-11' if perf == 100 else 'RM-10'}]")
        assert (rm.get_estimated_idle_time(), rm.in_step_idle, rm.total_time_slot) == \
            (model.est, 0, model.slot), (
            f"after the step E = {rm.get_estimated_idle_time()}, in-step idle "
            f"{rm.in_step_idle}, S = {rm.total_time_slot}; expected {model.est}, 0, "
            f"{model.slot} [{'RM-11' if perf == 100 else 'RM-10'}]")


@pytest.mark.clause("RM-10")
@pytest.mark.parametrize("d,expected", [(0, 50), (9, 41), (10, 40), (11, 39), (12, 138)])
def test_step_no_longer_than_its_idle_time(rt, control_env, d, expected) -> None:
    """perf 1; the first step (d = 0) sleeps 50, so S = E = 50; the executor then spends 10
    of it in the step. A step with d <= consumed = 10 counts actual = 1 (total 100); one
    with d > 10 counts d - 10 (d = 12: total 200): sleep = total - d - 50."""
    clock = VirtualClock(auto_advance=True)
    with throttled(rt, clock) as rm:
        rm.parse_manage_info_from_json('{"perfControl": 1}')
        rm.run_action(rt.SessionRunActionOptions(sess_duration_us=0))
        rm.spend_idle_time(10)
        rm.run_action(rt.SessionRunActionOptions(sess_duration_us=d))
        sleeps = [r.duration_us for r in clock.records]
        assert sleeps == [50] + ([expected] if expected else []), (
            f"perf 1, 10 µs of idle spent, d={d}: slept {sleeps}, expected [50, {expected}] "
            f"(actual = d - consumed if d > consumed else 1) [RM-10]")


@pytest.mark.clause("RM-10")
def test_in_step_idle_time_is_deducted(rt, control_env) -> None:
    with throttled(rt, VirtualClock(auto_advance=True)) as rm:
        in_step_idle(rm)


def in_step_idle(rm) -> None:
    rm.parse_manage_info_from_json('{"perfControl": 50}')
    assert rm.do_sleep_or_suspend(1000) == 950, "[RM-10]"
    rm.set_estimated_idle_time(950)             # a budget; the executor spends 600 µs of it
    assert rm.spend_idle_time(600) == 350, "[RM-14]"
    # consumed = 600; actual = 1600 - 600 = 1000; total = 2000; sleep = 2000 - 1600 - 50
    assert rm.do_sleep_or_suspend(1600) == 350, "in-step idle time not deducted [RM-10]"
    assert rm.get_estimated_idle_time() == 350, \
        f"E = {rm.get_estimated_idle_time()}: the throttle changed the idle budget [RM-10]"
    rm.spend_idle_time(350)                     # 350 µs in-step; d = 300 < consumed
    # consumed = 350; actual = 1; total = 2 <= 350 -> no sleep, S = 0
    assert rm.do_sleep_or_suspend(300) == 0, "[RM-10]"
    assert (rm.get_estimated_idle_time(), rm.total_time_slot) == (0, 0), "[RM-10]"


@pytest.mark.clause("RM-10", "RM-14")
def test_idle_spent_beyond_the_budget_counts_as_idle(rt, control_env) -> None:
    """Slots that overslept their budget: all the idle they took is not compute."""
    with throttled(rt, VirtualClock(auto_advance=True)) as rm:
        rm.parse_manage_info_from_json('{"perfControl": 50}')
        rm.set_estimated_idle_time(400)
        assert rm.spend_idle_time(300) == 100 and rm.spend_idle_time(250) == 0, "[RM-14]"
        assert rm.in_step_idle == 550, \
            f"in-step idle {rm.in_step_idle} after 300 + 250 µs spent, expected 550 [RM-14]"
        # consumed = 550 (not the 400 of the budget); actual = 1550 - 550 = 1000;
        # total = 2000; sleep = 2000 - 1550 - 50 = 400
        got = rm.do_sleep_or_suspend(1550)
        assert got == 400, (f"sleep {got} after a 1550 µs step with 550 µs of in-step idle "
                            f"(150 of it beyond the budget), expected 400 [RM-10]")
        assert rm.in_step_idle == 0, "the step boundary did not reset the in-step idle [RM-10]"


@pytest.mark.clause("RM-10", "RM-11")
def test_oversleep_shortens_the_next_sleep(rt, control_env) -> None:
    clock = VirtualClock()
    with throttled(rt, clock) as rm:
        rm.parse_manage_info_from_json('{"perfControl": 50}')

        def step(d: int, late_by: int | None) -> list[int]:
            """One boundary of duration d; a sleep is let run ``late_by`` µs past its end."""
            before = len(clock.records)
            t, out = run_in_thread(lambda: rm.run_action(post(rt, duration=d)), name="step")
            if late_by is not None:
                clock.wait_for_waiters(1, clause="RM-10")
                clock.advance(clock.records[before].duration_us + late_by)
            assert joined(t) and "error" not in out, (
                f"run_action(d={d}) hung or raised {out} [RM-10]")
            return [r.duration_us for r in clock.records[before:]]

        # total = 1000 * 100 // 50 = 2000 > 1050: sleep 950, which ends 70 µs late.
        assert step(1000, 70) == [950] and rm.oversleep == 70, \
            f"a sleep of 950 µs that lasted 1020 left oversleep {rm.oversleep}, expected 70 [RM-10]"
        # The executor spends E = 950 in-step: consumed 950, actual 1000, total 2000 = d + 50:
        # no sleep, and the oversleep waits for the next sleep.
        rm.spend_idle_time(950)
        assert step(1950, None) == [] and rm.oversleep == 70, "[RM-10]"
        # consumed 0, total 2000: sleep 2000 - 1000 - 50 - 70 = 880, ending on time.
        got = step(1000, 0)
        assert got == [880] and rm.total_time_slot == 880 and rm.oversleep == 0, (
            f"the sleep after a 70 µs oversleep was {got} (S = "
            f"{rm.total_time_slot}, oversleep {rm.oversleep}), expected [880] [RM-10]")
        # A sleep of 950 that lasts 5950 is remembered as at most its own length ...
        assert step(1000, 5000) == [950] and rm.oversleep == 950, \
            f"oversleep {rm.oversleep}, expected it capped at the sleep's 950 µs [RM-10]"
        # ... and cancels the next sleep of 950 entirely: E and S become 0.
        assert step(1000, None) == [] and rm.get_estimated_idle_time() == 0 \
            and rm.total_time_slot == 0 and rm.oversleep == 0, \
            f"E = {rm.get_estimated_idle_time()}, oversleep {rm.oversleep} [RM-10]"
        # perfControl 100 clears an oversleep not compensated yet (RM-11).
        assert step(1000, 30) == [950] and rm.oversleep == 30, "[RM-10]"
        rm.parse_manage_info_from_json('{"perfControl": 100}')
        assert step(1000, None) == [] and rm.oversleep == 0, \
            f"oversleep {rm.oversleep} after a step at perfControl 100, expected 0 [RM-11]"


@pytest.mark.clause("RM-11")
def test_return_to_100_resets_the_throttle(rt, control_env) -> None:
    clock = VirtualClock(auto_advance=True)
    with throttled(rt, clock) as rm2:
        reset_at_100(rt, rm2, clock)


def reset_at_100(rt, rm2, clock) -> None:
    rm2.parse_manage_info_from_json('{"perfControl": 20}')
    rm2.run_action(rt.SessionRunActionOptions(sess_duration_us=1000))
    assert rm2.total_time_slot == 3950, "[RM-10]"
    rm2.set_estimated_idle_time(500)            # an idle budget, 200 µs of it spent
    rm2.spend_idle_time(200)
    rm2.parse_manage_info_from_json('{"perfControl": 100}')
    before = len(clock.records)
    rm2.run_action(rt.SessionRunActionOptions(sess_duration_us=1000))
    assert len(clock.records) == before, "perfControl 100 slept [RM-11]"
    state = (rm2.get_estimated_idle_time(), rm2.total_time_slot, rm2.in_step_idle)
    assert state == (0, 0, 0), \
        f"(E, S, X) = {state} after a step at perfControl 100, expected all 0 [RM-11]"
    rm2.parse_manage_info_from_json('{"perfControl": 50}')
    assert rm2.do_sleep_or_suspend(1000) == 950, \
        "the in-step idle of the old throttle survived the reset [RM-11]"


@pytest.mark.clause("RM-11")
@pytest.mark.parametrize("d", [0, 1, 1000])
def test_do_sleep_or_suspend_at_100_returns_0(rt, control_env, d) -> None:
    """do_sleep_or_suspend(d) at perfControl 100 sleeps nothing and returns 0, the sleep it
    made (RM-10), whether a throttled step came before it or not, and resets as a step does."""
    clock = VirtualClock(auto_advance=True)
    with throttled(rt, clock) as rm:
        for throttled_before in (False, True):
            if throttled_before:
                rm.parse_manage_info_from_json('{"perfControl": 20}')
                rm.run_action(rt.SessionRunActionOptions(sess_duration_us=1000))
            rm.parse_manage_info_from_json('{"perfControl": 100}')
            perf_in_force(rm, 100)
            before = len(clock.records)
            got = rm.do_sleep_or_suspend(d)
            assert got == 0 and len(clock.records) == before, (
                f"do_sleep_or_suspend({d}) at perfControl 100"
                f"{' after a throttled step' if throttled_before else ''} returned {got!r} "
                f"and slept {[r.duration_us for r in clock.records[before:]]}, expected 0 and "
                f"no sleep [RM-11]")
            assert rm.total_time_slot == 0, (
                f"S = {rm.total_time_slot} after do_sleep_or_suspend at perfControl 100 "
                f"[RM-11]")


@pytest.mark.clause("RM-11")
@pytest.mark.parametrize("alone", ["E", "S"])
def test_100_resets_each_amount_alone(rt, control_env, alone) -> None:
    """The reset of RM-11 does not depend on the other amounts: an idle budget E given while
    nothing was throttled, or the sleep S of the last throttled step with no budget given,
    is set to 0 by one step at perfControl 100."""
    clock = VirtualClock(auto_advance=True)
    with throttled(rt, clock) as rm:
        if alone == "E":
            rm.set_estimated_idle_time(500)
        else:
            rm.parse_manage_info_from_json('{"perfControl": 20}')
            rm.run_action(rt.SessionRunActionOptions(sess_duration_us=1000))
            rm.parse_manage_info_from_json('{"perfControl": 100}')
        before = (rm.get_estimated_idle_time(), rm.total_time_slot, rm.in_step_idle)
        rm.run_action(rt.SessionRunActionOptions(sess_duration_us=1000))
        state = (rm.get_estimated_idle_time(), rm.total_time_slot, rm.in_step_idle)
        assert state == (0, 0, 0), (
            f"(E, S, X) = {before} with only {alone} set, then {state} after a step at "
            f"perfControl 100, expected all 0 [RM-11]")


@pytest.mark.clause("RM-12")
def test_zero_suspends_until_non_zero(rt, no_thread_leak, managed, vclock, listener) -> None:
    rm, writer = managed
    deliver(lambda: writer.write(perf=0), vclock)
    perf_in_force(rm, 0)
    t, out = run_in_thread(lambda: rm.run_action(post(rt, duration=500)), name="step")
    vclock.wait_for_waiters(2, clause="RM-12")  # the listener and the suspended step
    for _ in range(3):
        vclock.tick(100_000)
        assert t.is_alive(), "the step did not stay suspended at perfControl 0 [RM-12]"
    assert rm.get_estimated_idle_time() == 0, "[RM-12]"
    writer.write(perf=50)
    poll(vclock)                            # delivered: perfControl 50 is in force from here
    # RM-12 rechecks at least every 100 000 µs of the clock: a step that rechecks on a short
    # period (AntMan's 100 µs) rather than being woken may be between two waits at the poll,
    # so it is given one recheck bound of clock time, not less and not more.
    vclock.tick(100_000)
    assert joined(t), ("a non-zero perfControl did not resume the step within 100 000 µs of "
                       "the clock after its delivery [RM-12]")
    assert "error" not in out, f"the suspended step raised {out.get('error')!r} [RM-12]"
    step_waits = [r.duration_us for r in vclock.records if r.thread == "step"]
    assert step_waits and all(w <= 100_000 for w in step_waits), \
        f"suspension waits {step_waits}: not through the clock, or rechecks > 100000 µs [RM-12]"
    assert rm.get_estimated_idle_time() == 0 and rm.total_time_slot == 0, \
        "resuming changed the idle-time state or slept [RM-12]"


class ObservedRealClock:
    """Real time, real events (a set event wakes its waiter at once), and a count of the
    threads blocked in ``wait`` so that a test can wait for them without sleeping."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self.waiting = 0

    def now_us(self) -> int:
        return time.monotonic_ns() // 1000

    def time_s(self) -> int:
        return int(time.time())

    def wait(self, event: threading.Event, timeout_us: int) -> bool:
        with self._cv:
            self.waiting += 1
            self._cv.notify_all()
        try:
            return event.wait(max(timeout_us, 0) / 1e6)
        finally:
            with self._cv:
                self.waiting -= 1

    def sleep_us(self, duration_us: int, cancel: threading.Event | None = None) -> bool:
        return not self.wait(cancel or threading.Event(), duration_us)

    def wait_for(self, count: int, timeout_s: float = 10.0) -> bool:
        with self._cv:
            return self._cv.wait_for(lambda: self.waiting >= count, timeout_s)


@pytest.mark.clause("RM-12")
def test_waking_many_suspended_steps_while_they_leave(rt, control_env, tmp_path) -> None:
    """24 steps suspended at perfControl 0; a non-zero value wakes them all while the first
    ones woken already leave their suspension (thread switches forced every microsecond).
    The waking must neither raise nor miss a step, round after round, nor at close()."""
    clock = ObservedRealClock()
    fl = rt.FileListener(clock=VirtualClock())
    rm = rt.GPUResourceManagement(str(tmp_path / "cfg.json"), clock=clock, file_listener=fl)
    n, rounds = 24, 12
    old_interval = sys.getswitchinterval()
    try:
        for r in range(rounds):
            rm.parse_manage_info_from_json('{"perfControl": 0}')
            perf_in_force(rm, 0)
            steps = [run_in_thread(lambda: rm.run_action(post(rt)), name=f"step-{r}-{i}")
                     for i in range(n)]
            assert clock.wait_for(n), f"round {r}: {clock.waiting} of {n} steps suspended [RM-12]"
            sys.setswitchinterval(1e-6)
            try:
                if r < rounds - 1:
                    ok = rm.parse_manage_info_from_json('{"perfControl": 50}')
                else:
                    rm.close()
                    ok = True
            except RuntimeError as exc:
                ok = exc
            finally:
                sys.setswitchinterval(old_interval)
            assert ok is True, (f"round {r}: waking {n} suspended steps raised {ok!r} (the set "
                                f"of suspended steps changed while it was walked) [RM-12]")
            left = not_joined([t for t, _ in steps])
            assert not left, f"round {r}: steps still suspended after the wake: {left} [RM-12]"
            assert all("error" not in out for _, out in steps), \
                f"round {r}: a suspended step raised [RM-12]"
    finally:
        sys.setswitchinterval(old_interval)
        rm.close()
        fl.close()


@pytest.mark.clause("RM-12", "CLK-3")
def test_close_ends_a_suspension(rt, no_thread_leak, managed, vclock) -> None:
    rm, _ = managed
    rm.parse_manage_info_from_json('{"perfControl": 0}')
    perf_in_force(rm, 0)
    t, out = run_in_thread(lambda: rm.run_action(post(rt)), name="step")
    vclock.wait_for_waiters(2, clause="RM-12")
    rm.close()
    assert joined(t), "close() did not end the suspension [RM-12]"


class _ClosableSession:
    """A session as RM-12 sees it: only its ``closed`` attribute."""
    closed = False


def suspended_step(rt, rm, vclock) -> tuple[threading.Thread, dict, _ClosableSession]:
    """A step suspended by perfControl 0 in a thread, over a session not closed yet: the
    thread, its outcome and the session, once the listener and the step wait on the clock."""
    session = _ClosableSession()
    rm.parse_manage_info_from_json('{"perfControl": 0}')
    perf_in_force(rm, 0)
    t, out = run_in_thread(lambda: rm.run_action(post(rt, session=session)), name="step")
    vclock.wait_for_waiters(2, clause="RM-12")   # the listener and the suspended step
    return t, out, session


@pytest.mark.clause("RM-12")
def test_closed_session_ends_a_suspension(rt, no_thread_leak, managed, vclock) -> None:
    rm, _ = managed
    t, _, session = suspended_step(rt, rm, vclock)
    session.closed = True
    rm.wake_suspended()
    assert joined(t), "a closed session did not end the suspension [RM-12]"


@pytest.mark.clause("RM-12", "RM-8")
def test_limits_applied_before_suspending(rt, rt_managed, vclock) -> None:
    ctx, writer, (g0, _) = rt_managed
    rm = ctx.resource_management
    deliver(lambda: writer.write(config_document(limits={bus_id(rt, g0): 4 * MiB}, perf=0)),
            vclock)
    perf_in_force(rm, 0)
    t, _ = run_in_thread(lambda: rm.run_action(post(rt, ctx)), name="step")
    vclock.wait_for_waiters(2, clause="RM-12")
    assert bytes_limit(g0) == 4 * MiB, "a suspended boundary did not apply the pending limit [RM-12]"
    rm.parse_manage_info_from_json('{"perfControl": 100}')
    assert joined(t), "[RM-12]"


@pytest.mark.clause("RM-12")
@pytest.mark.parametrize("perf", [1, 2, 99])
def test_every_non_zero_value_ends_a_suspension_at_once(rt, no_thread_leak, managed, vclock,
                                                         perf) -> None:
    """The smallest non-zero perfControl resumes a suspended step as 100 does: at once, with
    no clock time passing, and the step ends without an error."""
    rm, _ = managed
    t, out, _ = suspended_step(rt, rm, vclock)
    assert rm.parse_manage_info_from_json('{"perfControl": %d}' % perf) is True, \
        f"perfControl {perf} was rejected [RM-12]"
    assert joined(t), (f"perfControl {perf} after 0 did not end the suspension with the clock "
                       f"standing still [RM-12]")
    assert "error" not in out, f"the suspended step raised {out.get('error')!r} [RM-12]"


@pytest.mark.clause("RM-10")
def test_do_sleep_or_suspend_at_0_returns_0_once_resumed(rt, no_thread_leak, managed,
                                                         vclock) -> None:
    """do_sleep_or_suspend(d) at perfControl 0 suspends as a step does (RM-12); resumed, it
    returns 0, the sleep it made."""
    rm, _ = managed
    rm.parse_manage_info_from_json('{"perfControl": 0}')
    perf_in_force(rm, 0)
    t, out = run_in_thread(lambda: rm.do_sleep_or_suspend(1000), name="step")
    vclock.wait_for_waiters(2, clause="RM-12")   # the listener and the suspended call
    rm.parse_manage_info_from_json('{"perfControl": 50}')
    assert joined(t), "perfControl 50 did not end do_sleep_or_suspend's suspension [RM-12]"
    assert out == {"result": 0}, (
        f"do_sleep_or_suspend(1000) suspended at perfControl 0 and resumed gave {out}, "
        f"expected it to return 0 (no sleep) [RM-10]")


class _CountingSession:
    """A session whose ``closed`` (never true) counts its reads."""

    def __init__(self) -> None:
        self.reads = 0

    @property
    def closed(self) -> bool:
        self.reads += 1
        return False


@pytest.mark.clause("RM-12")
def test_a_woken_step_still_suspended_waits_again(rt, no_thread_leak, managed, vclock) -> None:
    """After wake_suspended() with perfControl still 0 the step re-checks once and waits
    again on the clock: with the clock standing still it reads its session's ``closed``
    no more (it does not spin)."""
    rm, _ = managed
    session = _CountingSession()
    rm.parse_manage_info_from_json('{"perfControl": 0}')
    perf_in_force(rm, 0)
    t, out = run_in_thread(lambda: rm.run_action(post(rt, session=session)), name="step")
    try:
        vclock.wait_for_waiters(2, clause="RM-12")
        before = session.reads
        rm.wake_suspended()
        time.sleep(0.2)                 # a spinning step reads thousands of times meanwhile
        vclock.wait_for_waiters(2, clause="RM-12")
        after = session.reads
        assert after - before <= 2, (
            f"after one wake_suspended() with the clock standing still the suspended step "
            f"read its session's closed {after - before} times: it re-checks at once and "
            f"then at most every 100 000 µs of the clock, not in a loop [RM-12]")
    finally:
        rm.parse_manage_info_from_json('{"perfControl": 100}')
        assert joined(t) and "error" not in out, f"the step did not resume: {out} [RM-12]"


@pytest.mark.clause("RM-12")
def test_suspended_steps_leave_nothing_behind(rt, managed) -> None:
    """Steps at perfControl 0 over a closed session suspend and end at once: 2000 of them
    leave no object behind (the memory an instance keeps does not grow with them)."""
    rm, _ = managed
    rm.parse_manage_info_from_json('{"perfControl": 0}')
    perf_in_force(rm, 0)
    session = ClosedSession()
    previous = logging.root.manager.disable
    logging.disable(logging.INFO)       # the suspend lines, kept by log capture, are no leak
    try:
        rm.run_action(post(rt, session=session))
        gc.collect()
        before = len(gc.get_objects())
        for _ in range(2000):
            rm.run_action(post(rt, session=session))
        gc.collect()
        grown = len(gc.get_objects()) - before
    finally:
        logging.disable(previous)
    assert grown < 500, (f"2000 steps suspended over a closed session left {grown} more "
                         f"objects behind [RM-12]")


@pytest.mark.clause("RM-12")
def test_a_step_resumed_before_it_suspends_logs_no_suspension(rt, rt_managed, vclock,
                                                              caplog) -> None:
    """perfControl is 0 when the step reads it and 50 by the time it would suspend (the
    value arrives while the step applies its limits): the step returns without waiting and
    logs no line of a suspended step (none naming the config path)."""
    ctx, writer, (g0, _) = rt_managed
    rm = ctx.resource_management
    deliver(lambda: writer.write(config_document(limits={bus_id(rt, g0): 4 * MiB}, perf=0)),
            vclock)
    perf_in_force(rm, 0)

    class ValueArrivesMeanwhile:
        def list_devices(self):
            rm.parse_manage_info_from_json('{"perfControl": 50}')
            return ctx.device_mgr.list_devices()

    caplog.set_level(logging.DEBUG)
    caplog.clear()
    before = len(vclock.records)
    t, out = run_in_thread(lambda: rm.run_action(rt.SessionRunActionOptions(
        device_mgr=ValueArrivesMeanwhile(), sess_duration_us=1000)), name="step")
    if not joined(t):
        rm.parse_manage_info_from_json('{"perfControl": 100}')
        joined(t)
        pytest.fail("a step whose perfControl became 50 before it suspended stayed "
                    "suspended [RM-12]")
    precondition_holds("RM-8", bytes_limit(g0) == 4 * MiB, "the boundary applied the limit")
    named = [r.getMessage()[:200] for r in runtime_records(caplog, rt, logging.DEBUG,
                                                           containing=writer.path.name)]
    assert not named, (f"a step whose perfControl became 50 before it suspended logged "
                       f"{named}, a suspended step's line [RM-12]")
    step_waits = [r for r in vclock.records[before:] if r.thread == "step"]
    assert not step_waits, (f"a step whose perfControl became 50 before it suspended waited "
                            f"{[r.duration_us for r in step_waits]} on the clock [RM-12]")


@pytest.mark.clause("RM-13")
def test_perf_read_once_per_step(rt, control_env) -> None:
    clock = VirtualClock(auto_advance=True)
    with throttled(rt, clock) as rm2:
        read_once(rt, rm2, clock)


def read_once(rt, rm2, clock) -> None:
    rm2.parse_manage_info_from_json(json.dumps(
        {"perfControl": 50, "gpuConfigInfo": {BUS: {"maxDeviceMem": MiB}}}))

    class SwitchingDeviceMgr:
        """Delivers perfControl 0 while the step applies its limits."""

        def list_devices(self):
            rm2.parse_manage_info_from_json('{"perfControl": 0}')
            return []

    t, out = run_in_thread(lambda: rm2.run_action(rt.SessionRunActionOptions(
        device_mgr=SwitchingDeviceMgr(), sess_duration_us=1000)), name="step")
    finished = joined(t, 5)
    rm2.parse_manage_info_from_json('{"perfControl": 100}')   # release it if it suspended
    t.join(5)
    assert "error" not in out, f"a perfControl change mid-step raised {out.get('error')!r} [RM-13]"
    assert finished, "the step used the perfControl delivered mid-step (it suspended) [RM-13]"
    assert [r.duration_us for r in clock.records] == [950], \
        f"the step slept {[r.duration_us for r in clock.records]}, expected [950] [RM-13]"


# -- RM-14 .. RM-16: bookkeeping and close ----------------------------------------------

@pytest.mark.clause("CLK-2")
def test_without_a_clock_the_throttle_sleeps_on_the_real_clock(rt, control_env, listener,
                                                               tmp_path) -> None:
    """``clock`` left out (None) is the real clock: a throttled step's sleep is made in real
    time, and lasts at least as long as asked (CLK-1)."""
    rm = rt.GPUResourceManagement(str(tmp_path / "gpu_config.json"), file_listener=listener)
    try:
        rm.parse_manage_info_from_json('{"perfControl": 50}')
        perf_in_force(rm, 50)
        start = time.monotonic()
        try:
            slept = rm.do_sleep_or_suspend(2000)  # 2000 * 100 // 50 - 2000 - 50 = 1950 µs
        except Exception as exc:                  # noqa: BLE001 - reported with the clause
            pytest.fail(f"without a clock the throttle raised {exc!r}: clock=None is not the "
                        f"real clock [CLK-2]")
        elapsed_us = (time.monotonic() - start) * 1e6
    finally:
        rm.close()
    precondition_holds("RM-10", slept == 1950,
                       f"perfControl 50 after a 2000 µs step sleeps 1950 µs (asked {slept})")
    assert elapsed_us >= 1950, (
        f"without a clock the 1950 µs throttle sleep lasted {elapsed_us:.0f} µs of real time: "
        f"clock=None is not the real clock [CLK-2]")


@pytest.mark.clause("RM-14")
def test_idle_time_bookkeeping(rt, managed) -> None:
    rm, _ = managed
    assert rm.get_estimated_idle_time() == 0, "[RM-14]"
    rm.set_estimated_idle_time(1000)
    assert rm.get_estimated_idle_time() == 1000, "[RM-14]"
    rm.set_estimated_idle_time(-5)
    assert rm.get_estimated_idle_time() == 0, "set_estimated_idle_time(-5) did not store 0 [RM-14]"


@pytest.mark.clause("RM-14")
def test_spend_idle_time_counts_all_of_it(rt, managed) -> None:
    rm, _ = managed
    rm.set_estimated_idle_time(1000)
    assert rm.spend_idle_time(300) == 700 and rm.in_step_idle == 300, "[RM-14]"
    assert rm.spend_idle_time(-5) == 700 and rm.in_step_idle == 300, \
        "spend_idle_time(-5) must count as 0 [RM-14]"
    assert rm.spend_idle_time(1000) == 0 and rm.in_step_idle == 1300, (
        f"spend_idle_time(1000) with E = 700: E = {rm.get_estimated_idle_time()}, in-step "
        f"idle {rm.in_step_idle}, expected 0 and 1300 [RM-14]")
    rm.set_estimated_idle_time(10)
    assert rm.spend_idle_time(25) == 0 and rm.in_step_idle == 1325, "[RM-14]"
    assert rm.oversleep == 0 and rm.total_time_slot == 0, "[RM-14]"


@pytest.mark.clause("RM-14")
def test_spend_idle_time_is_atomic_under_threads(rt, managed) -> None:
    rm, _ = managed
    rm.set_estimated_idle_time(8000)
    barrier = threading.Barrier(4)

    def spend() -> None:
        barrier.wait()
        for _ in range(2500):
            rm.spend_idle_time(1)

    threads = [threading.Thread(target=spend) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        assert joined(t), "[RM-14]"
    assert (rm.get_estimated_idle_time(), rm.in_step_idle) == (0, 10000), (
        f"10000 concurrent spend_idle_time(1) from E = 8000 left E = "
        f"{rm.get_estimated_idle_time()}, in-step idle {rm.in_step_idle}; expected 0, 10000 "
        f"[RM-14]")


@pytest.mark.clause("RM-14")
def test_a_set_concurrent_with_a_spend_is_not_lost(rt, managed, monkeypatch) -> None:
    """set_estimated_idle_time lands exactly as spend_idle_time is about to take the idle-time
    lock (a watched lock, fixtures/interleave.py, runs the set from another thread then): the
    outcome is one of the two orders, set then spend (4900) or spend then set (5000), never
    the spend computed from the E it saw before the set (900)."""
    from fixtures.interleave import watch_lock
    rm, _ = managed
    rm.set_estimated_idle_time(1000)
    watched = watch_lock(monkeypatch, rm, "_idle_lock", "the idle-time lock")
    done: dict = {}

    def concurrent_set() -> None:
        t, out = run_in_thread(lambda: rm.set_estimated_idle_time(5000), name="idle-set")
        done["joined"] = joined(t)
        done.update(out)

    watched.before_next_acquire(concurrent_set)
    returned = rm.spend_idle_time(100)
    assert not watched.pending, \
        "spend_idle_time took no lock of the watched idle-time lock [RM-14]"
    assert done.get("joined") and "error" not in done, f"the concurrent set: {done} [RM-14]"
    final = rm.get_estimated_idle_time()
    assert final in (4900, 5000), (
        f"E = 1000, then spend_idle_time(100) with set_estimated_idle_time(5000) at the same "
        f"time left E = {final} (spend returned {returned}): the set was lost, the spend's "
        f"read-modify-write is not atomic [RM-14]")


@contextlib.contextmanager
def frequent_thread_switches():
    """Make the interpreter switch threads every microsecond: a read-modify-write that is not
    atomic then loses updates within a few thousand operations."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def hammer(workers: list, clause: str) -> list[BaseException]:
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(workers))

    def run(work) -> None:
        barrier.wait()
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(w,)) for w in workers]
    with frequent_thread_switches():
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert not any(t.is_alive() for t in threads), f"a hammering thread did not end [{clause}]"
    return errors


@pytest.mark.clause("RM-14")
def test_spend_idle_time_is_atomic_under_frequent_switches(rt, managed) -> None:
    rm, _ = managed
    rm.set_estimated_idle_time(16_000)

    def spend() -> None:
        for _ in range(5000):
            rm.spend_idle_time(1)

    errors = hammer([spend] * 4, "RM-14")
    assert not errors, f"spend_idle_time raised {errors[:1]} [RM-14]"
    assert (rm.get_estimated_idle_time(), rm.in_step_idle) == (0, 20000), (
        f"20000 concurrent spend_idle_time(1) from E = 16000 left E = "
        f"{rm.get_estimated_idle_time()}, in-step idle {rm.in_step_idle}; expected 0, 20000: "
        f"an update was lost [RM-14]")


@pytest.mark.clause("RM-15")
def test_queued_op_high_water_mark_under_frequent_switches(rt, managed) -> None:
    rm, _ = managed
    keys = [("graph", k) for k in range(4)]

    def setter(offset: int):
        def work() -> None:
            for n in range(1, 3001):
                for key in keys:
                    rm.set_executor_queued_op_num(key, n + offset if n % 2 else offset)
        return work

    errors = hammer([setter(o) for o in (0, 1, 2)], "RM-15")
    assert not errors, f"set_executor_queued_op_num raised {errors[:1]} [RM-15]"
    got = [rm.get_executor_queued_op_num(key) for key in keys]
    assert got == [3001] * 4, (f"the high-water marks after concurrent sets are {got}, "
                               f"expected the maximum ever set, 3001: a larger value was "
                               f"overwritten by a smaller one [RM-15]")


@pytest.mark.clause("RM-7")
def test_memory_limits_can_be_read_while_configs_arrive(rt, managed) -> None:
    rm, _ = managed
    seen: list[int] = []

    def writer() -> None:
        for i in range(600):
            rm.parse_manage_info_from_json(json.dumps(
                {"gpuConfigInfo": {f"{i % 200:02x}:00.0": {"maxDeviceMem": i}}}))

    def reader() -> None:
        for _ in range(3000):
            seen.append(len(rm.memory_limits))

    errors = hammer([writer, reader, reader], "RM-7")
    assert not errors, (f"reading memory_limits while configs were parsed raised "
                        f"{errors[:1]!r} [RM-7]")
    final = rm.memory_limits
    assert final == {f"{k:02x}:00.0": 400 + k for k in range(200)}, (
        f"after 600 configs over 200 bus ids memory_limits holds {len(final)} bus ids, "
        f"expected each with its last value [RM-7]")
    assert all(0 <= n <= 200 for n in seen), f"a read saw {max(seen)} bus ids [RM-7]"


@pytest.mark.clause("RM-15")
def test_queued_op_high_water_mark(rt, managed) -> None:
    rm, _ = managed
    key, other = object(), ("executor", 2)
    assert rm.get_executor_queued_op_num(key) == 0, "[RM-15]"
    rm.set_executor_queued_op_num(key, 5)
    rm.set_executor_queued_op_num(key, 3)
    rm.set_executor_queued_op_num(other, 1)
    assert rm.get_executor_queued_op_num(key) == 5, "the high-water mark decreased [RM-15]"
    assert rm.get_executor_queued_op_num(other) == 1, "[RM-15]"
    rm.set_executor_queued_op_num(key, 9)
    assert rm.get_executor_queued_op_num(key) == 9, "[RM-15]"


@pytest.mark.clause("RM-15")
def test_queued_op_num_of_zero_keeps_no_key(rt, managed) -> None:
    """A key only ever set to 0 or less is not held: nothing refers to it once the caller
    drops it (a key set to a positive value is held, as its maximum)."""
    class Key:
        pass

    rm, _ = managed
    zero, negative, positive = Key(), Key(), Key()
    rm.set_executor_queued_op_num(zero, 0)
    rm.set_executor_queued_op_num(negative, -3)
    rm.set_executor_queued_op_num(negative, 0)
    rm.set_executor_queued_op_num(positive, 1)
    refs = {name: weakref.ref(k) for name, k in
            (("zero", zero), ("negative", negative), ("positive", positive))}
    del zero, negative, positive
    gc.collect()
    held = sorted(name for name, ref in refs.items() if ref() is not None)
    assert held == ["positive"], (
        f"keys still referred to after set_executor_queued_op_num: {held}, expected only the "
        f"one set to 1 [RM-15]")
    assert rm.get_executor_queued_op_num(refs["positive"]()) == 1, "[RM-15]"


@pytest.mark.clause("RM-16", "CLK-3")
def test_close_cancels_a_throttle_sleep(rt, no_thread_leak, managed, vclock) -> None:
    rm, _ = managed
    rm.parse_manage_info_from_json('{"perfControl": 1}')
    t, _ = run_in_thread(lambda: rm.run_action(post(rt, duration=10_000_000)), name="step")
    with precondition("RM-10", "perfControl 1 puts the step in a throttle sleep"):
        vclock.wait_for_waiters(2, clause="RM-10")
    rm.close()
    assert joined(t), "close() did not cancel the throttle sleep [RM-16]"
    before = len(vclock.records)
    rm.run_action(post(rt, duration=10_000_000))
    assert len(vclock.records) == before, "run_action after close() waited [RM-16]"


# -- RM-17, RM-18: GPUUsageAdjustment ----------------------------------------------------

@pytest.mark.clause("RM-17")
def test_adjustment_finds_the_gpu_by_bus_id(rt, runtimes, caplog) -> None:
    ctx = runtimes(num_gpus=2)
    g0, g1 = gpus(ctx)
    adj = rt.GPUUsageAdjustment()
    assert adj.adjust_mem_limit(bus_id(rt, g1), 8 * MiB, ctx.device_mgr) is True, "[RM-17]"
    assert (bytes_limit(g0), bytes_limit(g1)) == (64 * MiB, 8 * MiB), \
        "adjust_mem_limit changed the wrong GPU [RM-17]"
    caplog.set_level(logging.ERROR)
    assert adj.adjust_mem_limit("ff:00.0", MiB, ctx.device_mgr) is False, "[RM-17]"
    assert adj.adjust_mem_limit(bus_id(rt, g0), MiB, None) is False, "[RM-17]"
    errors = runtime_records(caplog, rt, logging.ERROR)
    assert len(errors) == 2, "a GPU not found did not log one error per call [RM-17]"
    not_found, no_manager = (e.getMessage() for e in errors)
    assert "ff:00.0" in not_found and bus_id(rt, g0) in no_manager, (
        f"the errors of a GPU not found do not name its bus id: {not_found!r}, "
        f"{no_manager!r} [RM-17]")
    assert names_identifier(no_manager, "device_mgr") or "device manager" in no_manager.lower(), (
        f"the error of a lookup without a device manager does not say so: {no_manager!r} "
        f"[RM-17]")
    assert adj.adjust_mem_limit(bus_id(rt, g0), MiB, ctx.device_mgr) is True, \
        "a failed lookup was remembered [RM-17]"


@pytest.mark.clause("RM-17")
def test_a_bus_id_that_is_no_string_is_nothing_found(rt, runtimes, caplog) -> None:
    """A bus id given as an int (or None) equals no GPU's: False, and an error naming it,
    with a device manager and without one, instead of an exception."""
    ctx = runtimes(num_gpus=1)
    adj = rt.GPUUsageAdjustment()
    caplog.set_level(logging.ERROR)
    for bus, mgr in ((3875, ctx.device_mgr), (3875, None), (None, ctx.device_mgr)):
        caplog.clear()
        try:
            got = adj.adjust_mem_limit(bus, MiB, mgr)
        except Exception as exc:
            pytest.fail(f"adjust_mem_limit({bus!r}, 1 MiB, {mgr!r}) raised {exc!r} [RM-17]")
        assert got is False, f"adjust_mem_limit({bus!r}) returned {got!r} [RM-17]"
        errors = [e.getMessage() for e in runtime_records(caplog, rt, logging.ERROR)]
        assert len(errors) == 1 and str(bus) in errors[0], (
            f"adjust_mem_limit({bus!r}, 1 MiB, {mgr!r}) logged {errors!r}: expected one error "
            f"naming the bus id [RM-17]")
    assert bytes_limit(gpus(ctx)[0]) == 64 * MiB, "a bus id of no GPU changed a limit [RM-17]"


@pytest.mark.clause("RM-18")
def test_adjustment_runs_under_its_lock(rt, runtimes, monkeypatch) -> None:
    """The lookup, the clamp, the comparison with the limit last set and the change of the
    allocator are one step: with the adjustment's lock held, so that two calls for one GPU
    (two step boundaries, or a boundary and a direct call) never both find it unremembered,
    nor remember a limit the allocator does not have. Forced: the lock is watched
    (fixtures/interleave.py) and each line the call runs records whether it was held."""
    from fixtures.interleave import lock_held_in, watch_lock
    ctx = runtimes()
    adj = rt.GPUUsageAdjustment()
    watched = watch_lock(monkeypatch, adj, "_lock", "the usage adjustment's lock")
    applied, held = lock_held_in(
        lambda: adj.adjust_mem_limit(bus_id(rt, gpus(ctx)[0]), 8 * MiB, ctx.device_mgr),
        "adjust", watched)
    assert applied is True, "adjust_mem_limit(8 MiB) on a 64 MiB GPU [RM-18]"
    if not held:
        pytest.skip("the check follows the reference's design (adjust_mem_limit running "
                    "GPUUsageAdjustment.adjust); this runtime has no such method")
    assert any(held), (f"adjust ran {len(held)} line(s), none with the adjustment's lock "
                       f"held: two calls for one GPU at once can both apply, and the limit "
                       f"remembered need not be the allocator's [RM-18]")


@pytest.mark.clause("RM-17")
def test_adjustment_takes_the_first_gpu_of_any_case(rt) -> None:
    """A device manager of duck-typed devices: "GPU " is no GPU, "gPu" is; of two GPUs with
    the same bus id the first is taken."""

    class Attrs:
        def __init__(self, desc: str) -> None:
            self.physical_device_desc = desc

    class Dev:
        def __init__(self, device_type: str, bus: str) -> None:
            self.device_type = device_type
            self.attributes = Attrs(f"device: 0, name: X, pci bus id: 0000:{bus}, "
                                    f"compute capability: 7.0")
            self.bfc = rt.BFCAllocator(rt.SimulatedDeviceMemory(64 * MiB), 64 * MiB, True,
                                       f"{device_type}_bfc")

        def get_allocator(self, attrs=None):
            return self.bfc

    class Mgr:
        def __init__(self, devices) -> None:
            self.devices = devices

        def list_devices(self):
            return list(self.devices)

    spaced, lower, upper = Dev("GPU ", "3b:00.0"), Dev("gPu", "3b:00.0"), Dev("GPU", "3b:00.0")
    other = Dev("GPU", "3c:00.0")
    mgr = Mgr([spaced, other, lower, upper])
    assert rt.GPUUsageAdjustment().adjust_mem_limit("3b:00.0", 8 * MiB, mgr) is True, \
        "adjust_mem_limit('3b:00.0') found no GPU among 'GPU ', 'gPu' and 'GPU' [RM-17]"
    limits = [d.bfc.get_stats().bytes_limit for d in (spaced, other, lower, upper)]
    assert limits == [64 * MiB, 64 * MiB, 8 * MiB, 64 * MiB], (
        f"limits of ('GPU ', other bus, 'gPu', 'GPU') = {limits}: the first device whose type "
        f"upper-cased is 'GPU' with bus 3b:00.0 must be adjusted, only it [RM-17]")


@pytest.mark.clause("RM-17")
def test_lookup_goes_past_gpus_without_a_bus_id_and_repeated_bus_ids(rt) -> None:
    """The GPU looked for comes after a GPU whose description carries no bus id and after a
    second GPU with the bus id of the one before it: the lookup goes on past both."""
    from types import SimpleNamespace

    def gpu(desc: str) -> SimpleNamespace:
        bfc = rt.BFCAllocator(rt.SimulatedDeviceMemory(64 * MiB), 64 * MiB, True, "GPU_bfc")
        return SimpleNamespace(device_type="GPU", bfc=bfc, get_allocator=lambda *a: bfc,
                               attributes=SimpleNamespace(physical_device_desc=desc))

    no_bus = gpu("device: 0, name: X, compute capability: 7.0")
    first, again, wanted = (gpu(f"device: {i}, name: X, pci bus id: 0000:{bus}, "
                                f"compute capability: 7.0")
                            for i, bus in ((1, "3c:00.0"), (2, "3c:00.0"), (3, "3b:00.0")))
    devices = [no_bus, first, again, wanted]
    mgr = SimpleNamespace(list_devices=lambda: list(devices))
    got = rt.GPUUsageAdjustment().adjust_mem_limit("3b:00.0", 8 * MiB, mgr)
    limits = [d.bfc.get_stats().bytes_limit for d in devices]
    assert got is True and limits == [64 * MiB, 64 * MiB, 64 * MiB, 8 * MiB], (
        f"adjust_mem_limit('3b:00.0') over (a GPU without a bus id, 3c:00.0, 3c:00.0 again, "
        f"3b:00.0) returned {got!r} with limits {limits}: expected True and only the last "
        f"GPU limited to 8 MiB [RM-17]")


@pytest.mark.clause("RM-17")
def test_adjustment_without_vmem_uses_the_bfc(rt, runtimes, control_env) -> None:
    control_env.setenv("TF_GPU_VMEM", "false")
    ctx = runtimes()
    g0 = gpus(ctx)[0]
    assert not hasattr(g0.get_allocator(), "device_allocator"), "[RM-17]"
    assert rt.GPUUsageAdjustment().adjust_mem_limit(bus_id(rt, g0), 2 * MiB, ctx.device_mgr), (
        "[RM-17]")
    assert bytes_limit(g0) == 2 * MiB, "[RM-17]"


@pytest.mark.clause("RM-17")
@pytest.mark.parametrize("bad", [-1, 1.5, 1 << 64, "1048576", None])
def test_adjustment_rejects_bad_limits(rt, runtimes, bad) -> None:
    ctx = runtimes()
    with pytest.raises(ValueError):
        rt.GPUUsageAdjustment().adjust_mem_limit(bus_id(rt, gpus(ctx)[0]), bad, ctx.device_mgr)


@pytest.mark.clause("RM-17")
@pytest.mark.parametrize("where", ["no device manager", "unknown bus id"])
@pytest.mark.parametrize("bad", [-1, 1 << 64])
def test_bad_limit_is_rejected_before_the_gpu_is_looked_for(rt, runtimes, where, bad) -> None:
    """The limit is checked whatever the lookup would find: ValueError, not False."""
    ctx = runtimes()
    bus, mgr = ((bus_id(rt, gpus(ctx)[0]), None) if where == "no device manager"
                else ("ff:00.0", ctx.device_mgr))
    expect_value_error(lambda: rt.GPUUsageAdjustment().adjust_mem_limit(bus, bad, mgr),
                       f"adjust_mem_limit({bus!r}, {bad}) with {where}", "RM-17")


@pytest.mark.clause("RM-17")
def test_empty_bus_id_finds_no_gpu(rt, runtimes) -> None:
    """Every GPU the runtime builds has a bus id, so the empty string names none of them:
    nothing is found, False, and no allocator changes."""
    ctx = runtimes(num_gpus=2)
    before = [bytes_limit(g) for g in gpus(ctx)]
    try:
        got = rt.GPUUsageAdjustment().adjust_mem_limit("", 8 * MiB, ctx.device_mgr)
    except Exception as exc:      # noqa: BLE001 - the clause says what it returns
        got = exc
    assert got is False and [bytes_limit(g) for g in gpus(ctx)] == before, (
        f"adjust_mem_limit('', 8 MiB) returned {got!r}, expected False (no GPU has the empty "
        f"bus id); limits {before} -> {[bytes_limit(g) for g in gpus(ctx)]} [RM-17]")


@pytest.mark.clause("RM-17")
def test_gpu_whose_allocator_is_no_bfc_is_not_found(rt, caplog) -> None:
    """A device manager of duck-typed devices whose only GPU with the bus id has an
    allocator that is neither a BFC allocator nor a VMem allocator: nothing is found."""
    caplog.set_level(logging.ERROR)
    try:
        got = rt.GPUUsageAdjustment().adjust_mem_limit("3b:00.0", 8 * MiB,
                                                       no_bfc_device_manager("3b:00.0"))
    except Exception as exc:  # noqa: BLE001 - reported with the clause
        pytest.fail(f"adjust_mem_limit on a GPU whose allocator is no BFC raised {exc!r}, "
                    f"expected False [RM-17]")
    assert got is False, \
        f"adjust_mem_limit on a GPU whose allocator is no BFC returned {got!r} [RM-17]"
    errors = runtime_records(caplog, rt, logging.ERROR)
    assert any("3b:00.0" in e.getMessage() for e in errors), (
        f"a GPU whose allocator is no BFC logged {[e.getMessage() for e in errors]}, no error "
        f"naming its bus id [RM-17]")


@pytest.mark.clause("RM-17")
def test_adjustment_accepts_a_limit_of_zero(rt, runtimes) -> None:
    """0 is in [0, 2^64): a GPU with nothing allocated is limited to 0 bytes."""
    ctx = runtimes()
    g0 = gpus(ctx)[0]
    try:
        got = rt.GPUUsageAdjustment().adjust_mem_limit(bus_id(rt, g0), 0, ctx.device_mgr)
    except ValueError as exc:
        pytest.fail(f"adjust_mem_limit(bus, 0, device_mgr) raised ValueError({exc}): 0 is in "
                    f"[0, 2^64) [RM-17]")
    assert got is True and bytes_limit(g0) == 0, (
        f"adjust_mem_limit(bus, 0) on an idle GPU returned {got} with bytes_limit "
        f"{bytes_limit(g0)}, expected True and 0 [RM-17]")


@pytest.mark.clause("RM-18")
def test_clamp_and_return_values(rt, runtimes) -> None:
    ctx = runtimes()
    g0 = gpus(ctx)[0]
    bus, mgr, adj = bus_id(rt, g0), ctx.device_mgr, rt.GPUUsageAdjustment()
    assert adj.adjust_mem_limit(bus, 64 * MiB, mgr) is True, \
        "the first request equal to the initial limit did not apply [RM-18]"
    assert adj.adjust_mem_limit(bus, 128 * MiB, mgr) is False, \
        "a request clamped to the current limit returned True [RM-18]"
    assert bytes_limit(g0) == 64 * MiB, f"a request above the initial limit set {bytes_limit(g0)} [RM-18]"
    assert adj.adjust_mem_limit(bus, 16 * MiB, mgr) is True, "[RM-18]"
    assert adj.adjust_mem_limit(bus, 16 * MiB, mgr) is False, "a repeated limit returned True [RM-18]"
    assert adj.adjust_mem_limit(bus, UINT64_MAX, mgr) is True, "[RM-18]"
    assert bytes_limit(g0) == 64 * MiB, "2^64-1 was not clamped to the initial limit [RM-18]"
    alloc = g0.get_allocator()
    p = alloc.allocate_raw(256, 8 * MiB)
    assert adj.adjust_mem_limit(bus, MiB, mgr) is False, "a shrink that fell short returned True [RM-18]"
    short = bytes_limit(g0)
    assert short > MiB, "[RM-18]"
    alloc.deallocate_raw(p)
    assert adj.adjust_mem_limit(bus, MiB, mgr) is True, \
        "after a short shrink the same request was not applied again [RM-18]"
    assert bytes_limit(g0) == MiB, "[RM-18]"



@pytest.mark.clause("RM-18")
def test_only_a_request_above_the_initial_limit_is_warned_of(rt, runtimes, caplog) -> None:
    """A request equal to the initial limit is no clamp: it logs no warning; one byte more
    is clamped, with a warning."""
    ctx = runtimes()
    g0 = gpus(ctx)[0]
    bus, mgr, adj = bus_id(rt, g0), ctx.device_mgr, rt.GPUUsageAdjustment()
    initial = bytes_limit(g0)
    caplog.set_level(logging.WARNING)
    adj.adjust_mem_limit(bus, initial // 4, mgr)
    adj.adjust_mem_limit(bus, initial, mgr)
    warned = [r.getMessage()[:200] for r in runtime_records(caplog, rt, logging.WARNING)]
    assert warned == [], (
        f"a shrink to a quarter of the initial limit {initial}, then a request equal to it, "
        f"logged the warning(s) {warned}: only a request above the initial limit is clamped "
        f"and warned of [RM-18]")
    adj.adjust_mem_limit(bus, initial // 4, mgr)
    adj.adjust_mem_limit(bus, initial + 1, mgr)
    assert runtime_records(caplog, rt, logging.WARNING), (
        f"a request of {initial + 1}, one byte above the initial limit, was clamped without "
        f"a warning [RM-18]")

# -- API-10: the context's close does not wait out a throttle sleep ------------------------------

@pytest.mark.clause("API-10")
@pytest.mark.capability("executor", "session_run_actions")
def test_context_close_does_not_wait_for_a_throttle_sleep(rt, runtimes, vclock,
                                                          tmp_path) -> None:
    """A step in its throttle sleep (RM-10, perfControl 10) on a virtual clock nobody
    advances: close() of the runtime context ends the sleep (RM-16) before it waits for the
    session's run, so it returns without the clock moving."""
    config = tmp_path / "gpu_config.json"
    config.write_text(json.dumps(config_document(perf=10)), encoding="utf-8")
    ctx = runtimes(config_file=str(config), clock=vclock)
    vclock.wait_for_waiters(1, clause="FL-2")  # the file listener
    graph = rt.Graph()
    graph.add_node("work", "PyFunc", func=lambda: vclock.advance(100_000) or 1.0,
                   device="/job:localhost/replica:0/task:0/device:CPU:0")
    session = ctx.new_session(graph)
    step, step_out = run_in_thread(lambda: session.run("work"), name="step")
    closer = None
    try:
        vclock.wait_for_waiters(2, clause="RM-10")  # the listener and the step's sleep
        assert step.is_alive(), f"the step did not sleep at perfControl 10: {step_out} [RM-10]"
        closer, close_out = run_in_thread(ctx.close, name="context-close")
        assert joined(closer), (
            "RuntimeContext.close() waited for a step's throttle sleep (it closed the sessions, "
            "which wait for their runs, before it ended the sleep) [API-10]")
        assert "error" not in close_out, f"close() raised {close_out['error']!r} [API-10]"
        assert joined(step), "the step did not end after close() [RM-16]"
    finally:
        vclock.advance(60_000_000)                  # a fork's sleep ends; nothing is left
        for t in (step, closer):
            if t is not None:
                t.join(10)


# -- exact accounting at the microsecond boundary ---------------------------------------------

@pytest.mark.clause("RM-10")
@pytest.mark.parametrize("d,expected", [(49, 0), (50, 0), (51, 1), (52, 2)])
def test_throttle_sleep_at_the_fixed_cost_boundary(rt, control_env, d, expected) -> None:
    """perf 50: total = 2d, a sleep only when 2d > d + 50 (d > 50), of 2d - d - 50 µs; a sleep
    of 0 µs is no clock wait at all."""
    clock = VirtualClock(auto_advance=True)
    with throttled(rt, clock) as rm:
        rm.parse_manage_info_from_json('{"perfControl": 50}')
        t0 = clock.now_us()
        rm.run_action(post(rt, duration=d))
        sleeps = [r.duration_us for r in clock.records]
        assert sleeps == ([expected] if expected else []), (
            f"perf 50, d={d}: slept {sleeps}, expected {[expected] if expected else []} "
            f"(sleep only when total > d + 50, no zero-length wait) [RM-10]")
        assert clock.now_us() - t0 == expected and rm.total_time_slot == expected, (
            f"perf 50, d={d}: the step's sleep took {clock.now_us() - t0} µs, S = "
            f"{rm.total_time_slot}; expected {expected} [RM-10]")


@pytest.mark.clause("RM-10")
@pytest.mark.parametrize("late_by,oversleep", [(0, 0), (1, 1), (949, 949), (950, 950),
                                               (951, 950)])
def test_oversleep_to_the_microsecond(rt, control_env, late_by, oversleep) -> None:
    """perf 50, d 1000: a sleep of 950 µs let run ``late_by`` µs past its deadline leaves
    V = min(late_by, 950), and the next such step sleeps 950 - V µs (none when 0)."""
    clock = VirtualClock()
    with throttled(rt, clock) as rm:
        rm.parse_manage_info_from_json('{"perfControl": 50}')
        t, out = run_in_thread(lambda: rm.run_action(post(rt, duration=1000)), name="step")
        clock.wait_for_waiters(1, clause="RM-10")
        clock.advance(950 + late_by)
        assert joined(t) and "error" not in out, f"run_action hung or raised {out} [RM-10]"
        assert rm.oversleep == oversleep, (
            f"a sleep of 950 µs that lasted {950 + late_by} left oversleep {rm.oversleep}, "
            f"expected {oversleep} [RM-10]")
        before = len(clock.records)
        nxt = 950 - oversleep
        t, out = run_in_thread(lambda: rm.run_action(post(rt, duration=1000)), name="step")
        if nxt:
            clock.wait_for_waiters(1, clause="RM-10")
            clock.advance(nxt)
        assert joined(t) and "error" not in out, f"run_action hung or raised {out} [RM-10]"
        sleeps = [r.duration_us for r in clock.records[before:]]
        assert sleeps == ([nxt] if nxt else []) and rm.total_time_slot == nxt, (
            f"after an oversleep of {oversleep} µs the next sleep was {sleeps} (S = "
            f"{rm.total_time_slot}), expected {[nxt] if nxt else []} [RM-10]")


@pytest.mark.clause("RM-10")
@pytest.mark.parametrize("d,expected", [(500, 0), (999, 0), (1000, 0), (1001, 1)])
def test_oversleep_beyond_the_next_sleep_cancels_it(rt, control_env, d, expected) -> None:
    """perf 50: a sleep of 950 µs that lasted 5950 leaves V = 950; the next step of d µs
    (total - d - 50 = d - 50) sleeps max(d - 50 - 950, 0) µs, never a negative amount, and V
    becomes 0 whether or not it slept."""
    clock = VirtualClock()
    with throttled(rt, clock) as rm:
        rm.parse_manage_info_from_json('{"perfControl": 50}')
        t, out = run_in_thread(lambda: rm.do_sleep_or_suspend(1000), name="step")
        clock.wait_for_waiters(1, clause="RM-10")
        clock.advance(950 + 5000)
        assert joined(t) and out.get("result") == 950 and rm.oversleep == 950, (
            f"first step: {out}, oversleep {rm.oversleep}, expected 950 and 950 [RM-10]")
        before = len(clock.records)
        t, out = run_in_thread(lambda: rm.do_sleep_or_suspend(d), name="step")
        if expected:
            clock.wait_for_waiters(1, clause="RM-10")
            clock.advance(expected)
        assert joined(t) and out.get("result") == expected, (
            f"d={d} after an oversleep of 950 µs: {out}, expected a sleep of {expected} [RM-10]")
        sleeps = [r.duration_us for r in clock.records[before:]]
        assert sleeps == ([expected] if expected else []) and rm.total_time_slot == expected \
            and rm.oversleep == 0, (
                f"d={d} after an oversleep of 950 µs: slept {sleeps}, S = {rm.total_time_slot}, "
                f"oversleep {rm.oversleep}; expected {expected}, {expected}, 0 [RM-10]")


# -- argument edges of the idle-time bookkeeping ------------------------------------------------

NOT_INTEGERS = [True, False, 5.0, 1.5, float("nan"), float("inf"), "5", None]


@pytest.mark.clause("RM-14")
@pytest.mark.parametrize("bad", NOT_INTEGERS)
@pytest.mark.parametrize("method,argument", [("set_estimated_idle_time", "us"),
                                             ("spend_idle_time", "us"),
                                             ("do_sleep_or_suspend", "sess_duration_us"),
                                             ("set_executor_queued_op_num", "n")])
def test_idle_amounts_must_be_integers(rt, control_env, bad, method, argument) -> None:
    clock = VirtualClock(auto_advance=True)
    with throttled(rt, clock) as rm:
        rm.parse_manage_info_from_json('{"perfControl": 50}')
        rm.set_estimated_idle_time(700)
        rm.set_executor_queued_op_num("k", 3)
        args = ("k", bad) if method == "set_executor_queued_op_num" else (bad,)
        with pytest.raises(ValueError) as info:
            getattr(rm, method)(*args)
        assert names_identifier(info.value, argument), (
            f"{method}({bad!r}): the ValueError {info.value!r} does not name {argument!r} "
            f"[RM-14]")
        state = (rm.get_estimated_idle_time(), rm.in_step_idle, rm.total_time_slot,
                 rm.get_executor_queued_op_num("k"), [r.duration_us for r in clock.records])
        assert state == (700, 0, 0, 3, []), (
            f"{method}({bad!r}) was rejected but changed (E, X, S, queued ops, sleeps) to "
            f"{state} [RM-14]")


@pytest.mark.clause("RM-14")
@pytest.mark.parametrize("value,stored", [(-1, 0), (0, 0), (1, 1), (-(1 << 70), 0)])
def test_idle_amounts_at_and_below_zero(rt, control_env, value, stored) -> None:
    import numpy as np
    clock = VirtualClock(auto_advance=True)
    with throttled(rt, clock) as rm:
        rm.set_estimated_idle_time(value)
        assert rm.get_estimated_idle_time() == stored, (
            f"set_estimated_idle_time({value}) stored {rm.get_estimated_idle_time()}, expected "
            f"{stored} (negative values store 0) [RM-14]")
        rm.set_estimated_idle_time(np.int64(10))
        assert rm.spend_idle_time(value) == 10 - stored and rm.in_step_idle == stored, (
            f"spend_idle_time({value}) with E = 10: E {rm.get_estimated_idle_time()}, X "
            f"{rm.in_step_idle}; expected {10 - stored}, {stored} (a negative amount counts "
            f"as 0) [RM-14]")


@pytest.mark.clause("RM-12")
def test_closed_session_is_seen_within_100_000_us(rt, no_thread_leak, managed, vclock) -> None:
    """Without a wake, a suspension re-checks its session at least every 100 000 µs of the
    clock: a session closed at the start of a re-check period is seen by its end, with the
    clock moved by exactly 100 000 µs."""
    rm, _ = managed
    t, out, session = suspended_step(rt, rm, vclock)
    session.closed = True
    t0 = vclock.now_us()
    vclock.tick(100_000)
    assert joined(t), (
        "a session closed 100 000 µs ago (no wake_suspended) still suspends the step: the "
        "suspension must re-check at least every 100 000 µs [RM-12]")
    assert "error" not in out and vclock.now_us() - t0 == 100_000, \
        f"the suspension ended with {out} after {vclock.now_us() - t0} µs [RM-12]"


# -- the locks behind RM-7 .. RM-20, forced -------------------------------------------------
# Each lock of the reference is watched (fixtures/interleave.py) and every line of a method
# that touches the state the lock guards records whether the calling thread held it: those
# lines must all run under it. A race is not hoped for; the lock's absence is seen on every
# run. The regex of each entry names the lines that must: those that change the state, check
# it before acting on it or copy it out; a lone read of one field (perfControl read once per
# step, the quick test for pending limits) needs no lock and is not asked for.

IDLE_STATE = r"self\._(in_step_idle_us|oversleep_us|total_time_slot_us|estimated_idle_us)\b"


class ClosedSession:
    closed = True


def _gpu_limit_doc(rt, ctx, limit: int, perf: int | None = None) -> str:
    return json.dumps(config_document(limits={bus_id(rt, gpus(ctx)[0]): limit}, perf=perf))


def _boundary_with(doc: str):
    """A step boundary on the runtime's GPUs after ``doc`` was parsed."""
    def setup(rt, ctx, stack):
        rm = ctx.resource_management
        assert rm.parse_manage_info_from_json(doc(rt, ctx) if callable(doc) else doc), "[RM-2]"
        return rm, lambda: rm.run_action(post(rt, ctx))
    return setup


def _on_runtime(call):
    def setup(rt, ctx, stack):
        rm = ctx.resource_management
        return rm, lambda: call(rt, ctx, rm)
    return setup


def _throttled_step(rt, ctx, stack):
    """A step at perfControl 50 on an exact clock: it sleeps, and its oversleep is measured."""
    rm = stack.enter_context(throttled(rt, VirtualClock(auto_advance=True)))
    rm.parse_manage_info_from_json('{"perfControl": 50}')
    rm.spend_idle_time(10)
    return rm, lambda: rm.run_action(rt.SessionRunActionOptions(sess_duration_us=1000))


def _suspended_step(rt, ctx, stack):
    rm = ctx.resource_management
    assert rm.parse_manage_info_from_json('{"perfControl": 0}'), "[RM-2]"
    return rm, lambda: rm.run_action(post(rt, ctx, session=ClosedSession()))


#: id -> (function run, lock attribute, the lines that must run under the lock (a regex on
#: their source), setup(rt, ctx, stack) -> (the object holding the lock, the call), what a
#: concurrent call can do without the lock)
RM_LOCKED = {
    "parse_manage_info_from_json": (
        "parse_manage_info_from_json", "_manage_lock", r"self\._(limits|pending)\[|_locked\(",
        _on_runtime(lambda rt, ctx, rm: rm.parse_manage_info_from_json(
            _gpu_limit_doc(rt, ctx, 16 * MiB, perf=50))),
        "a step boundary at the same time can apply half of the document, or drop as "
        "applied a limit the document supersedes"),
    "memory_limits": (
        "memory_limits", "_manage_lock", r"self\._limits\b",
        _on_runtime(lambda rt, ctx, rm: rm.memory_limits),
        "a read at the same time as a document can return part of it, or fail as the limits "
        "change size"),
    "run_action/pending": (
        "_apply_limits", "_manage_lock", r"del self\._pending\b|self\._pending\.(get|pop)\(",
        _boundary_with(lambda rt, ctx: _gpu_limit_doc(rt, ctx, 16 * MiB)),
        "a newer limit delivered while the boundary applies the older one can be dropped as "
        "applied and never take effect"),
    "run_action/boundary": (
        "_apply_limits", "_apply_lock", r"self\._(known|adjustment)\b",
        _boundary_with(lambda rt, ctx: _gpu_limit_doc(rt, ctx, 16 * MiB)),
        "two step boundaries at once can apply a GPU's limits out of order, leaving the "
        "older one in force"),
    "run_action/unknown": (
        "_forget_unknown", "_manage_lock", r"self\._(pending|limits|unknown)\b",
        _boundary_with(json.dumps(config_document(limits={"ff:1f.7": MiB}))),
        "a document delivered while the boundary forgets unknown bus ids can lose its limits, "
        "and the unknown bus ids remembered can exceed their bound"),
    "run_action/suspend": (
        "_suspend", "_manage_lock", r"self\._suspended\b", _suspended_step,
        "a perfControl change or wake_suspended() at the same time can miss the step (left "
        "suspended) or fail as the suspended steps change"),
    "wake_suspended": (
        "wake_suspended", "_manage_lock", r"self\._suspended\b|_locked\(",
        _on_runtime(lambda rt, ctx, rm: rm.wake_suspended()),
        "a step suspending or resuming at the same time can be missed, or the wake fail as "
        "the suspended steps change"),
    "run_action/throttle": (
        "_sleep_or_suspend", "_idle_lock", IDLE_STATE, _throttled_step,
        "a spend_idle_time or another step at the same time can be lost from the period's "
        "arithmetic: idle time or an oversleep counted twice or not at all"),
    "spend_idle_time": (
        "spend_idle_time", "_idle_lock", IDLE_STATE,
        _on_runtime(lambda rt, ctx, rm: rm.spend_idle_time(5)),
        "a concurrent set_estimated_idle_time or step can be lost"),
    "set_estimated_idle_time": (
        "set_estimated_idle_time", "_idle_lock", IDLE_STATE,
        _on_runtime(lambda rt, ctx, rm: rm.set_estimated_idle_time(5)),
        "the budget set can land inside a concurrent spend_idle_time and be lost"),
    "set_executor_queued_op_num": (
        "set_executor_queued_op_num", "_idle_lock", r"self\._queued_op_num\b",
        _on_runtime(lambda rt, ctx, rm: rm.set_executor_queued_op_num(("graph", 1), 3)),
        "a smaller value set at the same time can overwrite the high-water mark"),
}

RM_LOCK_CLAUSES = {
    "parse_manage_info_from_json": ("RM-7", "RM-8"), "memory_limits": ("RM-7",),
    "run_action/pending": ("RM-8", "RM-9"), "run_action/boundary": ("RM-8",),
    "run_action/unknown": ("RM-20",), "run_action/suspend": ("RM-12",),
    "wake_suspended": ("RM-12",), "run_action/throttle": ("RM-10", "RM-14"),
    "spend_idle_time": ("RM-14",), "set_estimated_idle_time": ("RM-14",),
    "set_executor_queued_op_num": ("RM-15",),
}


@pytest.mark.parametrize("case", [
    pytest.param(case, id=case, marks=pytest.mark.clause(*RM_LOCK_CLAUSES[case]))
    for case in RM_LOCKED])
def test_shared_state_is_touched_under_its_lock(rt, runtimes, vclock, config_writer,
                                                monkeypatch, case) -> None:
    """Each public entry point (a step boundary for the ones run_action reaches) touches the
    state a lock guards only with that lock held: the lines of the method that read-modify-
    write it, check-then-act on it or copy it out run under the watched lock."""
    from fixtures.interleave import lock_held_at_lines, watch_lock
    function, lock, state, setup, consequence = RM_LOCKED[case]
    clause = RM_LOCK_CLAUSES[case][-1]
    ctx = runtimes(config_file=str(config_writer.path), clock=vclock)
    with contextlib.ExitStack() as stack:
        owner, call = setup(rt, ctx, stack)
        watched = watch_lock(monkeypatch, owner, lock, f"the resource management's {lock}")
        _, lines = lock_held_at_lines(call, function, watched)
    touching = [(text, held) for text, held in lines if re.search(state, text)]
    if not touching:
        pytest.skip(f"the check follows the reference's design ({function} touching "
                    f"{state}); this runtime's {function} ran no such line")
    unheld = sorted({text for text, held in touching if not held})
    assert not unheld, (f"{case}: {len(unheld)} line(s) of {function} touch the state "
                        f"without the lock ({unheld[:3]}): {consequence} [{clause}]")
