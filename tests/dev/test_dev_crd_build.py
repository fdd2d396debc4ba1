"""The pure parts of the CRD server's build and run: the Go package closure from a Packages
index, the private sid source list, the version stamp, the server's command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from ascend_pd_dev.controlplane import apt, cluster, crd_build, crd_server

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


INDEX = """\
Package: golang-k8s-apiextensions-apiserver-dev
Version: 0.36.4-1
Depends: golang-k8s-apiserver-dev (>= 0.36), golang-github-spf13-cobra-dev,
 golang-yaml-virtual | golang-gopkg-yaml.v3-dev, golang-go:any, libc6 (>= 2.34)

Package: golang-k8s-apiserver-dev
Version: 0.36.4-1
Depends: golang-k8s-apimachinery-dev [amd64], golang-github-spf13-cobra-dev

Package: golang-k8s-apimachinery-dev
Version: 0.36.4-1

Package: golang-k8s-apimachinery-dev
Version: 0.35.0-1

Package: golang-github-spf13-cobra-dev
Version: 1.10.1-1
Depends: golang-github-spf13-pflag-dev

Package: golang-spf13-pflag-provider-dev
Version: 1.0.6-1
Provides: golang-github-spf13-pflag-dev

Package: golang-gopkg-yaml.v3-dev
Version: 3.0.1-3

Package: golang-go
Version: 2:1.24~2

Package: golang-unrelated-dev
Version: 1.0-1
"""


def test_only_this_releases_archive_entries_are_read() -> None:
    sources = apt.parse_apt_sources(ONE_LINE, DEB822, "bookworm")
    assert [(s.uri, s.suite) for s in sources] == [
        ("http://other.example/debian", "bookworm"),
        ("http://mirror.example/debian", "bookworm"),
        ("http://mirror.example/debian", "bookworm-updates"),
        ("http://mirror.example/debian-security", "bookworm-security"),
    ]
    assert sources[0].signed_by == "/k.gpg"


def test_private_apt_options_never_point_at_the_system_lists(tmp_path: Path) -> None:
    options = apt.private_apt_options(tmp_path)
    values = [o for o in options if o != "-o"]
    for key in ("Dir::Etc::SourceList", "Dir::Etc::SourceParts", "Dir::State::Lists", "Dir::Cache"):
        (entry,) = [v for v in values if v.startswith(key + "=")]
        assert entry.split("=", 1)[1].startswith(str(tmp_path))


def test_the_closure_follows_go_library_depends_only() -> None:
    index = crd_build.parse_packages(INDEX)
    closure = crd_build.go_closure(index, crd_build.ROOT_PACKAGE)
    names = [p.name for p in closure]
    assert names == sorted([
        "golang-k8s-apiextensions-apiserver-dev",
        "golang-k8s-apiserver-dev",
        "golang-k8s-apimachinery-dev",
        "golang-github-spf13-cobra-dev",
        "golang-spf13-pflag-provider-dev",  # through Provides
        "golang-gopkg-yaml.v3-dev",  # the first alternative the index can satisfy
    ])  # fmt: skip
    # the highest version of a package listed twice; the toolchain and C libraries not followed
    assert {p.name: p.version for p in closure}["golang-k8s-apimachinery-dev"] == "0.36.4-1"


def test_a_missing_root_names_it() -> None:
    with pytest.raises(crd_build.BuildError, match="golang-k8s-apiextensions-apiserver-dev"):
        crd_build.go_closure({}, crd_build.ROOT_PACKAGE)


def test_the_sid_list_reuses_the_system_mirror_and_keyring() -> None:
    sources = [
        apt.AptSource("http://deb.debian.org/debian-security", "bookworm-security", ("main",),
                        "/usr/share/keyrings/debian-archive-keyring.gpg"),
        apt.AptSource("http://deb.debian.org/debian", "bookworm", ("main",),
                        "/usr/share/keyrings/debian-archive-keyring.gpg"),
    ]  # fmt: skip
    assert crd_build.sid_source_list(sources) == (
        "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
        "http://deb.debian.org/debian sid main\n"
    )
    with pytest.raises(crd_build.BuildError):
        crd_build.sid_source_list(sources[:1])


def test_the_version_stamp() -> None:
    assert crd_build.kube_version("0.36.4-1") == "v1.36.4"
    assert crd_build.kube_version("0.35.0~rc1-2") == "v1.35.0"
    flags = crd_build.version_ldflags("v1.36.4")
    assert "-X k8s.io/component-base/version.gitVersion=v1.36.4" in flags
    assert "-X k8s.io/component-base/version.gitMinor=36" in flags
    with pytest.raises(crd_build.BuildError):
        crd_build.kube_version("1.2.3")


def test_the_go_build_is_offline_and_in_gopath_mode() -> None:
    env = crd_build.build_environment(
        {"PATH": "/usr/bin", "GOFLAGS": "-mod=vendor", "GOPATH": "/elsewhere"},
        Path("/g/go"), Path("/src"), Path("/cache"),
    )  # fmt: skip
    assert env["GO111MODULE"] == "off"
    assert env["GOPROXY"] == "off"
    assert env["GOTOOLCHAIN"] == "local"
    assert env["CGO_ENABLED"] == "0"
    assert env["GOPATH"] == "/src"
    assert env["GOFLAGS"] == ""
    assert env["PATH"].startswith("/g/go/bin:")


def test_the_main_source_ships_with_the_package() -> None:
    text = crd_build.MAIN_SOURCE.read_text()
    assert "EnableDiscovery = true" in text
    assert "OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig" in text


def test_the_server_command_line() -> None:
    argv = crd_server.server_argv(Path("/b/srv"), Path("/s"), cluster.Ports(1, 2, 3))
    assert "--etcd-servers=http://127.0.0.1:1" in argv
    assert "--secure-port=3" in argv
    assert "--bind-address=127.0.0.1" in argv
    assert "--authentication-skip-lookup" in argv
    assert "--enable-priority-and-fairness=false" in argv
    disabled = next(a for a in argv if a.startswith("--disable-admission-plugins="))
    assert "NamespaceLifecycle" in disabled
    assert "ValidatingAdmissionWebhook" in disabled
    # every delegation and the core client point at nothing
    for flag in ("--authentication-kubeconfig", "--authorization-kubeconfig", "--kubeconfig"):
        assert f"{flag}=/s/delegation.kubeconfig" in argv
    assert crd_server.delegation_kubeconfig()["clusters"][0]["cluster"]["server"] == (
        crd_server.NOWHERE
    )
