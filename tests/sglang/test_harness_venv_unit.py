"""The SGLang harness venv's install steps (``venv_steps``), without installing anything."""

from __future__ import annotations

from pathlib import Path

import sglang_harness as harness


def _requirements(step: list[str]) -> list[str]:
    """The requirements of one ``pip install`` step: not its options, not their values."""
    values = {"--find-links"}
    return [a for i, a in enumerate(step) if not a.startswith("-") and step[i - 1] not in values]


def test_pypi_torch_comes_with_the_cuda_libraries_it_links_and_no_resolution(
    tmp_path: Path,
) -> None:
    no_deps, resolved = harness.venv_steps(tmp_path)
    assert no_deps[0] == "--no-deps"
    installed = _requirements(no_deps)
    assert installed[0] == "torch==2.13.0"
    assert [r for r in installed if r.startswith("nvidia-")] == list(harness.CUDA_LIBRARIES)
    # a resolution that saw torch would read its metadata: every CUDA wheel and its triton
    for name in ("torch", "compressed-tensors", "xgrammar"):
        assert name in {r.split("==")[0] for r in installed}
        assert name not in {r.split("==")[0] for r in _requirements(resolved)}
    assert not any(r.startswith(("nvidia-", "cuda-")) for r in _requirements(resolved))
    # reproducible: every requirement of every step is one release
    for step in (no_deps, resolved):
        assert all(r.count("==") == 1 for r in _requirements(step)), step


def test_a_cpu_wheel_in_the_cache_replaces_pypi_torch_and_its_libraries(tmp_path: Path) -> None:
    wheel = tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    wheel.write_bytes(b"")
    (tmp_path / "torch-2.12.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    no_deps, resolved = harness.venv_steps(tmp_path)
    assert str(wheel) in no_deps
    assert not any(r.startswith(("torch==", "nvidia-")) for r in no_deps + resolved)
    # the rest is what the PyPI build gets
    pypi = harness.venv_steps(tmp_path / "empty")
    assert _requirements(no_deps)[1:] == list(harness.TORCH_DEPENDENTS)
    assert _requirements(resolved) == _requirements(pypi[1])
