"""What an entry of ``spec.ascend.hostMounts`` mounts, and where: decided here once.

An entry names a well-known node path (``vocabulary.HOST_FILES``: its path, hostPath type
and volume) or a path of the user's. The pydantic rules, the workload builder and the CEL
rules (``mount_path_cel``, ``volume_cel``: the same decisions in CEL, tested against these
functions on the same entries) all read an entry through this module.
"""

from __future__ import annotations

from ascend_pd_operator.api.vocabulary import HOST_FILES, HOST_MOUNT_VOLUME_PREFIX

#: The well-known names, in the order the docs list them.
KNOWN_NAMES = tuple(HOST_FILES)
#: The well-known names and their paths, in words (the rules' messages, the API's docs).
WELL_KNOWN = ", ".join(f"{n} ({f.path})" for n, f in HOST_FILES.items())
#: More than SGLang's recipe mounts, and a bound the CEL cost estimate needs (the rules
#: compare every entry with every other and with each role's volumeMounts).
MAX_HOST_MOUNTS = 16
#: A custom name becomes the volume name ``host-<name>``, at most 63 characters.
MAX_CUSTOM_NAME_LENGTH = 63 - len(HOST_MOUNT_VOLUME_PREFIX)
#: A well-known name, or a custom one: a DNS label (the well-known names are not, but
#: ``firmware``, which means the well-known entry).
NAME_PATTERN = "^(" + "|".join(KNOWN_NAMES) + "|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$"
#: The hostPath types an entry may ask for: a read-only mount creates nothing on the node,
#: so none of the *OrCreate types; empty: the well-known entry's type, or no check.
TYPES = ("", "Directory", "File")


def host_path(name: str, given: str) -> str:
    """The node path entry ``name`` mounts: ``given``, else the well-known one ("" when
    neither: a rule refuses such an entry)."""
    known = HOST_FILES.get(name)
    return given or (known.path if known is not None else "")


def mount_path(name: str, host: str, given: str) -> str:
    """Where the container sees it: ``given``, else the node path itself."""
    return given or host_path(name, host)


def path_type(name: str, given: str) -> str:
    """The hostPath type the kubelet checks: ``given``, else the well-known one's."""
    known = HOST_FILES.get(name)
    return given or (known.type if known is not None else "")


def _cel_map(pairs: dict[str, str]) -> str:
    return "{" + ", ".join(f"'{k}': '{v}'" for k, v in pairs.items()) + "}"


_PATHS_CEL = _cel_map({n: f.path for n, f in HOST_FILES.items()})
_VOLUMES_CEL = _cel_map({n: f.volume for n, f in HOST_FILES.items()})


def _given(entry: str, field: str) -> str:
    return f"has({entry}.{field}) && size({entry}.{field}) > 0"


def _lookup(table: str, entry: str, otherwise: str) -> str:
    """``table[entry.name]`` if it has the name, else ``otherwise``: the table literal written
    once (``[table].map(t, ...)[0]`` binds it to ``t``)."""
    return f"[{table}].map(t, {entry}.name in t ? t[{entry}.name] : {otherwise})[0]"


def mount_path_cel(entry: str) -> str:
    """``mount_path`` of the CEL object ``entry`` (an expression), in CEL."""
    return (
        f"({_given(entry, 'mountPath')} ? {entry}.mountPath : {_given(entry, 'hostPath')} ? "
        f"{entry}.hostPath : {_lookup(_PATHS_CEL, entry, repr(''))})"
    )


def volume_cel(entry: str) -> str:
    """``vocabulary.host_mount_volume`` of the CEL object ``entry``, in CEL."""
    return _lookup(_VOLUMES_CEL, entry, f"'{HOST_MOUNT_VOLUME_PREFIX}' + {entry}.name")


def paths_cel(entries: str) -> str:
    """The list of ``mount_path`` of every entry of the CEL list ``entries``."""
    return f"{entries}.map(h, {mount_path_cel('h')})"


def volumes_cel(entries: str) -> str:
    """The list of the volume names of every entry of the CEL list ``entries``."""
    return f"{entries}.map(h, {volume_cel('h')})"
