"""The pure parts of the control-plane build: apt source selection and the reflect2 fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from ascend_pd_dev.controlplane import build, reflect2_fix

DEB822 = """Types: deb
# a comment
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main contrib
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: https://third.party.example/node
Suites: nodistro
Components: main

Types: deb
Enabled: no
URIs: http://disabled.example/debian
Suites: bookworm
Components: main
"""

ONE_LINE = """# comment
deb [arch=amd64 signed-by=/k.gpg] http://other.example/debian/ bookworm main non-free
deb https://packages.example/apt cloud-sdk-bookworm main
deb-src http://mirror.example/debian bookworm main
"""


def test_only_this_releases_archive_entries_become_deb_src_lines() -> None:
    sources = build.parse_apt_sources(ONE_LINE, DEB822, "bookworm")
    assert [(s.uri, s.suite) for s in sources] == [
        ("http://other.example/debian", "bookworm"),
        ("http://mirror.example/debian", "bookworm"),
        ("http://mirror.example/debian", "bookworm-updates"),
        ("http://mirror.example/debian-security", "bookworm-security"),
    ]
    text = build.deb_src_list(sources)
    assert (
        text.splitlines()[0]
        == "deb-src [signed-by=/k.gpg] http://other.example/debian bookworm main non-free"
    )
    assert all(line.startswith("deb-src ") for line in text.splitlines())
    assert "nodistro" not in text and "cloud-sdk" not in text and "disabled" not in text


def test_private_apt_options_never_point_at_the_system_lists(tmp_path: Path) -> None:
    options = build.private_apt_options(tmp_path)
    values = [o for o in options if o != "-o"]
    for key in ("Dir::Etc::SourceList", "Dir::Etc::SourceParts", "Dir::State::Lists", "Dir::Cache"):
        (entry,) = [v for v in values if v.startswith(key + "=")]
        assert entry.split("=", 1)[1].startswith(str(tmp_path))


def test_build_environment_pins_go_and_forbids_the_network(tmp_path: Path) -> None:
    env = build.build_environment({"PATH": "/usr/bin", "GOPATH": "/x"}, tmp_path / "gocache")
    assert env["PATH"].startswith("/usr/lib/go-1.19/bin:")
    assert env["GOPROXY"] == "off" and env["GOFLAGS"] == "-mod=vendor"
    assert "GOPATH" not in env
    assert build.make_command()[:3] == ["nice", "-n", "10"]


V101_LINK = (
    'package reflect2\n\nimport "unsafe"\n\n'
    + reflect2_fix._OLD_MAPITERINIT
    + "\n//go:noescape\n//go:linkname mapiternext reflect.mapiternext\n"
    + "func mapiternext(it *hiter)\n\n"
    + reflect2_fix._OLD_HITER
)
V101_MAP = (
    "package reflect2\n\n"
    + reflect2_fix._OLD_UNSAFE_ITERATE
    + "\ntype UnsafeMapIterator struct{}\n"
)


def _tree(tmp_path: Path) -> Path:
    pkg = tmp_path / reflect2_fix.REFLECT2_DIR
    pkg.mkdir(parents=True)
    (pkg / "unsafe_link.go").write_text(V101_LINK)
    (pkg / "unsafe_map.go").write_text(V101_MAP)
    return tmp_path


def test_reflect2_fix_moves_mapiterinit_per_go_version_and_declares_the_full_iterator(
    tmp_path: Path,
) -> None:
    tree = _tree(tmp_path)
    reflect2_fix.apply(tree)
    pkg = tree / reflect2_fix.REFLECT2_DIR
    link = (pkg / "unsafe_link.go").read_text()
    assert "mapiterinit" not in link
    assert "checkBucket uintptr" in link and "mapiternext" in link
    assert "UnsafeIterate" not in (pkg / "unsafe_map.go").read_text()
    above = (pkg / "go_above_118.go").read_text()
    assert "//go:build go1.18" in above
    assert "func mapiterinit(rtype unsafe.Pointer, m unsafe.Pointer, it *hiter)" in above
    assert "//go:build !go1.18" in (pkg / "go_below_118.go").read_text()
    # applying twice is a no-op
    reflect2_fix.apply(tree)
    assert (pkg / "unsafe_link.go").read_text() == link


def test_reflect2_fix_refuses_an_unknown_source_and_changes_nothing(tmp_path: Path) -> None:
    tree = _tree(tmp_path)
    pkg = tree / reflect2_fix.REFLECT2_DIR
    (pkg / "unsafe_map.go").write_text("package reflect2\n// v1.0.3, say\n")
    with pytest.raises(reflect2_fix.Reflect2FixError, match=r"unsafe_map\.go"):
        reflect2_fix.apply(tree)
    assert (pkg / "unsafe_link.go").read_text() == V101_LINK
    assert not (pkg / "go_above_118.go").exists()


def test_run_echoes_the_build_steps_and_logs_everything(tmp_path: Path) -> None:
    script = (
        "echo '+++ [1129 16:46:02] Building go targets for linux/amd64:'; "
        "echo '    cmd/kube-apiserver'; echo 'noise'; echo '    indented noise'"
    )
    seen: list[str] = []
    build._run(["bash", "-c", script], tmp_path / "log", "step", echo=seen.append)
    assert seen == ["  Building go targets for linux/amd64:", "    cmd/kube-apiserver"]
    assert "indented noise" in (tmp_path / "log").read_text()


def test_a_failed_step_names_itself_its_exit_code_and_its_log(tmp_path: Path) -> None:
    with pytest.raises(build.BuildError, match=r"the step failed \(exit 3\)") as err:
        build._run(["bash", "-c", "echo boom; exit 3"], tmp_path / "log", "the step")
    assert str(tmp_path / "log") in str(err.value) and "boom" in str(err.value)
