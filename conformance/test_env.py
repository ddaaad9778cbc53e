"""ENV clauses: TensorFlow's parsing of the memory environment variables."""

from __future__ import annotations

import logging
import re

import pytest

from conformance.control_helpers import runtime_records
from fixtures.env_toggles import (BAD_BOOL_VALUES, BAD_EXACT_BOOL_VALUES, BAD_INT64_VALUES)
from fixtures.virtual_clock import VirtualClock

MiB = 1 << 20
VAR = "TF_ANTMAN_SUITE_TEST_VAR"
#: Only C white space may surround the number (ENV-2): a unit or another letter before or
#: after the digits makes the value an error, not a number with the letter dropped.
LETTERS_BESIDE_THE_DIGITS = ("5X", "X5", "1024MB", "k8", " 5x ", "X")


def assert_one_error(caplog, rt, call: str, clause: str) -> None:
    errors = runtime_records(caplog, rt, logging.ERROR)
    assert len(errors) == 1, (f"{call} logged {len(errors)} error records, expected exactly 1 "
                              f"({[r.getMessage() for r in errors]}) [{clause}]")


def assert_no_error(caplog, rt, call: str, clause: str) -> None:
    errors = runtime_records(caplog, rt, logging.ERROR)
    assert not errors, (f"{call} logged errors {[r.getMessage() for r in errors]}, expected "
                        f"none [{clause}]")


# --- ENV-1 -----------------------------------------------------------------------------

@pytest.mark.clause("ENV-1")
@pytest.mark.capability("env")
@pytest.mark.parametrize("default", [True, False])
def test_bool_unset_gives_default(rt, tf_env, caplog, default):
    tf_env.unset(VAR)
    got = rt.read_bool_from_env_var(VAR, default)
    assert got is default, f"read_bool_from_env_var({VAR!r}, {default}) unset = {got!r} [ENV-1]"
    assert_no_error(caplog, rt, "read_bool_from_env_var(unset)", "ENV-1")


@pytest.mark.clause("ENV-1")
@pytest.mark.capability("env")
@pytest.mark.parametrize("value,expected", [
    ("0", False), ("false", False), ("FALSE", False), ("False", False), ("fAlSe", False),
    ("1", True), ("true", True), ("TRUE", True), ("True", True), ("tRuE", True),
])
def test_bool_values_are_case_insensitive(rt, tf_env, caplog, value, expected):
    tf_env.set(VAR, value)
    for default in (True, False):
        got = rt.read_bool_from_env_var(VAR, default)
        assert got is expected, (f"read_bool_from_env_var({VAR}={value!r}, {default}) = "
                                 f"{got!r}, expected {expected} [ENV-1]")
    assert_no_error(caplog, rt, f"read_bool_from_env_var({value!r})", "ENV-1")


@pytest.mark.clause("ENV-1")
@pytest.mark.capability("env")
@pytest.mark.parametrize("value", BAD_BOOL_VALUES)
@pytest.mark.parametrize("default", [True, False])
def test_bool_bad_value_logs_and_keeps_default(rt, tf_env, caplog, value, default):
    tf_env.set(VAR, value)
    got = rt.read_bool_from_env_var(VAR, default)
    assert got is default, (f"read_bool_from_env_var({VAR}={value!r}, {default}) = {got!r}, "
                            f"expected the default [ENV-1]")
    assert_one_error(caplog, rt, f"read_bool_from_env_var({VAR}={value!r})", "ENV-1")


@pytest.mark.clause("ENV-1")
@pytest.mark.capability("env")
@pytest.mark.parametrize("value", ["fal\u017fe", "TRUE\u00a0", "\u00a0true", "1\u2003",
                                   "\uff11", "tru\u0435", "\u0130"])
def test_bool_unicode_folding_and_spaces_are_errors(rt, tf_env, caplog, value):
    """Only ASCII letters are lowered, nothing is trimmed: Unicode case folding (a long s
    folds to "s"), Unicode white space, full-width digits and look-alike letters are errors."""
    tf_env.set(VAR, value)
    for default in (True, False):
        got = rt.read_bool_from_env_var(VAR, default)
        assert got is default, (f"read_bool_from_env_var({VAR}={value!r}, {default}) = "
                                f"{got!r}, expected the default [ENV-1]")
    errors = runtime_records(caplog, rt, logging.ERROR)
    assert len(errors) == 2, (f"read_bool_from_env_var({VAR}={value!r}) twice logged "
                              f"{len(errors)} error records, expected 2 [ENV-1]")


# --- ENV-2 -----------------------------------------------------------------------------

@pytest.mark.clause("ENV-2")
@pytest.mark.capability("env")
@pytest.mark.parametrize("value,expected", [
    ("0", 0), ("42", 42), ("007", 7), ("-5", -5), ("-0", 0), (" 1", 1), ("1 ", 1),
    ("\t\n\v\f\r 65536 \r\n", 65536), (" -12 ", -12),
    ("9223372036854775807", 2**63 - 1), ("-9223372036854775808", -2**63),
])
def test_int64_accepted_values(rt, tf_env, caplog, value, expected):
    tf_env.set(VAR, value)
    got = rt.read_int64_from_env_var(VAR, 123)
    assert got == expected, (f"read_int64_from_env_var({VAR}={value!r}, 123) = {got!r}, "
                             f"expected {expected} [ENV-2]")
    assert_no_error(caplog, rt, f"read_int64_from_env_var({value!r})", "ENV-2")


@pytest.mark.clause("ENV-2")
@pytest.mark.capability("env")
@pytest.mark.parametrize("value", BAD_INT64_VALUES + LETTERS_BESIDE_THE_DIGITS)
def test_int64_bad_value_logs_and_keeps_default(rt, tf_env, caplog, value):
    tf_env.set(VAR, value)
    got = rt.read_int64_from_env_var(VAR, 65536)
    assert got == 65536, (f"read_int64_from_env_var({VAR}={value!r}, 65536) = {got!r}, "
                          f"expected the default [ENV-2]")
    assert_one_error(caplog, rt, f"read_int64_from_env_var({VAR}={value!r})", "ENV-2")


@pytest.mark.clause("ENV-2")
@pytest.mark.capability("env")
def test_int64_unset_gives_default(rt, tf_env, caplog):
    tf_env.unset(VAR)
    assert rt.read_int64_from_env_var(VAR, -7) == -7, "read_int64_from_env_var(unset, -7) [ENV-2]"
    assert_no_error(caplog, rt, "read_int64_from_env_var(unset)", "ENV-2")


@pytest.mark.clause("ENV-2")
@pytest.mark.capability("env")
@pytest.mark.parametrize("value,expected", [
    ("0" * 5000 + "7", 7), ("-" + "0" * 5000 + "7", -7), ("0" * 5000, 0),
    ("0" * 30 + "9223372036854775807", 2**63 - 1), ("-" + "0" * 30 + "9223372036854775808",
                                                    -2**63),
    ("1" * 19, int("1" * 19)),
])
def test_int64_leading_zeros_do_not_count(rt, tf_env, caplog, value, expected):
    """Any number of leading zeros: the range is checked on the number, not the length."""
    tf_env.set(VAR, value)
    got = rt.read_int64_from_env_var(VAR, 123)
    assert got == expected, (f"read_int64_from_env_var({VAR}={value[:12]!r}... ({len(value)} "
                             f"chars), 123) = {got!r}, expected {expected} [ENV-2]")
    errors = runtime_records(caplog, rt, logging.ERROR)
    assert not errors, (f"read_int64_from_env_var({value[:12]!r}...) logged "
                        f"{[r.getMessage()[:80] for r in errors]}, expected nothing [ENV-2]")


@pytest.mark.clause("ENV-2")
@pytest.mark.capability("env")
@pytest.mark.parametrize("value", ["\u00a05", "5\u00a0", "5\u2003", "\u30005", "\x1c5",
                                   "5\x1f", "\x855", "\uff15", "0" * 30 + "9223372036854775808",
                                   "1" + "0" * 19, "-" + "0" * 30 + "9223372036854775809"])
def test_int64_other_spaces_and_past_the_range_are_errors(rt, tf_env, caplog, value):
    """Only C white space is skipped (Python's str.strip() would also drop these); a number
    past int64 is an error however it is padded."""
    tf_env.set(VAR, value)
    got = rt.read_int64_from_env_var(VAR, 65536)
    assert got == 65536, (f"read_int64_from_env_var({VAR}={value!r}, 65536) = {got!r}, "
                          f"expected the default [ENV-2]")
    errors = runtime_records(caplog, rt, logging.ERROR)
    assert len(errors) == 1, (f"read_int64_from_env_var({VAR}={value!r}) logged {len(errors)} "
                              f"error records, expected exactly 1 [ENV-2]")


# --- ENV-3 -----------------------------------------------------------------------------

@pytest.mark.clause("ENV-3")
@pytest.mark.capability("env")
@pytest.mark.parametrize("option", [True, False])
def test_allow_growth_unset_uses_option(rt, tf_env, caplog, option):
    got = rt.get_allow_growth_value(option)
    assert got is option, f"get_allow_growth_value({option}) unset = {got!r} [ENV-3]"
    assert_no_error(caplog, rt, "get_allow_growth_value(unset)", "ENV-3")


@pytest.mark.clause("ENV-3")
@pytest.mark.capability("env")
@pytest.mark.parametrize("value,expected", [("true", True), ("false", False)])
@pytest.mark.parametrize("option", [True, False])
def test_allow_growth_exact_values_override(rt, tf_env, caplog, value, expected, option):
    caplog.set_level(logging.WARNING)
    tf_env.set("TF_FORCE_GPU_ALLOW_GROWTH", value)
    got = rt.get_allow_growth_value(option)
    assert got is expected, (f"get_allow_growth_value({option}) with "
                             f"TF_FORCE_GPU_ALLOW_GROWTH={value!r} = {got!r} [ENV-3]")
    assert_no_error(caplog, rt, f"get_allow_growth_value({value!r})", "ENV-3")
    warnings = runtime_records(caplog, rt, logging.WARNING)
    expected_warnings = 0 if expected is option else 1
    assert len(warnings) == expected_warnings, (
        f"get_allow_growth_value({option}) with TF_FORCE_GPU_ALLOW_GROWTH={value!r} logged "
        f"{len(warnings)} records ({[r.getMessage()[:200] for r in warnings]}), expected "
        f"{expected_warnings}: a warning exactly when the variable overrides the option "
        f"[ENV-3]")
    if expected_warnings:      # named in any case: TensorFlow writes C++'s "false"
        assert re.search(rf"\b{option}\b", warnings[0].getMessage(), re.IGNORECASE), (
            f"the override warning does not name the original value {option}: "
            f"{warnings[0].getMessage()[:200]!r} [ENV-3]")


@pytest.mark.clause("ENV-3")
@pytest.mark.capability("env")
@pytest.mark.parametrize("value", BAD_EXACT_BOOL_VALUES)
@pytest.mark.parametrize("option", [True, False])
def test_allow_growth_bad_value_uses_option(rt, tf_env, caplog, value, option):
    tf_env.set("TF_FORCE_GPU_ALLOW_GROWTH", value)
    got = rt.get_allow_growth_value(option)
    assert got is option, (f"get_allow_growth_value({option}) with "
                           f"TF_FORCE_GPU_ALLOW_GROWTH={value!r} = {got!r}, expected the "
                           f"option [ENV-3]")
    assert_one_error(caplog, rt, f"get_allow_growth_value({value!r})", "ENV-3")


# --- ENV-4 -----------------------------------------------------------------------------

@pytest.mark.clause("ENV-4")
@pytest.mark.capability("env")
@pytest.mark.parametrize("value,expected", [(None, True), ("true", True), ("false", False)])
def test_garbage_collection_values(rt, tf_env, caplog, value, expected):
    if value is not None:
        tf_env.set("TF_ENABLE_GPU_GARBAGE_COLLECTION", value)
    got = rt.get_garbage_collection_value()
    assert got is expected, (f"get_garbage_collection_value() with "
                             f"TF_ENABLE_GPU_GARBAGE_COLLECTION={value!r} = {got!r} [ENV-4]")
    assert_no_error(caplog, rt, "get_garbage_collection_value()", "ENV-4")


@pytest.mark.clause("ENV-4")
@pytest.mark.capability("env")
@pytest.mark.parametrize("value", BAD_EXACT_BOOL_VALUES)
def test_garbage_collection_bad_value_is_true(rt, tf_env, caplog, value):
    tf_env.set("TF_ENABLE_GPU_GARBAGE_COLLECTION", value)
    got = rt.get_garbage_collection_value()
    assert got is True, (f"get_garbage_collection_value() with "
                         f"TF_ENABLE_GPU_GARBAGE_COLLECTION={value!r} = {got!r} [ENV-4]")
    assert_one_error(caplog, rt, f"get_garbage_collection_value({value!r})", "ENV-4")


# --- ENV-5 -----------------------------------------------------------------------------

@pytest.mark.clause("ENV-5", "BFC-18")
@pytest.mark.capability("env", "bfc")
def test_gpu_bfc_reads_growth_at_construction(rt, tf_env):
    tf_env.set("TF_FORCE_GPU_ALLOW_GROWTH", "true")
    bfc = rt.GPUBFCAllocator(rt.SimulatedDeviceMemory(64 * MiB), 64 * MiB, "GPU_0_bfc",
                             allow_growth=False, retry_timeout_us=0)
    tf_env.set("TF_FORCE_GPU_ALLOW_GROWTH", "false")
    p = bfc.allocate_raw(256, 256)
    regions = [r.size for r in bfc.memory_map().regions]
    assert p is not None and regions == [MiB], (
        f"GPUBFCAllocator built with TF_FORCE_GPU_ALLOW_GROWTH='true', variable changed "
        f"later: first region sizes {regions}, expected [1 MiB] [ENV-5]")


@pytest.mark.clause("ENV-5", "VMEM-6")
@pytest.mark.capability("env", "vmem")
def test_planned_percent_read_at_construction(rt, tf_env):
    tf_env.set("TF_RO_PLANNED_GPU", "50")
    device = rt.BFCAllocator(rt.SimulatedDeviceMemory(MiB), MiB, True, "GPU_0_bfc")
    host = rt.BFCAllocator(rt.SimulatedHostMemory(MiB), MiB, True, "GPUHost_0_bfc")
    vmem = rt.GPUVMemAllocator(device, host, tf_gpu_id=0, physical_total_memory=1000)
    tf_env.set("TF_RO_PLANNED_GPU", "10")
    assert vmem.memory_planned == 500, (
        f"GPUVMemAllocator(physical_total_memory=1000) with TF_RO_PLANNED_GPU='50', changed "
        f"to '10' afterwards: memory_planned {vmem.memory_planned}, expected 500 [ENV-5]")


@pytest.mark.clause("ENV-5", "VMEM-1")
@pytest.mark.capability("env", "vmem")
def test_vmem_variables_read_per_call(rt, tf_env):
    gpu = rt.BFCAllocator(rt.SimulatedDeviceMemory(MiB), MiB, True, "GPU_0_bfc")
    tf_env.set("TF_GPU_VMEM", "false")
    first = rt.maybe_create_gpu_vmem_allocator(
        gpu, host_sub_allocator=rt.SimulatedHostMemory(MiB), clock=VirtualClock())
    tf_env.set("TF_GPU_VMEM", "true")
    tf_env.set("TF_CUDA_HOST_MEM_LIMIT_IN_MB", "3")
    second = rt.maybe_create_gpu_vmem_allocator(
        gpu, host_sub_allocator=rt.SimulatedHostMemory(MiB), clock=VirtualClock())
    tf_env.set("TF_CUDA_HOST_MEM_LIMIT_IN_MB", "5")
    assert first is gpu, "maybe_create_gpu_vmem_allocator with TF_GPU_VMEM='false' [ENV-5]"
    assert second is not gpu, "maybe_create_gpu_vmem_allocator with TF_GPU_VMEM='true' [ENV-5]"
    limit = second.host_allocator.memory_map().memory_limit
    assert limit == 3 * MiB, (f"host limit {limit} after TF_CUDA_HOST_MEM_LIMIT_IN_MB changed "
                              f"from '3' to '5' after creation, expected {3 * MiB} [ENV-5]")


# --- ENV-6: an environment value cannot forge or flood a log line --------------------------

HOSTILE_ENV_VALUE = "x" * 100_000 + "\n2026-01-01 00:00:00,000 CRITICAL forged"


@pytest.mark.clause("ENV-6")
@pytest.mark.capability("env")
@pytest.mark.parametrize("reader", ["bool", "int64", "allow_growth", "garbage_collection"])
def test_bad_value_error_is_bounded_and_quoted(rt, tf_env, caplog, reader):
    """The error of an unparsable value quotes it, cut to a bounded excerpt (at most 8192
    printable characters), whatever its length and characters."""
    caplog.set_level(logging.DEBUG)
    var, call = {
        "bool": (VAR, lambda: rt.read_bool_from_env_var(VAR, True)),
        "int64": (VAR, lambda: rt.read_int64_from_env_var(VAR, 7)),
        "allow_growth": ("TF_FORCE_GPU_ALLOW_GROWTH", lambda: rt.get_allow_growth_value(True)),
        "garbage_collection": ("TF_ENABLE_GPU_GARBAGE_COLLECTION",
                               rt.get_garbage_collection_value),
    }[reader]
    tf_env.set(var, HOSTILE_ENV_VALUE)
    call()
    assert_one_error(caplog, rt, f"{reader} of a {len(HOSTILE_ENV_VALUE)}-character value",
                     "ENV-6")
    for record in runtime_records(caplog, rt, logging.DEBUG):
        message = record.getMessage()
        assert message.isprintable() and len(message) <= 8192, (
            f"the {reader} error for a {len(HOSTILE_ENV_VALUE)}-character value holding a "
            f"newline is {len(message)} characters long"
            f"{'' if message.isprintable() else ' and holds a line break'} [ENV-6]")
