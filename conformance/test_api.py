"""API clauses: the runtime module, its capabilities and the names each capability requires."""

from __future__ import annotations

import inspect

import pytest

from conformance import spec

#: The names each capability requires (API-1, API-3 to API-7); start-up checks them too.
NAMES_BY_CAPABILITY = {cap: names for cap, names in spec.CAPABILITY_NAMES.items() if names}

CLOCK_TAKERS = ("BFCAllocator", "GPUBFCAllocator", "FileListener", "GPUResourceManagement",
                "GPUStatistics", "DirectSession", "create_runtime")


@pytest.mark.clause("API-1")
def test_runtime_module_identifies_itself(rt) -> None:
    for attr in ("NAME", "VERSION", "SPEC_VERSION"):
        value = getattr(rt, attr)
        assert isinstance(value, str) and value, f"{rt.__name__}.{attr}={value!r} [API-1]"
    assert rt.SPEC_VERSION == spec.spec_version(), (
        f"{rt.__name__}.SPEC_VERSION={rt.SPEC_VERSION!r}, suite spec is "
        f"{spec.spec_version()!r} [API-1]")


@pytest.mark.clause("API-2")
def test_capabilities_are_from_the_closed_vocabulary(rt) -> None:
    assert isinstance(rt.CAPABILITIES, frozenset), "CAPABILITIES must be a frozenset [API-2]"
    unknown = set(rt.CAPABILITIES) - spec.CAPABILITIES
    assert not unknown, f"unknown capabilities {sorted(unknown)} [API-2]"


@pytest.mark.clause("API-3", "API-5", "API-6", "API-7")
@pytest.mark.parametrize("capability", sorted(NAMES_BY_CAPABILITY))
def test_declared_capability_exposes_its_names(rt, capability: str) -> None:
    if capability not in rt.CAPABILITIES:
        pytest.skip(f"NOT_SUPPORTED: runtime {rt.NAME} does not declare capability "
                    f"{capability!r}")
    missing = [n for n in NAMES_BY_CAPABILITY[capability] if not hasattr(rt, n)]
    assert not missing, f"capability {capability!r} declared but {missing} missing [API-1]"


@pytest.mark.clause("API-4")
@pytest.mark.capability("virtual_clock")
def test_components_take_an_injectable_clock(rt) -> None:
    present = [n for n in CLOCK_TAKERS if hasattr(rt, n)]
    assert present, "no clock-taking component exposed [API-4]"
    lacking = [n for n in present
               if "clock" not in inspect.signature(getattr(rt, n)).parameters]
    assert not lacking, f"{lacking} take no 'clock' argument [API-4]"
