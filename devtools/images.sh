#!/usr/bin/env bash
# Build (and with PUSH=1 push) the two images of ascend-pd with the container engine at hand:
#   $REGISTRY/ascend-pd-operator:$TAG   from operator/Dockerfile
#   $REGISTRY/ascend-pd-runtime:$RUNTIME_TAG   from runtime/Dockerfile on $BASE_IMAGE
# `make images` runs it from the repository root. Settings (environment variables):
#   REGISTRY        required: where the images go, e.g. registry.example.com/llm
#   TAG             default: the project version in pyproject.toml
#   RUNTIME_TAG     default: $TAG, or $TAG-$CHIP with CHIP (A2 and A3 builds get different tags)
#   SGLANG_VERSION  required for the runtime image: the SGLang version its base image carries
#   CHIP            a2 (Atlas 800I A2, 8 NPUs per node) or a3 (Atlas 800I/900 A3, 16 NPUs per
#                   node): with SGLANG_VERSION, picks the base image from devtools/base-images.txt
#   BASE_IMAGE      an SGLang Ascend image to build the runtime image on; overrides the table
#                   (needed for a release or chip the table does not know)
#   ONLY            operator or runtime: build just that one
#   RUNTIME_PLATFORM   default linux/arm64: the runtime image's platforms (Atlas A2/A3
#                   servers are Kunpeng, arm64, and SGLang builds its Ascend images for it)
#   OPERATOR_PLATFORM  default linux/amd64,linux/arm64: the operator runs on any node
#   PLATFORM        both images' platforms at once (overrides the two above); a list
#                   (os/arch,os/arch) makes a multi-platform image, a manifest list
#   ENGINE          docker (with buildx), podman or buildah (default: the first found on PATH)
#   PUSH            1: push each image after building it
#   DRY_RUN         1: print the commands instead of running them (with ENGINE set, the
#                   engine need not be installed)
# A platform other than the build machine's needs QEMU (binfmt_misc) for the RUN steps; a
# multi-platform build with docker needs a buildx builder that can make one (the
# docker-container driver: `docker buildx create --use`) and, without PUSH=1, is built but
# not kept: docker's image store takes one platform.
set -euo pipefail

engines=(docker podman buildah)
engine="${ENGINE:-}"
if [[ -z "$engine" ]]; then
    for candidate in "${engines[@]}"; do
        if command -v "$candidate" >/dev/null 2>&1; then
            engine="$candidate"
            break
        fi
    done
fi
if [[ -z "$engine" ]]; then
    echo "error: no container engine found on PATH (looked for ${engines[*]});" \
        "install one or set ENGINE to its name" >&2
    exit 1
fi
case "$engine" in
    docker | podman | buildah) ;;
    *)
        echo "error: ENGINE=$engine: use docker, podman or buildah" >&2
        exit 1
        ;;
esac
dry_run="${DRY_RUN:-}"
if [[ "$dry_run" != 1 ]] && ! command -v "$engine" >/dev/null 2>&1; then
    echo "error: ENGINE=$engine is not on PATH" >&2
    exit 1
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
only="${ONLY:-}"
if [[ -n "$only" && "$only" != operator && "$only" != runtime ]]; then
    echo "error: ONLY=$only: use operator or runtime" >&2
    exit 1
fi
chip="${CHIP:-}"
if [[ -n "$chip" && "$chip" != a2 && "$chip" != a3 ]]; then
    echo "error: CHIP=$chip: use a2 (Atlas 800I A2, 8 NPUs per node) or a3 (Atlas 800I/900 A3," \
        "16 NPUs per node)" >&2
    exit 1
fi
# platforms <setting> <default>: the setting's value (PLATFORM's when set), refused unless a
# comma-separated list of os/arch[/variant]; echoes "<setting> <value>"
platforms() {
    local setting="$1" value part
    local -a parts
    if [[ -n "${PLATFORM+set}" ]]; then
        setting=PLATFORM
    fi
    value="${!setting-$2}"
    IFS=, read -r -a parts <<<"$value,"
    if [[ -z "$value" || "$value" == *,,* || "$value" == ,* || "$value" == *, ]]; then
        parts=("")
    fi
    for part in "${parts[@]}"; do
        if [[ ! "$part" =~ ^[a-z0-9]+/[a-z0-9_]+(/[a-z0-9]+)?$ ]]; then
            echo "error: $setting=$value: give platforms as os/arch[/variant]," \
                "comma-separated, e.g. linux/arm64 or linux/amd64,linux/arm64" >&2
            return 1
        fi
    done
    echo "$setting $value"
}
operator_platform="" runtime_platform=""
if [[ "$only" != runtime ]]; then
    operator_platform="$(platforms OPERATOR_PLATFORM linux/amd64,linux/arm64)"
fi
if [[ "$only" != operator ]]; then
    runtime_platform="$(platforms RUNTIME_PLATFORM linux/arm64)"
fi
if [[ -z "${REGISTRY:-}" ]]; then
    echo "error: set REGISTRY, e.g. REGISTRY=registry.example.com/llm" >&2
    exit 1
fi
registry="${REGISTRY%/}"
tag="${TAG:-$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -n 1)}"
runtime_tag="${RUNTIME_TAG:-$tag${chip:+-$chip}}"
table=devtools/base-images.txt

# base_image <sglang version> <chip>: the table's image for them (nothing if it has none)
base_image() {
    local version row_chip image
    while read -r version row_chip image _; do
        if [[ "$version" != \#* && "$version" == "$1" && "$row_chip" == "$2" ]]; then
            echo "$image"
            return
        fi
    done < "$table"
}

# known_versions <chip>: the SGLang versions the table has an image of for that chip
known_versions() {
    local version row_chip known=""
    while read -r version row_chip _; do
        if [[ "$version" != \#* && "$row_chip" == "$1" ]]; then
            known="$known${known:+, }$version"
        fi
    done < "$table"
    echo "$known"
}

base="${BASE_IMAGE:-}"
if [[ "$only" != operator ]]; then
    if [[ -z "${SGLANG_VERSION:-}" || (-z "$base" && -z "$chip") ]]; then
        echo "error: the runtime image needs SGLANG_VERSION (the SGLang its base image" \
            "carries) and CHIP (a2 or a3) to pick its base from $table, or BASE_IMAGE (an" \
            "SGLang Ascend image) and SGLANG_VERSION; or ONLY=operator" >&2
        exit 1
    fi
    if [[ -z "$base" ]]; then
        base="$(base_image "$SGLANG_VERSION" "$chip")"
        if [[ -z "$base" ]]; then
            echo "error: $table has no base image for SGLang $SGLANG_VERSION on $chip (it" \
                "knows $(known_versions "$chip")); set BASE_IMAGE to an SGLang Ascend image" \
                "carrying SGLang $SGLANG_VERSION for $chip" >&2
            exit 1
        fi
        echo "base image for SGLang $SGLANG_VERSION on $chip ($table): $base"
    fi
fi

run() {
    echo "+ $*"
    if [[ "$dry_run" != 1 ]]; then
        "$@"
    fi
}

# drop_manifest <image>: remove a manifest list of that name, so that a build adds to a new
# one instead of the last build's (podman and buildah add to an existing list)
drop_manifest() {
    echo "+ $engine manifest exists $1 && $engine manifest rm $1"
    if [[ "$dry_run" != 1 ]] && "$engine" manifest exists "$1"; then
        "$engine" manifest rm "$1" >/dev/null
    fi
}

# build <Dockerfile> <image> "<setting> <platforms>" [build args...]: one platform makes an
# image, a list of them a manifest list (an image index) holding one image per platform
build() {
    local dockerfile="$1" image="$2" setting="${3% *}" platform="${3#* }"
    shift 3
    local -a ignore=(--ignorefile "$dockerfile.dockerignore")
    echo "$image for $platform"
    if [[ "$platform" != *,* ]]; then
        case "$engine" in
            # BuildKit (buildx) reads <Dockerfile>.dockerignore and runs RUN --mount
            docker) run docker buildx build --platform "$platform" -f "$dockerfile" \
                -t "$image" --load "$@" . ;;
            podman | buildah) run "$engine" build --platform "$platform" -f "$dockerfile" \
                "${ignore[@]}" -t "$image" "$@" . ;;
        esac
        if [[ "${PUSH:-}" == 1 ]]; then
            run "$engine" push "$image"
        fi
        return
    fi
    case "$engine" in
        docker)
            if [[ "${PUSH:-}" == 1 ]]; then
                run docker buildx build --platform "$platform" -f "$dockerfile" -t "$image" \
                    --push "$@" .
            else
                run docker buildx build --platform "$platform" -f "$dockerfile" -t "$image" \
                    "$@" .
                echo "note: $image for $platform is built but not kept (docker's image" \
                    "store holds one platform): add PUSH=1 to push it, or set one platform" \
                    "($setting=${platform%%,*}) to load it"
            fi
            ;;
        podman | buildah)
            drop_manifest "$image"
            run "$engine" build --platform "$platform" -f "$dockerfile" "${ignore[@]}" \
                --manifest "$image" "$@" .
            if [[ "${PUSH:-}" == 1 ]]; then
                run "$engine" manifest push --all "$image" "docker://$image"
            fi
            ;;
    esac
}

if [[ "$only" != runtime ]]; then
    build operator/Dockerfile "$registry/ascend-pd-operator:$tag" "$operator_platform"
fi
if [[ "$only" != operator ]]; then
    build runtime/Dockerfile "$registry/ascend-pd-runtime:$runtime_tag" "$runtime_platform" \
        --build-arg "BASE_IMAGE=$base" --build-arg "SGLANG_VERSION=$SGLANG_VERSION"
fi
