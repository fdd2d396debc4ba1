"""The system's Debian archive entries, read (never changed) for a private apt state.

The Prometheus install (``prometheus``) downloads Debian packages through apt with a
configuration of its own (their own source list, index
and cache under their cache directory), on the mirrors and keyrings the system's own entries
name: these read those entries and make the options that keep apt off the system's state.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ascend_pd_dev.controlplane.build import BuildError


@dataclass(frozen=True)
class AptSource:
    """One Debian archive entry of the system's apt configuration."""

    uri: str
    suite: str
    components: tuple[str, ...]
    signed_by: str | None


def parse_apt_sources(one_line: str, deb822: str, codename: str) -> list[AptSource]:
    """The binary Debian archive entries for ``codename`` (and its -updates/-security suites).

    ``one_line`` is the text of ``sources.list`` files, ``deb822`` of ``*.sources`` files.
    Only entries whose suite belongs to ``codename`` are kept, so third-party repositories
    (with their own suite names) never reach the private source list.
    """
    found: list[AptSource] = []

    def keep(uri: str, suite: str, components: list[str], signed_by: str | None) -> None:
        if suite == codename or suite.startswith(codename + "-"):
            source = AptSource(uri.rstrip("/"), suite, tuple(components), signed_by)
            if source not in found:
                found.append(source)

    for raw in one_line.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line.startswith("deb "):
            continue
        words = line.split()[1:]
        options: dict[str, str] = {}
        if words and words[0].startswith("["):
            opts: list[str] = []
            while words:
                word = words.pop(0)
                opts.append(word.strip("[]"))
                if word.endswith("]"):
                    break
            options = dict(o.split("=", 1) for o in opts if "=" in o)
        if len(words) >= 3:
            keep(words[0], words[1], words[2:], options.get("signed-by"))

    for stanza in re.split(r"\n\s*\n", deb822):
        fields: dict[str, str] = {}
        for raw in stanza.splitlines():
            if raw.lstrip().startswith("#") or ":" not in raw or raw[:1].isspace():
                continue
            key, value = raw.split(":", 1)
            fields[key.strip().lower()] = value.strip()
        if "deb" not in fields.get("types", "").split():
            continue
        if fields.get("enabled", "yes").lower() == "no":
            continue
        for uri in fields.get("uris", "").split():
            for suite in fields.get("suites", "").split():
                keep(uri, suite, fields.get("components", "").split(), fields.get("signed-by"))
    return found


def system_codename() -> str:
    for line in Path("/etc/os-release").read_text().splitlines():
        if line.startswith("VERSION_CODENAME="):
            return line.split("=", 1)[1].strip().strip('"')
    raise BuildError("/etc/os-release has no VERSION_CODENAME; a Debian system is required")


def system_apt_sources() -> list[AptSource]:
    etc = Path("/etc/apt")
    one_line = [etc / "sources.list", *sorted((etc / "sources.list.d").glob("*.list"))]
    deb822 = sorted((etc / "sources.list.d").glob("*.sources"))
    return parse_apt_sources(
        "\n".join(p.read_text() for p in one_line if p.is_file()),
        "\n\n".join(p.read_text() for p in deb822 if p.is_file()),
        system_codename(),
    )


def private_apt_options(apt_dir: Path) -> list[str]:
    """apt options that read only our list and keep index and downloads under ``apt_dir``."""
    return [
        "-o",
        f"Dir::Etc::SourceList={apt_dir / 'sources.list'}",
        "-o",
        f"Dir::Etc::SourceParts={apt_dir / 'sources.list.d'}",
        "-o",
        f"Dir::State::Lists={apt_dir / 'lists'}",
        "-o",
        f"Dir::Cache={apt_dir / 'cache'}",
        # the download directory belongs to root, not to apt's sandbox user
        "-o",
        "APT::Sandbox::User=root",
    ]
