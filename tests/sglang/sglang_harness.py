"""Cached environments that run the real SGLang code from PyPI on a CPU-only machine.

* one virtualenv (``venv``) with torch and the pure-Python packages SGLang's
  disaggregation modules import, pinned (``venv_steps`` says how, below);
* per SGLang version, the wheel (``pip download --no-deps``) installed with
  ``--no-deps --target`` into ``sg-<version>``, plus the transformers release that
  version pins (they conflict with each other, so each version gets its own);
* per test session, a hard-linked copy of that directory that
  ``runtime/install-and-patch.sh`` (what the Dockerfile runs) patches.

Torch comes from PyPI alone (the machines reach no other index). PyPI's Linux x86_64 torch
is the CUDA build: ``libtorch_cpu``, ``libtorch_cuda`` and ``libtorch_python`` link
libcudart, cuBLAS, cuDNN, NCCL and the rest by name, so ``import torch`` fails without them
(measured: ``libcudart.so.13: cannot open shared object file``). The GPU driver
(``libcuda``) is opened only on use: with those libraries every CPU op the tests use runs
(and, with no GPU, ``torch.cuda.is_available()`` is False). So the venv gets torch with
``--no-deps`` and exactly the NVIDIA wheels that provide the libraries it links
(``CUDA_LIBRARIES``, at torch's pins: 1.8 GB of downloads), not all that torch's metadata
asks for: no cuSOLVER (only ``libtorch_cuda_linalg`` links it, opened on a GPU
linear-algebra call), no NVTX, no ``cuda-bindings``. A CPU wheel (``torch-<version>+cpu``)
in ``~/.cache/ascend-pd/wheels`` is used instead when one is there, with no NVIDIA wheel (it
links none).

No resolution reads torch's metadata: it would add the CUDA wheels left out above (cuSOLVER
alone is 200 MB). The packages that require torch (``TORCH_DEPENDENTS``) are installed with
``--no-deps`` beside it and their other requirements are in ``BASE_REQUIREMENTS``; the
``transformers`` both also require comes per release in ``sg-<version>``, first on the
path. ``triton`` (SGLang imports it) is pinned to the release PyPI's torch requires, the
pair that torch is built and tested with.

Only the hardware modules are stubbed (``stubs/``: torch_npu, torchvision);
memfabric and mooncake are imported lazily by SGLang and are absent, except where a test or
the connector benchmark asks for the real memfabric-hybrid wheel (``ensure_memfabric``).
Everything lives under ``~/.cache/ascend-pd/`` (``$ASCEND_PD_CACHE``) and is reused across
runs.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("ASCEND_PD_CACHE", Path.home() / ".cache" / "ascend-pd"))
WHEELS = CACHE / "wheels"
HARNESS = CACHE / "sglang-harness"
VENV = HARNESS / "venv"
PYTHON = VENV / "bin" / "python"
BUILD_RECORD = VENV / ".ascend-pd-build"
STUBS = Path(__file__).resolve().parent / "stubs"
TESTS = Path(__file__).resolve().parent

#: Lines a test wants in the session's terminal summary (conftest prints them).
SUMMARY: list[str] = []

VERSIONS = ("0.5.10", "0.5.11", "0.5.12", "0.5.13", "0.5.19", "0.5.20", "0.5.23")

TORCH_VERSION = "2.13.0"
TORCH = f"torch=={TORCH_VERSION}"
#: The NVIDIA wheels whose libraries PyPI's torch 2.13.0 links (``readelf -d`` of
#: ``torch/lib/*.so``: NEEDED), at torch's pins (the CUDA toolkit's: its
#: ``cuda-toolkit==13.0.3``'s, nvJitLink the lowest it allows); the loader needs them at
#: ``import torch``, the GPU driver only on use.
CUDA_LIBRARIES = (
    "nvidia-cuda-runtime==13.0.96",  # libcudart.so.13
    "nvidia-cuda-cupti==13.0.85",  # libcupti.so.13 (libtorch_cpu's profiler)
    "nvidia-cuda-nvrtc==13.0.88",  # libnvrtc.so.13
    "nvidia-cublas==13.1.1.3",  # libcublas.so.13, libcublasLt.so.13
    "nvidia-cudnn-cu13==9.20.0.48",  # libcudnn.so.9
    "nvidia-cufft==12.0.0.61",  # libcufft.so.12
    "nvidia-cufile==1.15.1.6",  # libcufile.so.0
    "nvidia-curand==10.4.0.35",  # libcurand.so.10
    "nvidia-cusparse==12.6.3.3",  # libcusparse.so.12
    "nvidia-nvjitlink==13.0.88",  # libnvJitLink.so.13 (libcusparse's)
    "nvidia-cusparselt-cu13==0.8.1",  # libcusparseLt.so.0
    "nvidia-nccl-cu13==2.29.7",  # libnccl.so.2
    "nvidia-nvshmem-cu13==3.4.5",  # libnvshmem_host.so.3 (libtorch_nvshmem's)
)
#: What SGLang imports that requires torch: installed with ``--no-deps`` (their other
#: requirements are in ``BASE_REQUIREMENTS``), so no resolution reads torch's metadata.
TORCH_DEPENDENTS = ("compressed-tensors==0.20.1", "xgrammar==0.2.9")
#: What SGLang 0.5.10–0.5.23 import on the way to the Ascend connector, pinned, and
#: torch's and ``TORCH_DEPENDENTS``' own requirements but transformers (per release).
BASE_REQUIREMENTS = (
    "numpy==2.4.6",
    "aiohttp==3.14.5",
    "apache-tvm-ffi==0.1.15.post2",
    "dill==0.4.1",
    "einops==0.8.2",
    "filelock==4.3.2",
    "fsspec==2026.9.0",
    "gguf==0.19.0",
    "httpx==0.28.1",
    "ipython==9.18.1",
    "jinja2==3.1.6",
    "loguru==0.7.3",
    "msgspec==0.23.0",
    "networkx==3.6.1",
    "openai==3.57.0",
    "orjson==3.13.0",
    "packaging==26.4",
    "partial-json-parser==0.2.1.1.post7",
    "pillow==13.0.0",
    "prometheus_client==0.26.0",
    "psutil==7.2.2",
    "pybase64==1.5.1",
    "pydantic==2.14.4",
    "pyzmq==27.3.0",
    "requests==2.34.2",
    "sentencepiece==0.2.3",
    "starlette==1.10.0",
    "sympy==1.14.0",
    "tqdm==4.70.1",
    # torch 2.13.0's own pin (its CPU wheel names none)
    "triton==3.7.1",
    "typing_extensions==4.16.0",
)


def _log(message: str) -> None:
    print(f"[sglang-harness] {message}", file=sys.stderr, flush=True)


def _run(cmd: list[str], **kwargs: object) -> None:
    subprocess.run(cmd, check=True, **kwargs)  # type: ignore[call-overload]


def _pip(*args: str) -> None:
    cmd = [str(PYTHON), "-m", "pip", "--disable-pip-version-check", "-q", *args]
    _run(["nice", *cmd], stdout=subprocess.DEVNULL)


def _stamp(path: Path, content: str) -> bool:
    stamp = path / ".ascend-pd-stamp"
    return stamp.exists() and stamp.read_text() == content


def _write_stamp(path: Path, content: str) -> None:
    (path / ".ascend-pd-stamp").write_text(content)


@contextmanager
def _cache_lock() -> Iterator[None]:
    """Held while the shared cache is written: concurrent test sessions (a developer's and a
    CI run on one machine) wait for one another instead of installing into the same folder."""
    HARNESS.mkdir(parents=True, exist_ok=True)
    with (HARNESS / ".lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure_venv() -> Path:
    """The shared virtualenv (``venv_steps``); built once, again when the steps change."""
    with _cache_lock():
        return _ensure_venv_locked()


def venv_steps(wheels: Path) -> list[list[str]]:
    """The ``pip install`` argument lists that build the venv, in order: torch (a
    ``torch-<version>+cpu`` wheel in ``wheels`` if there is one, else PyPI's CUDA build and
    ``CUDA_LIBRARIES``) and ``TORCH_DEPENDENTS`` with ``--no-deps``; then
    ``BASE_REQUIREMENTS``, resolved, with ``--no-warn-conflicts`` (torch's unmet CUDA
    requirements are deliberate)."""
    cpu = sorted(wheels.glob(f"torch-{TORCH_VERSION}+cpu-*.whl"))
    torch = [str(cpu[-1])] if cpu else [TORCH, *CUDA_LIBRARIES]
    links = ["--find-links", str(wheels)]
    return [
        ["--no-deps", *links, *torch, *TORCH_DEPENDENTS],
        ["--no-warn-conflicts", *links, *BASE_REQUIREMENTS],
    ]


#: Run in the new venv before it is stamped: a venv torch cannot import in fails here, once,
#: not in every test.
_VENV_CHECK = (
    "import torch; x = torch.ones(2, dtype=torch.bfloat16); "
    "assert float(x.sum()) == 2.0; print(torch.__version__)"
)


def _ensure_venv_locked() -> Path:
    steps = venv_steps(WHEELS)
    content = "\n".join(" ".join(step) for step in steps)
    if _stamp(VENV, content):
        return PYTHON
    _log(f"creating {VENV} (torch and SGLang's pure-Python imports)")
    shutil.rmtree(VENV, ignore_errors=True)
    _run([sys.executable, "-m", "venv", str(VENV)])
    WHEELS.mkdir(parents=True, exist_ok=True)
    (HARNESS / "constraints.txt").write_text(TORCH + "\n")
    seconds = []
    for step in steps:
        began = time.monotonic()
        _pip("install", *step)
        seconds.append(f"{time.monotonic() - began:.0f} s")
    # what a cold build costs, for the tier's summary (the venv's test prints it): the
    # process that built it may be a benchmark's, whose stderr a passing test drops
    BUILD_RECORD.write_text(f"its pip install steps took {', '.join(seconds)}")
    check = subprocess.run([str(PYTHON), "-c", _VENV_CHECK], capture_output=True, text=True)
    if check.returncode != 0:
        raise RuntimeError(f"{VENV}: torch does not run on CPU:\n{check.stderr[-3000:]}")
    _write_stamp(VENV, content)
    return PYTHON


def wheel_for(version: str) -> Path:
    found = sorted(WHEELS.glob(f"sglang-{version}-*.whl"))
    if not found:
        _log(f"downloading sglang {version} (pip download --no-deps)")
        WHEELS.mkdir(parents=True, exist_ok=True)
        _run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--only-binary=:all:",
                "-d",
                str(WHEELS),
                f"sglang=={version}",
            ],
        )
        found = sorted(WHEELS.glob(f"sglang-{version}-*.whl"))
    if not found:
        raise RuntimeError(f"no wheel of sglang {version} in {WHEELS}")
    return found[-1]


def ensure_version(version: str) -> Path:
    """``sg-<version>``: the pristine SGLang of that version and its transformers."""
    ensure_venv()
    with _cache_lock():
        return _ensure_version_locked(version)


def _ensure_version_locked(version: str) -> Path:
    target = HARNESS / f"sg-{version}"
    wheel = wheel_for(version)
    if _stamp(target, wheel.name):
        return target
    _log(f"installing {wheel.name} into {target}")
    shutil.rmtree(target, ignore_errors=True)
    _pip("install", "--no-deps", "--no-compile", "--target", str(target), str(wheel))
    pin = transformers_pin(target, version)
    _pip(
        "install",
        "--no-compile",
        "--target",
        str(target),
        "-c",
        str(HARNESS / "constraints.txt"),
        pin,
    )
    _write_stamp(target, wheel.name)
    return target


#: sglang-router releases: 0.3.2 (2026-01-15) is the newest on PyPI and predates SGLang
#: 0.5.10 (2026-04-05), so it is what every supported SGLang release was served with;
#: its 0.3.x predecessors are what an image pinned a little older carries.
ROUTER_VERSIONS = ("0.3.0", "0.3.1", "0.3.2")


def ensure_router(version: str) -> Path:
    """``router-<version>``: the sglang-router wheel (its Rust extension is abi3 and loads
    here), installed with ``--no-deps``; its parser needs nothing else."""
    return _no_deps_wheel(f"sglang-router=={version}", HARNESS / f"router-{version}")


#: The Ascend transfer engine SGLang's ``AscendTransferEngine`` wraps (x86_64 wheel, no
#: dependencies). It imports on CPU; with no NPU or RDMA NIC its transfer calls convert
#: their arguments (pybind11) and then fail fast, which is what the connector benchmark
#: times and what the SGLang tier checks the patched connector's arguments against.
MEMFABRIC = "memfabric-hybrid==1.3.0"


def ensure_memfabric() -> Path:
    """``memfabric-<version>``: the memfabric-hybrid wheel installed with ``--no-deps``."""
    return _no_deps_wheel(MEMFABRIC, HARNESS / f"memfabric-{MEMFABRIC.split('==')[1]}")


def _no_deps_wheel(requirement: str, target: Path) -> Path:
    """``target``, holding the binary wheel of ``requirement`` (``name==version``), downloaded
    once into ``WHEELS`` and installed with ``--no-deps`` (again when the wheel changed)."""
    ensure_venv()
    name, version = requirement.split("==")
    pattern = f"{name.replace('-', '_')}-{version}-*.whl"
    with _cache_lock():
        found = sorted(WHEELS.glob(pattern))
        if not found:
            _log(f"downloading {requirement} (pip download --no-deps)")
            pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps"]
            _run([*pip, "--only-binary=:all:", "-d", str(WHEELS), requirement])
            found = sorted(WHEELS.glob(pattern))
        if not found:
            raise RuntimeError(f"no wheel of {requirement} in {WHEELS}")
        if not _stamp(target, found[-1].name):
            shutil.rmtree(target, ignore_errors=True)
            _pip("install", "--no-deps", "--no-compile", "--target", str(target), str(found[-1]))
            _write_stamp(target, found[-1].name)
        return target


def transformers_pin(target: Path, version: str) -> str:
    metadata = target / f"sglang-{version}.dist-info" / "METADATA"
    for line in metadata.read_text().splitlines():
        if line.startswith("Requires-Dist: transformers=="):
            return line.split(":", 1)[1].strip().split(";")[0].strip()
    raise RuntimeError(f"{metadata}: no transformers pin")


def patched_copy(version: str, workdir: Path) -> tuple[Path, str]:
    """A hard-linked copy of ``sg-<version>``'s sglang, patched by install-and-patch.sh.

    Returns the copy and the script's output. The patcher replaces files through
    ``os.replace``, so the pristine files behind the hard links stay untouched.
    """
    pristine = ensure_version(version)
    copy = workdir / f"sg-{version}-patched"
    shutil.rmtree(copy, ignore_errors=True)
    copy.mkdir(parents=True)
    for name in ("sglang", f"sglang-{version}.dist-info"):
        _run(["cp", "-al", str(pristine / name), str(copy / name)])
    out = run_install_and_patch(copy, pristine, version)
    if out.returncode != 0:
        raise RuntimeError(f"install-and-patch.sh failed for {version}:\n{out.stdout}{out.stderr}")
    return copy, out.stdout


#: This checkout's runtime source. install-and-patch.sh also pip-installs the runtime into
#: the shared venv, where another session (another checkout, a CI run) may have replaced
#: it by the time a test runs: the source on the path is what this session tests.
RUNTIME_SRC = REPO / "runtime"


def pythonpath(*dirs: Path, stubs: Path = STUBS) -> str:
    return os.pathsep.join(str(d) for d in (*dirs, RUNTIME_SRC, stubs))


def venv_env(*dirs: Path, stubs: Path = STUBS) -> dict[str, str]:
    """The environment of a harness interpreter with ``dirs``, this checkout's runtime and
    ``stubs`` on the path. Never the caller's ``ASCEND_PD_MODEL_CONFIG`` (a case names its
    model; a developer's setting must not change what it tests). Bytecode is written:
    the releases are installed with ``--no-compile``, and a shell that sets
    PYTHONDONTWRITEBYTECODE would make every run compile SGLang and transformers again
    (about as long as the import itself)."""
    env = dict(os.environ, PYTHONPATH=pythonpath(*dirs, stubs=stubs))
    env.pop("ASCEND_PD_MODEL_CONFIG", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def run_install_and_patch(
    copy: Path, pristine: Path, version: str, *extra_env: tuple[str, str]
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.update(
        PYTHON=str(PYTHON),
        PYTHONPATH=pythonpath(copy, pristine),
        SGLANG_VERSION=version,
        ASCEND_PD_SRC=str(REPO),
    )
    env.update(dict(extra_env))
    return subprocess.run(
        ["bash", str(REPO / "runtime" / "install-and-patch.sh")],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def workdir() -> Path:
    path = HARNESS / "run" / f"{os.getpid()}"
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class SGLangEnv:
    version: str
    pristine: Path
    patched: Path
    patch_output: str
    workdir: Path

    @property
    def version_tuple(self) -> tuple[int, int, int]:
        major, minor, patch = (int(p) for p in self.version.split("."))
        return (major, minor, patch)


class Envs:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.envs: dict[str, SGLangEnv] = {}

    def get(self, version: str) -> SGLangEnv:
        if version not in self.envs:
            work = self.root / version
            work.mkdir(parents=True, exist_ok=True)
            patched, output = patched_copy(version, work)
            self.envs[version] = SGLangEnv(version, ensure_version(version), patched, output, work)
        return self.envs[version]


def run_python(
    dirs: tuple[Path, ...], code: str, stubs: Path = STUBS, nice: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in the harness venv (``venv_env``); ``nice`` unless a benchmark asks
    for the ordinary priority."""
    return subprocess.run(
        [*(["nice"] if nice else []), str(PYTHON), "-c", code],
        env=venv_env(*dirs, stubs=stubs),
        capture_output=True,
        text=True,
        check=False,
    )


def run_cases(script: Path, dirs: tuple[Path, ...], cases: list[Any], request: Path) -> Any:
    """Run ``script CASES.json RESULTS.json`` (``argv_driver.py``, ``router_driver.py``) in
    the harness venv (``venv_env(*dirs)``), ``cases`` written to ``request``; the JSON it
    wrote."""
    out = request.with_suffix(".results.json")
    request.write_text(json.dumps({"cases": cases}))
    done = subprocess.run(
        ["nice", str(PYTHON), str(script), str(request), str(out)],
        env=venv_env(*dirs),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(out.read_text())


def run_report(
    dirs: tuple[Path, ...], script: str, **names: object
) -> tuple[subprocess.CompletedProcess[str], Any]:
    """Run ``script`` as ``run_python`` does, ``TESTS`` in it replaced by this directory's
    path (``driver.py``, ``mla_pools.py``) and each of ``names`` by its value's ``repr``;
    returns the run and the JSON it printed on its last ``REPORT `` line (None: it failed
    or printed none)."""
    for name, value in {"TESTS": str(TESTS), **names}.items():
        script = script.replace(name, repr(value))
    out = run_python(dirs, script)
    lines = [line for line in out.stdout.splitlines() if line.startswith("REPORT ")]
    if out.returncode != 0 or not lines:
        return out, None
    return out, json.loads(lines[-1][len("REPORT ") :])


def mla_model(path: Path, layers: int, mtp: int, index: bool) -> str:
    """``path`` made a model directory whose ``config.json`` is a DeepSeek-V3 of ``layers``
    layers and ``mtp`` MTP layers with ``mla_pools.pool``'s widths (and an index head if
    ``index``); returns it."""
    config: dict[str, object] = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "num_hidden_layers": layers,
        "num_nextn_predict_layers": mtp,
        "kv_lora_rank": 4,
        "qk_rope_head_dim": 2,
    }
    if index:
        config["index_head_dim"] = 2
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    return str(path)
