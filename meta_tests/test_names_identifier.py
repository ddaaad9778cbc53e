"""``conformance.checks.names_identifier``: a message names an identifier as a whole word
(SPEC.md, "How to read this specification")."""

from __future__ import annotations

import pytest

from conformance.checks import names_identifier


@pytest.mark.parametrize("message,name", [
    ("gpu_memory_bytes must be a positive int (bytes), got 0", "gpu_memory_bytes"),
    ("create_runtime(gpu_memory_bytes=0): not a positive int", "gpu_memory_bytes"),
    ("GPU_0_bfc.requested_size(0x1234): not the start of a chunk", "requested_size"),
    ("GPU_0_bfc.requested_size(0x1234): not the start of a chunk", "GPU_0_bfc"),
    ("GPUAdjustableAllocator.free_empty_memory: bfc must be a BFCAllocator", "bfc"),
    ("'bfc' is not a BFCAllocator", "bfc"),
    ("a bad node placed_nowhere.", "placed_nowhere"),
    ("x", "x"),
    ("cannot convert feed x to an array", "x"),
    ("unknown device GPU:1", "GPU:1"),
])
def test_a_whole_word_is_named(message: str, name: str) -> None:
    assert names_identifier(message, name)
    assert names_identifier(ValueError(message), name), "an exception is read as its str()"


@pytest.mark.parametrize("message,name", [
    ("XXgpu_memory_bytesXX must be a positive int (bytes), got 0", "gpu_memory_bytes"),
    ("max_gpu_memory_bytes must be a positive int", "gpu_memory_bytes"),
    ("gpu_memory_bytes2 must be a positive int", "gpu_memory_bytes"),
    ("GPU_0_bfc.XXrequested_sizeXX(0x1234): not the start of a chunk", "requested_size"),
    ("GPUAdjustableAllocator.XXfree_empty_memoryXX: must be a BFCAllocator", "free_empty_memory"),
    ("must be a BFCAllocator, got GPU_0_bfc", "bfc"),
    ("", "x"),
    ("an index out of range", "x"),
])
def test_a_part_of_a_word_is_not(message: str, name: str) -> None:
    assert not names_identifier(message, name)


def test_the_name_is_matched_literally() -> None:
    assert not names_identifier("GPU_0_bfc", "GPU.0.bfc"), "a '.' in a name is no wildcard"
    assert names_identifier("limit (a+b) exceeded", "a+b")
