"""Reading the system's Debian archive entries for a private apt state (``apt``)."""

from __future__ import annotations

from pathlib import Path

from ascend_pd_dev.controlplane import apt

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
