"""The benchmark registry: names without imports, lazy loading, clear errors, run-time registration."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from personalign import registry
from personalign.errors import ConfigError


def test_listing_names_imports_no_benchmark() -> None:
    code = (
        "import sys\nfrom personalign import registry\nnames = registry.names()\n"
        "print('cupid' in names, any(m.startswith('personalign.benchmarks.') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False"]


def test_get_loads_the_builtin_spec() -> None:
    spec = registry.get("cupid")
    assert spec.name == "cupid"
    assert [role.name for role in spec.roles][:2] == ["subject", "judge"]


def test_unknown_benchmark_names_the_registered_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown benchmark 'nope' \(registered: cupid"):
        registry.get("nope")


def test_registered_object_and_name_mismatch() -> None:
    registry.register("toy", SimpleNamespace(name="toy"))
    try:
        assert registry.get("toy").name == "toy"
        assert "toy" in registry.names()
        registry.register("toy", SimpleNamespace(name="other"))
        with pytest.raises(ConfigError, match="whose spec is named 'other'"):
            registry.get("toy")
    finally:
        registry.unregister("toy")
    assert "toy" not in registry.names()
