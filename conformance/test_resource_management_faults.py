"""RM clauses under attack: config documents that are huge, deep, hostile or name no GPU.

The documents come from ``fixtures/nemesis.py``. The reading bounds of RM-19 are checked
through ``parse_manage_info_from_json``: CPU time of the calling thread (``thread_time``,
which other processes on a loaded machine inflate only through shared caches and cores, so
the least of three reads counts) and the peak of the memory it
allocates (``tracemalloc``, started after the document was built). The attacks are scaled
to 4 MiB, where an unbounded reader already needs a few hundred MB and seconds (at the
64 MiB the listener accepts it needs 4 GB and half a minute); the bounds are per MiB, so the
scaled document checks the same clause.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import tracemalloc

import pytest

from conformance.control_helpers import (MiB, bus_id, bytes_limit, control_env,  # noqa: F401
                                         expect_value_error, gpus, joined, listener,
                                         perf_in_force, poll, run_in_thread,
                                         runtime_records, runtimes, vclock, write_text)
from conformance.preconditions import precondition, precondition_holds
from fixtures import nemesis
from fixtures.config_writer import config_document

pytestmark = pytest.mark.capability("resource_management", "file_listener", "virtual_clock")

BUS = "3b:00.0"
ATTACK_MIB = 4
MAX_VALUES = 100_000
MAX_BUS_IDS = 256
MAX_NAMED = 16
MAX_MESSAGE = 8192
GOOD = {"gpuConfigInfo": {BUS: {"maxDeviceMem": 8 * MiB}}, "perfControl": 40}


def cpu_bound_s(mib: float) -> float:
    return 0.5 + 0.05 * mib          # RM-19


def memory_bound(mib: float) -> float:
    return (2 * mib + 32) * MiB      # RM-19


@pytest.fixture
def config_path(tmp_path):
    return tmp_path / "gpu_config.json"


@pytest.fixture
def managed(rt, control_env, vclock, listener, config_path):
    """A GPUResourceManagement on ``config_path`` holding GOOD."""
    rm = rt.GPUResourceManagement(str(config_path), clock=vclock, file_listener=listener)
    assert rm.parse_manage_info_from_json(json.dumps(GOOD)), "[RM-2]"
    yield rm
    rm.close()


def state(rm) -> tuple[int, dict[str, int]]:
    return rm.perf_control, rm.memory_limits


#: Reads of one document whose CPU time is measured: the least counts (RM-19). Other load
#: on the machine only adds to a read's CPU time (caches, shared cores), never takes from it.
CPU_READS = 3


def size_mib(content: str | bytes) -> float:
    """The size of a document in MiB: its bytes, or its text as UTF-8 (RM-19)."""
    return len(content if isinstance(content, bytes) else content.encode("utf-8")) / MiB


def measured_parse(rm, text: str | bytes) -> tuple[bool, float, int]:
    """(result, CPU seconds, peak bytes allocated) of parsing ``text``. The CPU time is the
    least of up to ``CPU_READS`` reads of the same document (a read within the bound, or
    over twice the bound, ends the measurement; reading it again changes no state), taken
    without tracing (tracemalloc slows allocation); the memory is measured in one more
    read."""
    mib = size_mib(text)
    ok, cpu = False, float("inf")
    for read in range(CPU_READS):
        start = time.thread_time()
        result = rm.parse_manage_info_from_json(text)
        cpu = min(cpu, time.thread_time() - start)
        ok = result if read == 0 else ok
        if cpu <= cpu_bound_s(mib) or cpu > 2 * cpu_bound_s(mib):
            break                     # within the bound, or far beyond what load explains
    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        rm.parse_manage_info_from_json(text)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        if not tracing:
            tracemalloc.stop()
    return ok, cpu, peak


# -- RM-19: bounds of the config reader ----------------------------------------------------
N = ATTACK_MIB * MiB
#: name -> (document of about ATTACK_MIB MiB, the state after it: None = the last good one)
ATTACKS = {
    "flat_array": (lambda: nemesis.flat_array_document(N), None),
    "array_of_empty_strings": (lambda: '{"name": [' + '"",' * (N // 3) + '""]}', None),
    "deep_brackets": (lambda: "[" * (N // 2) + "]" * (N // 2), None),
    "many_members": (lambda: "{" + ",".join(f'"{i}":0' for i in range(N // 12)) + "}", None),
    "long_string": (lambda: json.dumps({"name": "x" * N, "perfControl": 41}), 41),
    "many_escapes": (lambda: json.dumps({"name": "\n" * (N // 2), "perfControl": 42}), 42),
    "long_whitespace": (lambda: '{"perfControl": 43' + " " * N + "}", 43),
    "long_literal": (lambda: '{"perfControl": 1' + "0" * N + "}", None),
    "long_exact_fraction": (lambda: '{"perfControl": 44.' + "0" * N + "}", 44),
}


@pytest.mark.clause("RM-19")
@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_large_document_costs_are_bounded(rt, managed, attack) -> None:
    make, perf_after = ATTACKS[attack]
    text = make()
    mib = len(text.encode("utf-8")) / MiB
    ok, cpu, peak = measured_parse(managed, text)
    expected = (perf_after, {BUS: 8 * MiB}) if perf_after is not None else (40, {BUS: 8 * MiB})
    assert state(managed) == expected, \
        f"{attack} ({mib:.1f} MiB): state became {state(managed)}, expected {expected} [RM-19]"
    assert ok is (perf_after is not None), \
        f"{attack}: parse_manage_info_from_json returned {ok} [RM-19]"
    assert cpu <= cpu_bound_s(mib), (
        f"{attack}: reading {mib:.1f} MiB took {cpu:.2f} s of CPU time, more than "
        f"0.5 s + 0.05 s/MiB = {cpu_bound_s(mib):.2f} s [RM-19]")
    assert peak <= memory_bound(mib), (
        f"{attack}: reading {mib:.1f} MiB allocated {peak / MiB:.1f} MiB at its peak, more "
        f"than 2 x size + 32 MiB = {memory_bound(mib) / MiB:.0f} MiB [RM-19]")


def one_warning(caplog, rt, path, what: str, containing: str = "") -> str:
    records = runtime_records(caplog, rt, logging.WARNING)
    named = [r for r in records if str(path) in r.getMessage()]
    assert len(records) == 1 and len(named) == 1 and containing in named[0].getMessage(), (
        f"{what}: logged {[(r.levelname, r.getMessage()[:160]) for r in records]}, expected "
        f"one warning naming {path}{f' and {containing!r}' if containing else ''} [RM-19]")
    return named[0].getMessage()


@pytest.mark.clause("RM-19")
@pytest.mark.parametrize("depth", [63, 64, 65, 990, 99_000])
def test_deep_value_costs_nothing_of_the_document(rt, managed, config_path, caplog,
                                                  depth) -> None:
    """A value ``depth`` arrays deep as perfControl, beside a new valid limit: perfControl is
    rejected as an array, the limit applied, whatever the depth under the value bound.
    Parsed on a new thread, whose stack is shallow (a recursive reader gets deep enough to
    fail only past the point where it would return)."""
    caplog.set_level(logging.WARNING)
    doc = nemesis.nested_document(depth, beside={"gpuConfigInfo": {BUS: {"maxDeviceMem": MiB}}},
                                  member="perfControl")
    t, out = run_in_thread(lambda: managed.parse_manage_info_from_json(doc), "parse")
    assert joined(t), "parse_manage_info_from_json did not return [RM-19]"
    assert "error" not in out, (f"a value nested {depth} deep made parse_manage_info_from_json "
                                f"raise {out.get('error')!r} [RM-19]")
    assert out["result"] is False, \
        f"an array as perfControl ({depth} deep) returned {out['result']} [RM-5]"
    assert state(managed) == (40, {BUS: MiB}), (
        f"a perfControl nested {depth} deep left {state(managed)}, expected the limit beside "
        f"it applied and perfControl kept: (40, {{{BUS!r}: {MiB}}}) [RM-19]")
    one_warning(caplog, rt, config_path, f"perfControl nested {depth} deep", "perfControl")


@pytest.mark.clause("RM-19")
@pytest.mark.parametrize("depth,accepted", [(99_000, True), (MAX_VALUES, False)])
def test_deep_ignored_member_up_to_the_value_bound(rt, managed, config_path, caplog, depth,
                                                  accepted) -> None:
    caplog.set_level(logging.WARNING)
    doc = nemesis.nested_document(depth, beside={"perfControl": 45}, member="metadata")
    t, out = run_in_thread(lambda: managed.parse_manage_info_from_json(doc), "parse")
    assert joined(t) and "error" not in out, \
        f"a member nested {depth} deep made the parser raise {out.get('error')!r} [RM-19]"
    assert (out["result"], managed.perf_control) == ((True, 45) if accepted else (False, 40)), (
        f"an ignored member nested {depth} deep ({'under' if accepted else 'beyond'} the "
        f"{MAX_VALUES}-value bound) returned {out['result']} and left perfControl "
        f"{managed.perf_control} [RM-19]")
    if not accepted:
        one_warning(caplog, rt, config_path, f"a member nested {depth} deep", str(MAX_VALUES))


#: Strings of 2 MiB, each with one character beyond U+FFFF: a reader that keeps them holds
#: 4 bytes a character (CPython), so ten kept together exceed RM-19's memory bound.
WIDE_STRING = json.dumps("\U0001F600" + "a" * (2 * MiB), ensure_ascii=False)
WIDE_STRINGS = 10


@pytest.mark.clause("RM-19")
@pytest.mark.parametrize("inside", [64, 65, 200])
def test_values_nested_beyond_64_levels_are_not_kept(rt, managed, inside) -> None:
    """A perfControl whose array of ten wide strings (about 20 MiB) is inside ``inside``
    others, the root included: the strings are read one by one and dropped, so that reading
    the document allocates at most 2 x size + 32 MiB, which keeping them all (80 MiB) would
    exceed; perfControl is rejected as an array (RM-5), the limit beside it applied."""
    strings = f"[{','.join([WIDE_STRING] * WIDE_STRINGS)}]"
    text = ('{"perfControl": ' + "[" * (inside - 1) + strings + "]" * (inside - 1)
            + ', "gpuConfigInfo": {"%s": {"maxDeviceMem": %d}}}' % (BUS, MiB))
    mib = len(text.encode("utf-8")) / MiB
    ok, _, peak = measured_parse(managed, text)
    assert (ok, state(managed)) == (False, (40, {BUS: MiB})), (
        f"wide strings inside {inside} containers as perfControl: returned {ok}, left "
        f"{state(managed)}, expected False and (40, {{{BUS!r}: {MiB}}}) [RM-19]")
    assert peak <= memory_bound(mib), (
        f"wide strings inside {inside} containers: reading {mib:.1f} MiB allocated "
        f"{peak / MiB:.1f} MiB at its peak, more than 2 x size + 32 MiB = "
        f"{memory_bound(mib) / MiB:.0f} MiB: values nested beyond 64 levels were kept [RM-19]")


#: One string of 17 MiB with a character beyond U+FFFF: built, it takes 68 MiB, more than
#: the 66 MiB that RM-19 allows for a document of 17 MiB holding it.
BIG_WIDE_STRING = json.dumps("\U0001F600" + "a" * (17 * MiB), ensure_ascii=False)
#: name -> a document whose wide strings the config never reads (RM-3: perfControl 45 is
#: applied), each over RM-19's memory bound if its strings are built
UNREAD_WIDE_STRINGS = {
    "ten_in_an_ignored_member":
        lambda: '{"metadata": [' + ",".join([WIDE_STRING] * WIDE_STRINGS) + '], "perfControl": 45}',
    "one_as_an_ignored_member": lambda: '{"metadata": ' + BIG_WIDE_STRING + ', "perfControl": 45}',
    "one_as_an_ignored_member_name": lambda: "{" + BIG_WIDE_STRING + ': 0, "perfControl": 45}',
    "one_inside_70_arrays":
        lambda: '{"perfControl": 45, "metadata": ' + "[" * 70 + BIG_WIDE_STRING + "]" * 70 + "}",
    "one_as_a_member_name_inside_70_arrays":
        lambda: ('{"perfControl": 45, "metadata": ' + "[" * 70 + "{" + BIG_WIDE_STRING + ": 0}"
                 + "]" * 70 + "}"),
}


def assert_read_within_bounds(managed, what: str, text: str | bytes, *,
                              text_bytes: int = 0) -> None:
    """The content is applied (perfControl 45) within RM-19's CPU time and memory bounds; for
    content given as bytes ``text_bytes``, its text at 4 bytes a character, is allowed too."""
    mib = size_mib(text)
    of = " of bytes" if isinstance(text, bytes) else ""
    ok, cpu, peak = measured_parse(managed, text)
    assert (ok, managed.perf_control) == (True, 45), (
        f"{what}: returned {ok}, perfControl {managed.perf_control}, expected True and 45 "
        f"[RM-19]")
    assert cpu <= cpu_bound_s(mib), (
        f"{what}: reading {mib:.1f} MiB{of} took {cpu:.2f} s of CPU time, more than "
        f"{cpu_bound_s(mib):.2f} s [RM-19]")
    bound = memory_bound(mib) + text_bytes
    assert peak <= bound, (
        f"{what}: reading {mib:.1f} MiB{of} allocated {peak / MiB:.1f} MiB at its peak, "
        f"more than "
        f"2 x size + 32 MiB{' + its text at 4 bytes a character' if text_bytes else ''} = "
        f"{bound / MiB:.0f} MiB: strings the config does not read were built [RM-19]")


@pytest.mark.clause("RM-19")
@pytest.mark.parametrize("where", sorted(UNREAD_WIDE_STRINGS))
def test_strings_the_config_does_not_read_are_not_built(rt, managed, where) -> None:
    """A string is held at up to 4 bytes a character (a fixed width): a reader that builds
    strings the config never reads, in a root member it ignores (RM-3) or nested beyond 64
    levels, breaks the memory bound with a character beyond U+FFFF in them."""
    assert_read_within_bounds(managed, f"wide strings {where}", UNREAD_WIDE_STRINGS[where]())


@pytest.mark.clause("RM-19")
def test_content_as_bytes_builds_only_its_text(rt, managed) -> None:
    """Content given as bytes may be decoded to a text of 4 bytes a character (RM-19 allows
    that text besides 2 x size + 32 MiB), but the wide strings of a member the config ignores
    are not built besides it: the ten of 2 MiB would take 80 MiB more."""
    text = ('{"metadata": [' + ",".join([WIDE_STRING] * WIDE_STRINGS)
            + '], "perfControl": 45}').encode("utf-8")
    assert_read_within_bounds(managed, "wide strings of an ignored member, as bytes", text,
                              text_bytes=4 * len(text.decode("utf-8")))


def escaped(name: str) -> str:
    """``name`` as a JSON string of \\uXXXX escapes only: 6 characters of text for each."""
    return '"' + "".join(f"\\u{ord(c):04x}" for c in name) + '"'


@pytest.mark.clause("RM-19")
@pytest.mark.parametrize("spelling", ["plain", "one_escape", "all_escaped"])
def test_members_read_whatever_the_spelling_of_their_names(rt, managed, spelling) -> None:
    """A reader that checks the names of the root's members without building the long ones
    still reads ``perfControl`` and ``gpuConfigInfo`` however they are spelt."""
    names = {"plain": lambda n: f'"{n}"', "all_escaped": escaped,
             "one_escape": lambda n: f'"{n[:4]}\\u{ord(n[4]):04x}{n[5:]}"'}[spelling]
    text = ('{"metadata": "x", %s: 45, %s: {"%s": {"maxDeviceMem": %d}}}'
            % (names("perfControl"), names("gpuConfigInfo"), BUS, MiB))
    assert managed.parse_manage_info_from_json(text) and state(managed) == (45, {BUS: MiB}), (
        f"perfControl and gpuConfigInfo spelt {spelling} ({text}) left {state(managed)}, "
        f"expected (45, {{{BUS!r}: {MiB}}}) [RM-19]")


#: name -> the start of a string the config does not read that makes the document
#: unparsable (RM-5), up to the character that does: the document goes on after it as if
#: the string had ended there, so that only the check of that character rejects it
BAD_UNREAD_STRINGS = {
    "control_character": '"a\x01', "unknown_escape": '"a\\', "short_unicode_escape": '"a\\u12',
    "escaped_quote_then_control": '"\\"\x1f', "no_closing_quote": '"a',
}


@pytest.mark.clause("RM-19")
@pytest.mark.parametrize("bad", sorted(BAD_UNREAD_STRINGS))
@pytest.mark.parametrize("where", ["ignored_member", "ignored_name", "inside_70_arrays",
                                   "name_inside_70_arrays", "unterminated", "unterminated_deep"])
def test_strings_not_kept_are_still_checked(rt, managed, config_path, caplog, bad,
                                            where) -> None:
    """A string read but not kept is checked as any other: the document is unparsable."""
    caplog.set_level(logging.WARNING)
    s = BAD_UNREAD_STRINGS[bad]
    text = {"ignored_member": '{"metadata": %s, "perfControl": 45}' % s,
            "ignored_name": '{%s: 0, "perfControl": 45}' % s,
            "inside_70_arrays": '{"perfControl": 45, "m": ' + "[" * 70 + s + "]" * 70 + "}",
            "name_inside_70_arrays":
                '{"perfControl": 45, "m": ' + "[" * 70 + "{%s: 0}" % s + "]" * 70 + "}",
            "unterminated": '{"perfControl": 45, "metadata": ' + s,
            "unterminated_deep": '{"perfControl": 45, "m": ' + "[" * 70 + s}[where]
    ok = managed.parse_manage_info_from_json(text)
    assert (ok, state(managed)) == (False, (40, {BUS: 8 * MiB})), (
        f"a string {bad} {where} ({text[:120]!r}) returned {ok} and left {state(managed)}, "
        f"expected the document rejected as unparsable [RM-19]")
    one_warning(caplog, rt, config_path, f"a string {bad} {where}", "unparsable")


@pytest.mark.clause("RM-19")
@pytest.mark.parametrize("where", ["bus_id", "entry_member_name", "perfControl"])
def test_strings_kept_are_checked_too(rt, managed, where) -> None:
    """A string holding a control character makes the document unparsable (RM-5) where the
    config reads it too, a bus id or a member name inside an entry as much as a value."""
    s = '"a\x01b"'
    text = {"bus_id": '{"gpuConfigInfo": {%s: {"maxDeviceMem": 1}}, "perfControl": 45}' % s,
            "entry_member_name":
                '{"gpuConfigInfo": {"%s": {%s: 1, "maxDeviceMem": 1}}, "perfControl": 45}'
                % (BUS, s),
            "perfControl": '{"perfControl": %s, "gpuConfigInfo": {"%s": {"maxDeviceMem": 1}}}'
                           % (s, BUS)}[where]
    ok = managed.parse_manage_info_from_json(text)
    assert (ok, state(managed)) == (False, (40, {BUS: 8 * MiB})), (
        f"a control character in a string as {where}: returned {ok}, left {state(managed)}, "
        f"expected the document rejected as unparsable [RM-19]")


@pytest.mark.clause("RM-19")
def test_strings_in_a_rejected_array_are_read(rt, managed) -> None:
    """Strings inside a member the config reads are read as any value: perfControl as an
    array of strings is rejected as an array (RM-5), the limit beside it applied."""
    ok = managed.parse_manage_info_from_json(
        '{"perfControl": ["a", "b"], "gpuConfigInfo": {"%s": {"maxDeviceMem": %d}}}' % (BUS, MiB))
    assert (ok, state(managed)) == (False, (40, {BUS: MiB})), (
        f"perfControl [\"a\", \"b\"]: returned {ok}, left {state(managed)}, expected False and "
        f"(40, {{{BUS!r}: {MiB}}}) [RM-19]")


@pytest.mark.clause("RM-19")
@pytest.mark.parametrize("value", ['"\\"x"', '"\\u00e9"', '"\\\\"', '"\\u12345"',
                                   '"a\\u0022b"', '"\\ud83d\\ude00"'])
def test_strings_not_kept_end_where_their_closing_quote_is(rt, managed, value) -> None:
    """Escapes in a string not kept, an escaped quote first among them, are read as in any
    string: the document goes on after its closing quote."""
    for text in ('{"metadata": %s, "perfControl": 45}' % value,
                 '{%s: [%s], "perfControl": 45}' % (value, value),
                 '{"perfControl": 45, "m": ' + "[" * 70 + "{%s: %s}" % (value, value)
                 + "]" * 70 + "}"):
        managed.parse_manage_info_from_json('{"perfControl": 40}')
        ok = managed.parse_manage_info_from_json(text)
        assert (ok, managed.perf_control) == (True, 45), (
            f"{text[:100]!r}: returned {ok}, perfControl {managed.perf_control}, expected True "
            f"and 45 [RM-19]")


@pytest.mark.clause("RM-19")
def test_no_nesting_depth_makes_the_parser_raise(rt, managed, caplog) -> None:
    """A recursive reader fails somewhere near the interpreter's recursion limit, and where
    depends on the stack it is called from: every depth around it, each parsed on a new
    thread (as the listener's), must be rejected cleanly."""
    caplog.set_level(logging.CRITICAL)
    raised: dict[int, str] = {}

    def parse(depth: int) -> None:
        doc = nemesis.nested_document(depth, member="perfControl",
                                      beside={"gpuConfigInfo": {BUS: {"maxDeviceMem": MiB}}})
        try:
            managed.parse_manage_info_from_json(doc)
        except BaseException as exc:  # noqa: BLE001 - reported below
            raised[depth] = repr(exc)[:80]

    for depth in range(800, 1201):
        t = threading.Thread(target=parse, args=(depth,), name="parse")
        t.start()
        t.join()
    assert not raised, (f"parse_manage_info_from_json raised for {len(raised)} nesting depths: "
                        f"{dict(list(raised.items())[:3])} [RM-19]")
    assert state(managed) == (40, {BUS: MiB}), \
        f"documents nested 800 to 1200 deep left {state(managed)} [RM-19]"


@pytest.mark.clause("RM-19")
def test_deep_value_delivered_by_the_listener(rt, managed, config_path, vclock, caplog) -> None:
    """The same attack through the listener thread (a shallow stack): no handler error."""
    caplog.set_level(logging.WARNING)
    doc = nemesis.nested_document(990, beside={"gpuConfigInfo": {BUS: {"maxDeviceMem": MiB}}},
                                  member="perfControl")
    vclock.wait_for_waiters(1, clause="FL-2")
    write_text(config_path, doc)
    poll(vclock)
    errors = runtime_records(caplog, rt, logging.ERROR)
    assert errors == [], (f"a document nested 990 deep made the handler fail: "
                          f"{[r.getMessage()[:200] for r in errors]} [RM-19]")
    assert state(managed) == (40, {BUS: MiB}), (
        f"a perfControl nested 990 deep left {state(managed)}, expected the limit beside it "
        f"applied [RM-19]")
    one_warning(caplog, rt, config_path, "perfControl nested 990 deep", "perfControl")


def padded(values: int) -> str:
    """A document of exactly ``values`` JSON values: perfControl 45 and a padding array."""
    zeros = values - 5          # root, "perfControl", 45, "pad", the array
    return '{"perfControl": 45, "pad": [' + ",".join(["0"] * zeros) + "]}"


@pytest.mark.clause("RM-19")
@pytest.mark.parametrize("values,accepted", [(MAX_VALUES - 1, True), (MAX_VALUES, True),
                                             (MAX_VALUES + 1, False)])
def test_value_count_bound(rt, managed, config_path, caplog, values, accepted) -> None:
    caplog.set_level(logging.WARNING)
    ok = managed.parse_manage_info_from_json(padded(values))
    assert (ok, managed.perf_control) == ((True, 45) if accepted else (False, 40)), (
        f"a document of {values} values (bound {MAX_VALUES}) returned {ok} and left "
        f"perfControl {managed.perf_control} [RM-19]")
    if not accepted:
        one_warning(caplog, rt, config_path, f"{values} values", str(MAX_VALUES))


@pytest.mark.clause("RM-19")           # every check names RM-19: the reader's bounds
@pytest.mark.parametrize("literal,value", [
    ("1e-99999999999999999999", None), ("1e99999999999999999999", None),
    ("0e99999999999999999999", 0), ("-0e-99999999999999999999", 0),
    ("1048576" + "0" * 5000 + "e-5000", MiB), ("1" + "0" * 5000, None),
    # exponents of 18, 19 and 20 digits against digits that offset a short exponent
    ("5" + "0" * 200 + "e-" + "1" * 18, None), ("5" + "0" * 200 + "e-" + "1" * 19, None),
    ("5" + "0" * 200 + "e-" + "1" * 20, None), ("5" + "0" * 200 + "e-000" + "1" * 19, None),
    ("0." + "0" * 199 + "5e+" + "1" * 19, None), ("0." + "0" * 199 + "5e" + "1" * 20, None),
    ("5" + "0" * 200 + "e-200", 5), ("0." + "0" * 199 + "5e200", 5)])
def test_numbers_read_exactly_whatever_their_literal(rt, managed, literal, value) -> None:
    doc = '{"gpuConfigInfo": {"%s": {"maxDeviceMem": %s}}}' % (BUS, literal)
    t, out = run_in_thread(lambda: managed.parse_manage_info_from_json(doc), "parse")
    assert joined(t) and "error" not in out, \
        f"maxDeviceMem {literal[:40]} made the parser raise {out.get('error')!r} [RM-19]"
    got = managed.memory_limits[BUS]
    assert got == (value if value is not None else 8 * MiB), (
        f"maxDeviceMem {literal[:40]}... ({len(literal)} characters) gave the limit {got}, "
        f"expected {value if value is not None else 'the last good 8 MiB'} [RM-19]")


# -- RM-20: unknown bus ids ---------------------------------------------------------------------
@pytest.fixture
def one_gpu(rt, runtimes, vclock, tmp_path):
    config = tmp_path / "gpu_config.json"
    ctx = runtimes(config_file=str(config), clock=vclock)
    vclock.wait_for_waiters(1, clause="FL-2")
    gpu = gpus(ctx)[0]
    return ctx, config, gpu, bus_id(rt, gpu)


def boundary(rt, ctx) -> None:
    ctx.resource_management.run_action(rt.SessionRunActionOptions(
        device_mgr=ctx.device_mgr, graph_id=1, sess_duration_us=1000))


def deliver(clock, path, text: str) -> None:
    write_text(path, text)
    poll(clock)


def unknown_ids(message: str) -> int:
    return message.count("zz:")


@pytest.mark.clause("RM-20")
def test_unknown_bus_ids_are_forgotten_and_logged_in_one_line(rt, one_gpu, vclock,
                                                              caplog) -> None:
    """Scaled from 300 000 unknown ids per rewrite: 3 rewrites of 2000 fresh ones."""
    ctx, config, gpu, bus = one_gpu
    rm = ctx.resource_management
    caplog.set_level(logging.WARNING)
    for rewrite in range(3):
        limit = (16 + rewrite) * MiB
        doc = json.loads(nemesis.unknown_bus_ids_document(2000, start=rewrite * 2000))
        doc["gpuConfigInfo"] = {bus: {"maxDeviceMem": limit}, **doc["gpuConfigInfo"]}
        deliver(vclock, config, json.dumps(doc))
        held = len(rm.memory_limits)
        assert held <= MAX_BUS_IDS, \
            f"rewrite {rewrite}: memory_limits holds {held} bus ids, more than 256 [RM-20]"
        caplog.clear()
        boundary(rt, ctx)
        errors = runtime_records(caplog, rt, logging.ERROR)
        assert len(errors) <= 1, (f"rewrite {rewrite}: one step boundary logged "
                                  f"{len(errors)} errors for unknown bus ids, expected 1 [RM-20]")
        assert errors and 1 <= unknown_ids(errors[0].getMessage()) <= MAX_NAMED, (
            f"rewrite {rewrite}: the error names {unknown_ids(errors[0].getMessage()) if errors else 0} "
            f"unknown bus ids, expected 1 to {MAX_NAMED} [RM-20]")
        assert rm.memory_limits == {bus: limit}, (
            f"rewrite {rewrite}: after the boundary memory_limits holds "
            f"{len(rm.memory_limits)} bus ids, expected only the GPU's {bus!r} [RM-20]")
        assert bytes_limit(gpu) == limit, \
            f"rewrite {rewrite}: unknown bus ids kept the GPU's limit from applying [RM-8]"


@pytest.mark.clause("RM-20")
def test_a_gpu_whose_allocator_is_no_bfc_names_no_gpu_bfc(rt, one_gpu, caplog) -> None:
    """The boundary's device manager lists the runtime's GPU and a GPU whose allocator is
    neither a BFC allocator nor a VMem allocator: that GPU's bus id names no GPU BFC, so its
    pending limit is forgotten like an unknown bus id's, while the runtime's GPU is limited."""
    from types import SimpleNamespace
    ctx, _, gpu, bus = one_gpu
    rm = ctx.resource_management
    other = "7f:00.0"
    no_bfc = SimpleNamespace(
        device_type="GPU", get_allocator=lambda *a: SimpleNamespace(name="not_a_bfc"),
        attributes=SimpleNamespace(physical_device_desc=(
            f"device: 1, name: X, pci bus id: 0000:{other}, compute capability: 7.0")))
    devices = [*ctx.device_mgr.list_devices(), no_bfc]
    mgr = SimpleNamespace(list_devices=lambda: list(devices))
    rm.parse_manage_info_from_json(json.dumps(config_document(
        limits={bus: 24 * MiB, other: 8 * MiB})))
    precondition_holds("RM-20", rm.memory_limits == {bus: 24 * MiB, other: 8 * MiB},
                       f"a document of two bus ids is held whole ({rm.memory_limits})")
    caplog.set_level(logging.ERROR)
    rm.run_action(rt.SessionRunActionOptions(device_mgr=mgr, graph_id=1, sess_duration_us=1000))
    errors = [r.getMessage() for r in runtime_records(caplog, rt, logging.ERROR)]
    assert rm.memory_limits == {bus: 24 * MiB} and bytes_limit(gpu) == 24 * MiB, (
        f"after a boundary whose device manager has {other!r} with an allocator that is no "
        f"BFC, memory_limits is {rm.memory_limits} and the GPU's limit {bytes_limit(gpu)}: "
        f"expected {{{bus!r}: 24 MiB}}, {other!r} forgotten, and the GPU limited [RM-20]")
    assert len(errors) == 1 and other in errors[0], (
        f"the boundary logged {errors}, expected one error naming {other!r} [RM-20]")

@pytest.mark.clause("RM-20")
def test_unknown_bus_ids_are_logged_once_while_remembered(rt, one_gpu, vclock, caplog) -> None:
    ctx, config, _, _ = one_gpu
    caplog.set_level(logging.ERROR)
    x = "ff:1f.7"

    def named_after(doc: str) -> list[str]:
        deliver(vclock, config, doc)
        caplog.clear()
        boundary(rt, ctx)
        return [r.getMessage() for r in runtime_records(caplog, rt, logging.ERROR)]

    first = named_after(json.dumps(config_document(limits={x: MiB}, perf=100)))
    assert len(first) == 1 and x in first[0], f"an unknown bus id logged {first} [RM-20]"
    again = named_after(json.dumps(config_document(limits={x: 2 * MiB}, perf=99)))
    assert again == [], f"a remembered unknown bus id was logged again: {again} [RM-20]"
    crowd = named_after(nemesis.unknown_bus_ids_document(MAX_BUS_IDS))
    assert len(crowd) == 1 and unknown_ids(crowd[0]) == MAX_NAMED and "240" in crowd[0], (
        f"256 new unknown bus ids logged {[m[:300] for m in crowd]}, expected one error naming "
        f"16 and the number of the other 240 [RM-20]")
    evicted = named_after(json.dumps(config_document(limits={x: 3 * MiB}, perf=98)))
    assert len(evicted) == 1 and x in evicted[0], (
        f"after 256 newer unknown bus ids, {x!r} is no longer remembered and must be logged "
        f"again; logged {evicted} [RM-20]")


@pytest.mark.clause("RM-20")
@pytest.mark.parametrize("when", ["at start-up", "rewritten"])
def test_the_bound_never_costs_the_gpu_its_entry(rt, runtimes, vclock, tmp_path, when) -> None:
    """256 unknown bus ids listed before the process's own GPU: the bound of 256 held bus
    ids drops one of them, never the GPU's entry, whose limit applies at the boundary."""
    config = tmp_path / "gpu_config.json"
    limit = 24 * MiB
    first = bus_id(rt, gpus(runtimes())[0])     # the GPU's bus id, from a runtime without config

    def document(gpu_bus: str) -> str:
        return nemesis.unknown_bus_ids_document(MAX_BUS_IDS, extra={gpu_bus: limit})

    if when == "at start-up":
        write_text(config, document(first))
    ctx = runtimes(config_file=str(config), clock=vclock)
    vclock.wait_for_waiters(1, clause="FL-2")
    gpu = gpus(ctx)[0]
    bus = bus_id(rt, gpu)
    if when == "rewritten":
        deliver(vclock, config, document(bus))
    rm = ctx.resource_management
    held = rm.memory_limits
    assert len(held) <= MAX_BUS_IDS and held.get(bus) == limit, (
        f"{when}: a document of 256 unknown bus ids then the GPU's {bus!r} left memory_limits "
        f"with {len(held)} bus ids and {'no entry' if bus not in held else held[bus]} for "
        f"the GPU: the bound cost the GPU its entry [RM-20]")
    boundary(rt, ctx)
    assert bytes_limit(gpu) == limit, (
        f"{when}: the GPU's limit listed after 256 unknown bus ids did not apply "
        f"(bytes_limit {bytes_limit(gpu)}, expected {limit}) [RM-20]")


@pytest.mark.clause("RM-20")
def test_the_gpu_is_taken_first_and_the_last_bus_id_is_beyond_the_bound(rt, one_gpu) -> None:
    """Nothing held, then one document of 256 unknown bus ids and the GPU's entry last: the
    GPU's entry is taken before the document's other bus ids, so the first 255 of them are
    held and the 256th, the last in the document, is rejected (RM-5), not the first held."""
    ctx, _, _, bus = one_gpu
    rm = ctx.resource_management
    precondition_holds("RM-20", rm.memory_limits == {},
                       f"a runtime without a config document holds {rm.memory_limits}")
    doc = nemesis.unknown_bus_ids_document(MAX_BUS_IDS, extra={bus: 24 * MiB})
    unknown = list(json.loads(doc)["gpuConfigInfo"])[:MAX_BUS_IDS]
    ok = rm.parse_manage_info_from_json(doc)
    held = rm.memory_limits
    assert ok is False and held.get(bus) == 24 * MiB \
            and sorted(held) == sorted(unknown[:-1] + [bus]), (
        f"256 unknown bus ids then the GPU's {bus!r}, nothing held before: returned {ok} and "
        f"held {len(held)} bus ids, the first {unknown[0]!r} "
        f"{'held' if unknown[0] in held else 'not held'}, the last {unknown[-1]!r} "
        f"{'held' if unknown[-1] in held else 'not held'}; expected False, the GPU and the "
        f"first 255 held, the last rejected [RM-20]")


@pytest.mark.clause("RM-20")
def test_the_bound_never_costs_a_gpu_of_a_runtime_of_every_gpu(rt, runtimes, vclock,
                                                                 tmp_path) -> None:
    """num_gpus=None with a backend object builds every GPU of the backend (DEVICE-8): those
    are the runtime's GPUs too, so a start-up document of 256 unknown bus ids listed before
    the GPU's entry does not cost the GPU its entry."""
    config = tmp_path / "gpu_config.json"
    limit = 24 * MiB
    backend = rt.SimBackend(1, 64 * MiB)
    bus = bus_id(rt, gpus(runtimes(backend=backend))[0])
    write_text(config, nemesis.unknown_bus_ids_document(MAX_BUS_IDS, extra={bus: limit}))
    ctx = runtimes(num_gpus=None, gpu_memory_bytes=None, backend=backend,
                   config_file=str(config), clock=vclock)
    vclock.wait_for_waiters(1, clause="FL-2")
    held = ctx.resource_management.memory_limits
    assert len(held) <= MAX_BUS_IDS and held.get(bus) == limit, (
        f"create_runtime(num_gpus=None) over a backend of one GPU {bus!r}: a start-up document "
        f"of 256 unknown bus ids then the GPU's left memory_limits with {len(held)} bus ids "
        f"and {'no entry' if bus not in held else held[bus]} for the GPU: the bound cost a "
        f"GPU of the runtime its entry [RM-20]")


@pytest.mark.clause("RM-20")
def test_a_gpu_the_runtime_did_not_take_is_not_protected_by_the_bound(
        rt, runtimes, vclock, tmp_path) -> None:
    """A runtime of the CPU only (num_gpus=0) over a backend with a GPU: that GPU is not one
    of the devices create_runtime built, so with 256 unknown bus ids held a document naming
    it is rejected like any other new bus id."""
    config = tmp_path / "gpu_config.json"
    backend = rt.SimBackend(1, 64 * MiB)
    bus = bus_id(rt, gpus(runtimes(backend=backend))[0])
    ctx = runtimes(num_gpus=0, backend=backend, config_file=str(config), clock=vclock)
    rm = ctx.resource_management
    rm.parse_manage_info_from_json(nemesis.unknown_bus_ids_document(MAX_BUS_IDS))
    crowd = sorted(rm.memory_limits)
    precondition_holds("RM-20", len(crowd) == MAX_BUS_IDS and bus not in crowd,
                       f"a document of 256 unknown bus ids is held whole ({len(crowd)})")
    rm.parse_manage_info_from_json(json.dumps(config_document(limits={bus: 24 * MiB})))
    held = rm.memory_limits
    assert bus not in held and sorted(held) == crowd, (
        f"a runtime without GPUs, 256 unknown bus ids held: a document naming the backend's "
        f"GPU {bus!r}, which the runtime did not take, left memory_limits with "
        f"{len(held)} bus ids, {'the GPU among them' if bus in held else 'not the GPU'}: "
        f"expected it rejected and the 256 kept [RM-20]")


@pytest.mark.clause("RM-20")
@pytest.mark.parametrize("gpu_of", ["the runtime", "an earlier boundary"])
def test_a_gpu_takes_the_place_of_the_longest_held_unknown_bus_id(
        rt, runtimes, listener, vclock, tmp_path, gpu_of) -> None:
    """256 unknown bus ids held from one document, then a document naming only the GPU (one
    of the runtime's devices, or one an instance built on its own found in the device manager
    of an earlier boundary): the GPU's entry is held in the place of the first unknown bus id,
    and its limit applies at the next boundary."""
    config = tmp_path / "gpu_config.json"
    limit = 24 * MiB
    if gpu_of == "the runtime":
        ctx = runtimes(config_file=str(config), clock=vclock)
        vclock.wait_for_waiters(1, clause="FL-2")
        rm, device_mgr = ctx.resource_management, ctx.device_mgr
    else:
        device_mgr = runtimes().device_mgr
        rm = rt.GPUResourceManagement(str(config), clock=vclock, file_listener=listener)
        rm.parse_manage_info_from_json(json.dumps(config_document(limits={"ff:1f.7": MiB})))
        rm.run_action(rt.SessionRunActionOptions(device_mgr=device_mgr, graph_id=1,
                                                 sess_duration_us=1000))
    try:
        gpu = [d for d in device_mgr.list_devices() if str(d.device_type).upper() == "GPU"][0]
        bus = bus_id(rt, gpu)
        rm.parse_manage_info_from_json(nemesis.unknown_bus_ids_document(MAX_BUS_IDS))
        crowd = sorted(rm.memory_limits)
        precondition_holds("RM-20", len(crowd) == MAX_BUS_IDS and bus not in crowd,
                           f"a document of 256 unknown bus ids is held whole ({len(crowd)})")
        rm.parse_manage_info_from_json(json.dumps(config_document(limits={bus: limit})))
        held = rm.memory_limits
        assert held.get(bus) == limit and len(held) == MAX_BUS_IDS \
                and crowd[0] not in held and crowd[1] in held, (
            f"{gpu_of}: with 256 unknown bus ids held, a document naming the GPU {bus!r} left "
            f"memory_limits with {len(held)} bus ids, {held.get(bus)} for the GPU (expected "
            f"{limit}), the longest held {crowd[0]!r} "
            f"{'kept' if crowd[0] in held else 'dropped'} (expected dropped) [RM-20]")
        rm.run_action(rt.SessionRunActionOptions(device_mgr=device_mgr, graph_id=1,
                                                 sess_duration_us=1000))
        assert bytes_limit(gpu) == limit, (
            f"{gpu_of}: the GPU's limit held in the place of an unknown bus id did not apply "
            f"(bytes_limit {bytes_limit(gpu)}, expected {limit}) [RM-20]")
    finally:
        rm.close()


@pytest.mark.clause("RM-20")
def test_the_entry_whose_place_a_gpu_takes_stops_being_pending(rt, runtimes, listener,
                                                               vclock, tmp_path) -> None:
    """An instance built on its own knows GPU 0 from an earlier boundary; it holds 256 bus
    ids, the longest held that of GPU 1 of another device manager (a GPU it does not know).
    A document naming GPU 0 takes that entry's place, and the next boundary, over the device
    manager that has GPU 1, leaves GPU 1's limit as it was: the dropped limit is not
    pending."""
    config = tmp_path / "gpu_config.json"
    first, both = runtimes(), runtimes(num_gpus=2)
    gpu0, gpu1 = gpus(both)
    bus0, bus1 = bus_id(rt, gpu0), bus_id(rt, gpu1)
    precondition_holds("DEVICE-4", bus_id(rt, gpus(first)[0]) == bus0 != bus1,
                       f"GPU 0 of two runtimes has one bus id, GPU 1 another ({bus0}, {bus1})")
    rm = rt.GPUResourceManagement(str(config), clock=vclock, file_listener=listener)

    def step(device_mgr) -> None:
        rm.run_action(rt.SessionRunActionOptions(device_mgr=device_mgr, graph_id=1,
                                                 sess_duration_us=1000))

    try:
        rm.parse_manage_info_from_json(json.dumps(config_document(limits={"ff:1f.7": MiB})))
        step(first.device_mgr)
        crowd = {bus1: 8 * MiB, **{f"zz:{k:08x}.0": MiB for k in range(MAX_BUS_IDS - 1)}}
        rm.parse_manage_info_from_json(json.dumps(config_document(limits=crowd)))
        rm.parse_manage_info_from_json(json.dumps(config_document(limits={bus0: 24 * MiB})))
        held = rm.memory_limits
        precondition_holds("RM-20", held.get(bus0) == 24 * MiB and bus1 not in held,
                           f"GPU 0's entry takes the place of GPU 1's, held longest "
                           f"({held.get(bus0)} for GPU 0, GPU 1 "
                           f"{'kept' if bus1 in held else 'dropped'})")
        before = bytes_limit(gpu1)
        step(both.device_mgr)
        assert bytes_limit(gpu1) == before, (
            f"with 256 bus ids held, GPU 0's entry took the place of GPU 1's {bus1!r} "
            f"(8 MiB), and the next boundary over a device manager with GPU 1 set its limit "
            f"to {bytes_limit(gpu1)} (was {before}): the dropped entry was still pending "
            f"[RM-20]")
    finally:
        rm.close()


@pytest.mark.clause("RM-20")
def test_a_gpu_beyond_256_held_gpus_is_rejected(rt, listener, vclock, tmp_path) -> None:
    """An instance built on its own finds 257 GPUs in the device manager of a boundary
    (duck-typed devices, RM-17, sharing one BFC). A document naming all 257: the first 256
    are held, every held entry is a GPU's, so no entry can give the last one its place: it is
    rejected like any other bus id beyond the 256 (RM-5: the call returns False), without an
    exception and without costing a held GPU its entry."""
    from types import SimpleNamespace

    bfc = rt.BFCAllocator(rt.SimulatedDeviceMemory(64 * MiB), 64 * MiB, True, "GPU_bfc")
    devices = [SimpleNamespace(device_type="GPU", get_allocator=lambda *a: bfc,
                               attributes=SimpleNamespace(
                                   physical_device_desc=f"device: {i}, name: X, pci bus id: "
                                                        f"0000:{i // 32:02x}:{i % 32:02x}.0, "
                                                        f"compute capability: 7.0"))
               for i in range(MAX_BUS_IDS + 1)]
    buses = [rt.get_pci_bus_id(d.attributes.physical_device_desc) for d in devices]
    precondition_holds("RM-17", len(set(buses)) == MAX_BUS_IDS + 1 and all(buses),
                       f"257 duck-typed GPUs have 257 bus ids ({len(set(buses))})")
    mgr = SimpleNamespace(list_devices=lambda: list(devices))
    rm = rt.GPUResourceManagement(str(tmp_path / "gpu_config.json"), clock=vclock,
                                  file_listener=listener)
    try:
        rm.parse_manage_info_from_json(json.dumps(config_document(limits={buses[0]: 32 * MiB})))
        rm.run_action(rt.SessionRunActionOptions(device_mgr=mgr, graph_id=1,
                                                 sess_duration_us=1000))
        limits = {b: (16 + i % 16) * MiB for i, b in enumerate(buses)}
        try:
            accepted = rm.parse_manage_info_from_json(json.dumps(config_document(limits=limits)))
        except Exception as exc:                   # noqa: BLE001 - the failure reported
            pytest.fail(f"a document naming 257 GPUs, 256 held, raised {exc!r} [RM-20]")
        held = rm.memory_limits
        expected = {b: limits[b] for b in buses[:MAX_BUS_IDS]}
        assert accepted is False and held == expected, (
            f"a document naming 257 GPUs of the last boundary returned {accepted!r} and left "
            f"memory_limits with {len(held)} bus ids, the last GPU's "
            f"{'held' if buses[-1] in held else 'not held'}, "
            f"{sum(held.get(b) == v for b, v in expected.items())} of the first 256 GPUs' "
            f"limits held: expected False, the first 256 held and the last rejected [RM-20]")
    finally:
        rm.close()


@pytest.mark.clause("RM-20")
def test_unknown_bus_id_found_again_is_remembered_as_the_newest(rt, one_gpu, vclock,
                                                                caplog) -> None:
    """The remembered unknown bus ids are the 256 most recently found: one found again moves
    to the newest, so 256 other ones found after it, less one, do not make it logged again."""
    ctx, config, _, _ = one_gpu
    caplog.set_level(logging.ERROR)
    x = "ff:1f.7"

    def logged_after(doc: str) -> list[str]:
        deliver(vclock, config, doc)
        caplog.clear()
        boundary(rt, ctx)
        return [r.getMessage() for r in runtime_records(caplog, rt, logging.ERROR)]

    first = logged_after(json.dumps(config_document(limits={x: MiB}, perf=100)))
    assert len(first) == 1 and x in first[0], f"an unknown bus id logged {first} [RM-20]"
    logged_after(nemesis.unknown_bus_ids_document(MAX_BUS_IDS - 1))     # 256 remembered
    again = logged_after(json.dumps(config_document(limits={x: 2 * MiB}, perf=99)))
    assert again == [], f"a remembered unknown bus id was logged again: {again} [RM-20]"
    logged_after(nemesis.unknown_bus_ids_document(1, start=MAX_BUS_IDS))  # evicts the oldest
    third = logged_after(json.dumps(config_document(limits={x: 3 * MiB}, perf=98)))
    assert third == [], (
        f"{x!r}, found unknown again after 255 others, was evicted by the next new one and "
        f"logged a second time ({third}): the remembered set is not refreshed when a bus id "
        f"is found again (the 256 most recently found) [RM-20]")


@pytest.mark.clause("RM-20", "RM-5")
def test_at_most_256_bus_ids_are_held(rt, managed, config_path, caplog) -> None:
    caplog.set_level(logging.WARNING)
    ok = managed.parse_manage_info_from_json(nemesis.unknown_bus_ids_document(300))
    held = managed.memory_limits
    assert len(held) == MAX_BUS_IDS and BUS in held, (
        f"after a document naming 300 new bus ids memory_limits holds {len(held)} "
        f"(the GPU's {BUS!r} {'kept' if BUS in held else 'lost'}), expected 256 [RM-20]")
    assert ok is False, "a document with entries beyond the bound returned True [RM-5]"
    message = one_warning(caplog, rt, config_path, "300 new bus ids")
    assert re.search(r"(?<![-+\w.])45(?![\w.])", message), (
        f"the warning does not count the 45 entries ignored (as 45, not -45 or 4.5): "
        f"{message[:300]} [RM-20]")


# -- RM-21: log lines ---------------------------------------------------------------------------
def assert_clean_log(caplog, rt, what: str) -> None:
    for record in runtime_records(caplog, rt, logging.DEBUG):
        message = record.getMessage()
        bad = sorted({repr(c) for c in message if not c.isprintable()})
        assert not bad, (f"{what}: a {record.levelname} log message holds the characters {bad} "
                         f"as they are: {message[:200]!r} [RM-21]")
        assert len(message) <= MAX_MESSAGE, (f"{what}: a {record.levelname} log message is "
                                             f"{len(message)} characters long [RM-21]")


@pytest.mark.clause("RM-21")
@pytest.mark.parametrize("kind", sorted(nemesis.HOSTILE_TEXTS))
def test_config_text_cannot_forge_or_flood_a_log_line(rt, one_gpu, vclock, caplog,
                                                      kind) -> None:
    ctx, config, _, bus = one_gpu
    text = nemesis.HOSTILE_TEXTS[kind]
    caplog.set_level(logging.DEBUG)
    doc = {"gpuConfigInfo": {text: {"maxDeviceMem": MiB}, bus: {"maxDeviceMem": text},
                             text + "2": [text]},
           "perfControl": text, text: text}
    deliver(vclock, config, json.dumps(doc))
    boundary(rt, ctx)
    ctx.resource_management.parse_manage_info_from_json(json.dumps(text))
    assert runtime_records(caplog, rt, logging.WARNING), \
        f"a config with {kind} texts logged nothing [RM-5]"
    assert_clean_log(caplog, rt, f"a config with {kind} keys and values")


@pytest.mark.clause("RM-21")
def test_config_path_cannot_forge_a_log_line(rt, runtimes, vclock, tmp_path, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    config = tmp_path / "gpu_config\n2026-01-01 CRITICAL forged.json"
    write_text(config, '{"perfControl": "bad"}')
    ctx = runtimes(config_file=str(config), clock=vclock)
    vclock.wait_for_waiters(1, clause="FL-2")
    deliver(vclock, config, '{"gpuConfigInfo": {"ff:1f.7": {"maxDeviceMem": 1}}}')
    boundary(rt, ctx)
    config.unlink()
    config.mkdir()
    poll(vclock)
    assert len(runtime_records(caplog, rt, logging.WARNING)) >= 2, \
        "the bad config and the directory were not reported [RM-5]"
    assert_clean_log(caplog, rt, "a config path holding a newline")


class _NoDevices:
    """A device manager without devices: every bus id names no GPU (RM-20)."""

    def list_devices(self):
        return []


@pytest.mark.clause("RM-21")
@pytest.mark.parametrize("extra", [-1, 0, 1])
def test_the_config_path_is_quoted_alike_in_every_line(rt, control_env, vclock, listener,
                                                       tmp_path, caplog, extra) -> None:
    """A config path of 4095 to 4097 characters (PATH_MAX is 4096): the warning for a
    rejected document and the error for an unknown bus id both quote it whole, or both
    cut it, and one of at most 4096 characters is quoted whole."""
    base = str(tmp_path) + "/"
    path = base + "/".join(["d" * 200] * 30)
    path = (path + "/" + "c" * 300)[:4096 + extra]
    assert len(path) == 4096 + extra, "[RM-21]"
    rm = rt.GPUResourceManagement(path, clock=vclock, file_listener=listener)
    try:
        caplog.set_level(logging.WARNING)
        rm.parse_manage_info_from_json('{"gpuConfigInfo": {"ff:1f.7": {"maxDeviceMem": 1}}, '
                                       '"perfControl": "bad"}')
        rm.run_action(rt.SessionRunActionOptions(device_mgr=_NoDevices(), sess_duration_us=1))
    finally:
        rm.close()
    warnings = [r.getMessage() for r in runtime_records(caplog, rt, logging.WARNING)
                if r.levelno == logging.WARNING and "perfControl" in r.getMessage()]
    errors = [r.getMessage() for r in runtime_records(caplog, rt, logging.ERROR,
                                                      containing="ff:1f.7")]
    precondition_holds("RM-5", len(warnings) == 1, "a rejected part logs one warning")
    precondition_holds("RM-20", len(errors) == 1, "an unknown bus id logs one error")

    def whole(message: str) -> bool:
        return repr(path) in message or json.dumps(path) in message

    assert whole(warnings[0]) == whole(errors[0]), (
        f"a config path of {len(path)} characters is quoted "
        f"{'whole' if whole(warnings[0]) else 'cut'} in the warning and "
        f"{'whole' if whole(errors[0]) else 'cut'} in the error line: every line quotes it "
        f"alike [RM-21]")
    assert len(path) > 4096 or whole(warnings[0]), (
        f"a config path of {len(path)} characters (at most PATH_MAX, 4096) is not quoted "
        f"whole in the warning [RM-21]")


@pytest.mark.clause("RM-21")
def test_config_path_cannot_forge_the_suspend_line(rt, runtimes, vclock, tmp_path,
                                                   caplog) -> None:
    """The line a step suspended at perfControl 0 logs names the config path quoted."""
    caplog.set_level(logging.DEBUG)
    config = tmp_path / "gpu_config\n2026-01-01 00:00:00,000 CRITICAL forged.json"
    write_text(config, '{"perfControl": 0}')
    ctx = runtimes(config_file=str(config), clock=vclock)
    vclock.wait_for_waiters(1, clause="FL-2")
    perf_in_force(ctx.resource_management, 0)
    t, out = run_in_thread(lambda: boundary(rt, ctx), name="step")
    with precondition("RM-12", "perfControl 0 suspends the step"):
        vclock.wait_for_waiters(2, clause="RM-12")  # the listener and the suspended step
    deliver(vclock, config, '{"perfControl": 100}')
    assert joined(t) and "error" not in out, \
        f"the suspended step did not resume: {out.get('error')!r} [RM-12]"
    assert runtime_records(caplog, rt, logging.DEBUG, containing="forged"), \
        "the suspended step logged no line naming the config path [RM-12]"
    assert_clean_log(caplog, rt, "a step suspended on a config path holding a newline")


@pytest.mark.clause("RM-21")
def test_a_text_quoted_whole_is_not_said_to_be_cut(rt, managed, config_path, caplog) -> None:
    """Texts of 1 to 200 characters: one the warning quotes whole carries no length (only an
    excerpt says how long its text was), whatever length the runtime cuts at."""
    caplog.set_level(logging.WARNING)
    wrong = []
    for n in range(1, 201):
        caplog.clear()
        text = "y" * n
        managed.parse_manage_info_from_json(json.dumps({"perfControl": text}))
        for record in runtime_records(caplog, rt, logging.WARNING):
            message = record.getMessage()
            if text in message and re.search(rf"(?<!\d){n}(?!\d)\s*(?:characters|chars)",
                                              message):
                wrong.append((n, message[:200]))
    assert not wrong, (f"a text quoted whole is followed by its length, as if it had been "
                       f"cut: {wrong[:2]} [RM-21]")


@pytest.mark.clause("RM-21")
@pytest.mark.parametrize("n", [59, 60, 61, 200])
def test_an_excerpt_holds_the_first_60_characters(rt, managed, caplog, n) -> None:
    """A string perfControl of ``n`` characters, no two neighbours alike: the warning quotes
    its first 60 characters in a row (all of it up to 60), and never its first 61."""
    caplog.set_level(logging.WARNING)
    text = "".join(chr(ord("a") + i % 26) for i in range(n))
    managed.parse_manage_info_from_json(json.dumps({"perfControl": text}))
    messages = [r.getMessage() for r in runtime_records(caplog, rt, logging.WARNING)]
    assert messages, f"a string perfControl of {n} characters logged no warning [RM-5]"
    assert any(text[:60] in m for m in messages), (
        f"the warning for a string perfControl of {n} characters does not quote its first "
        f"{min(n, 60)} characters: {[m[:300] for m in messages]} [RM-21]")
    if n > 60:
        assert not any(text[:61] in m for m in messages), (
            f"the warning for a string perfControl of {n} characters quotes more than its "
            f"first 60 characters: {[m[:300] for m in messages]} [RM-21]")


# -- API-8 ------------------------------------------------------------------------------------
@pytest.mark.clause("API-8")
@pytest.mark.parametrize("bad", ["gpu\x00config.json", "gpu\ud800config.json"])
def test_config_path_that_cannot_name_a_file(rt, control_env, vclock, listener, tmp_path,
                                             bad) -> None:
    path = f"{tmp_path}/{bad}"
    expect_value_error(lambda: rt.GPUResourceManagement(path, clock=vclock,
                                                        file_listener=listener),
                       f"GPUResourceManagement({bad!r})", "API-8")
    assert not listener.is_running(), (f"GPUResourceManagement({bad!r}) raised but registered "
                                       f"its handler first [API-8]")
    expect_value_error(lambda: rt.create_runtime(config_file=path, status_file=None,
                                                 clock=vclock),
                       f"create_runtime(config_file={bad!r})", "API-8")
