"""The Go 1.18 fix for the vendored ``github.com/modern-go/reflect2`` v1.0.1 in Kubernetes 1.20.

reflect2 v1.0.1 reaches into the Go runtime with ``//go:linkname``: it declares
``reflect.mapiterinit`` as returning a freshly allocated ``*hiter`` and models ``hiter`` as
just its first two fields. Go 1.18 changed that runtime function to fill an iterator the
caller passes in, so the old declaration reads garbage and kube-apiserver dies on its first
custom-resource write (json-iterator iterates maps through reflect2). reflect2 v1.0.2 fixed it
by splitting the declaration by Go version and declaring the whole iterator struct; this module
applies the same change to the vendored copy, as a pure text transform that refuses any input
it does not recognise (so a changed source package fails loudly instead of building wrong).
"""

from __future__ import annotations

from pathlib import Path

#: the vendored package, relative to the Kubernetes source tree
REFLECT2_DIR = Path("vendor/github.com/modern-go/reflect2")


class Reflect2FixError(RuntimeError):
    """The vendored reflect2 is not the v1.0.1 text this fix expects."""


_OLD_MAPITERINIT = """// m escapes into the return value, but the caller of mapiterinit
// doesn't let the return value escape.
//go:noescape
//go:linkname mapiterinit reflect.mapiterinit
func mapiterinit(rtype unsafe.Pointer, m unsafe.Pointer) *hiter
"""

_OLD_HITER = (
    "type hiter struct {\n"
    "\tkey   unsafe.Pointer // Must be in first position.  Write nil to indicate iteration end"
    " (see cmd/internal/gc/range.go).\n"
    "\tvalue unsafe.Pointer // Must be in second position (see cmd/internal/gc/range.go).\n"
    "\t// rest fields are ignored\n"
    "}\n"
)

# The runtime writes the whole iterator, so the struct must be at least as large as the
# runtime's own (Go 1.18-1.21 layout); only key and value are read here.
_NEW_HITER = """type hiter struct {
	key         unsafe.Pointer // Must be in first position.  Write nil to indicate iteration end.
	value       unsafe.Pointer // Must be in second position.
	t           unsafe.Pointer
	h           unsafe.Pointer
	buckets     unsafe.Pointer
	bptr        unsafe.Pointer
	overflow    *[]unsafe.Pointer
	oldoverflow *[]unsafe.Pointer
	startBucket uintptr
	offset      uint8
	wrapped     bool
	B           uint8
	i           uint8
	bucket      uintptr
	checkBucket uintptr
}
"""

_OLD_UNSAFE_ITERATE = """func (type2 *UnsafeMapType) UnsafeIterate(obj unsafe.Pointer) MapIterator {
	return &UnsafeMapIterator{
		hiter:      mapiterinit(type2.rtype, *(*unsafe.Pointer)(obj)),
		pKeyRType:  type2.pKeyRType,
		pElemRType: type2.pElemRType,
	}
}
"""

#: new files: before Go 1.18 the runtime allocates the iterator, from 1.18 the caller does
NEW_FILES: dict[str, str] = {
    "go_below_118.go": """//go:build !go1.18
// +build !go1.18

package reflect2

import "unsafe"

// Before Go 1.18 reflect.mapiterinit allocates and returns the iterator.
//
//go:noescape
//go:linkname mapiterinit reflect.mapiterinit
func mapiterinit(rtype unsafe.Pointer, m unsafe.Pointer) *hiter

func (type2 *UnsafeMapType) UnsafeIterate(obj unsafe.Pointer) MapIterator {
	return &UnsafeMapIterator{
		hiter:      mapiterinit(type2.rtype, *(*unsafe.Pointer)(obj)),
		pKeyRType:  type2.pKeyRType,
		pElemRType: type2.pElemRType,
	}
}
""",
    "go_above_118.go": """//go:build go1.18
// +build go1.18

package reflect2

import "unsafe"

// From Go 1.18 reflect.mapiterinit fills an iterator owned by the caller.
//
//go:noescape
//go:linkname mapiterinit reflect.mapiterinit
func mapiterinit(rtype unsafe.Pointer, m unsafe.Pointer, it *hiter)

func (type2 *UnsafeMapType) UnsafeIterate(obj unsafe.Pointer) MapIterator {
	var it hiter
	mapiterinit(type2.rtype, *(*unsafe.Pointer)(obj), &it)
	return &UnsafeMapIterator{
		hiter:      &it,
		pKeyRType:  type2.pKeyRType,
		pElemRType: type2.pElemRType,
	}
}
""",
}


def _replace_once(text: str, old: str, new: str, file: str) -> str:
    count = text.count(old)
    if count != 1:
        raise Reflect2FixError(
            f"{REFLECT2_DIR / file}: expected the reflect2 v1.0.1 text exactly once, "
            f"found it {count} times; the source package changed, review the fix"
        )
    return text.replace(old, new)


def fix_unsafe_link(text: str) -> str:
    """``unsafe_link.go``: drop the version-dependent declaration, declare the full iterator."""
    text = _replace_once(text, _OLD_MAPITERINIT, "", "unsafe_link.go")
    return _replace_once(text, _OLD_HITER, _NEW_HITER, "unsafe_link.go")


def fix_unsafe_map(text: str) -> str:
    """``unsafe_map.go``: ``UnsafeIterate`` moves to the per-version files."""
    return _replace_once(text, _OLD_UNSAFE_ITERATE, "", "unsafe_map.go")


def is_fixed(tree: Path) -> bool:
    return all((tree / REFLECT2_DIR / name).is_file() for name in NEW_FILES)


def apply(tree: Path) -> None:
    """Apply the fix to a Kubernetes source tree in place (a no-op when already applied)."""
    if is_fixed(tree):
        return
    pkg = tree / REFLECT2_DIR
    link = pkg / "unsafe_link.go"
    umap = pkg / "unsafe_map.go"
    # compute every new text before writing anything, so a mismatch leaves the tree untouched
    new_link = fix_unsafe_link(link.read_text())
    new_map = fix_unsafe_map(umap.read_text())
    link.write_text(new_link)
    umap.write_text(new_map)
    for name, body in NEW_FILES.items():
        (pkg / name).write_text(body)
