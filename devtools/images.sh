#!/usr/bin/env bash
# Build (and with PUSH=1 push) the two images of ascend-pd with the container engine at hand:
#   $REGISTRY/ascend-pd-operator:$TAG   from operator/Dockerfile
#   $REGISTRY/ascend-pd-runtime:$RUNTIME_TAG   from runtime/Dockerfile on $BASE_IMAGE
# `make images` runs it from the repository root. Settings (environment variables):
#   REGISTRY        required: where the images go, e.g. registry.example.com/llm
#   TAG             default: the project version in pyproject.toml
#   RUNTIME_TAG     default: $TAG (give A2 and A3 builds different tags, e.g. 0.1.0-a3)
#   BASE_IMAGE      required for the runtime image: an SGLang Ascend image
#   SGLANG_VERSION  required for the runtime image: the SGLang version BASE_IMAGE carries
#   ONLY            operator or runtime: build just that one
#   ENGINE          docker, podman or buildah (default: the first of them found on PATH)
#   PUSH            1: push each image after building it
#   DRY_RUN         1: print the commands instead of running them
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
if ! command -v "$engine" >/dev/null 2>&1; then
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
if [[ -z "${REGISTRY:-}" ]]; then
    echo "error: set REGISTRY, e.g. REGISTRY=registry.example.com/llm" >&2
    exit 1
fi
registry="${REGISTRY%/}"
tag="${TAG:-$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -n 1)}"
runtime_tag="${RUNTIME_TAG:-$tag}"
if [[ "$only" != operator ]]; then
    if [[ -z "${BASE_IMAGE:-}" || -z "${SGLANG_VERSION:-}" ]]; then
        echo "error: the runtime image needs BASE_IMAGE (an SGLang Ascend image) and" \
            "SGLANG_VERSION (the SGLang it carries); or ONLY=operator" >&2
        exit 1
    fi
fi

run() {
    echo "+ $*"
    if [[ "${DRY_RUN:-}" != 1 ]]; then
        "$@"
    fi
}

# build <Dockerfile> <image> [build args...]
build() {
    local dockerfile="$1" image="$2"
    shift 2
    case "$engine" in
        # BuildKit reads <Dockerfile>.dockerignore and runs RUN --mount
        docker) run env DOCKER_BUILDKIT=1 docker build -f "$dockerfile" -t "$image" "$@" . ;;
        podman) run podman build -f "$dockerfile" --ignorefile "$dockerfile.dockerignore" \
            -t "$image" "$@" . ;;
        buildah) run buildah build -f "$dockerfile" --ignorefile "$dockerfile.dockerignore" \
            -t "$image" "$@" . ;;
    esac
    if [[ "${PUSH:-}" == 1 ]]; then
        run "$engine" push "$image"
    fi
}

if [[ "$only" != runtime ]]; then
    build operator/Dockerfile "$registry/ascend-pd-operator:$tag"
fi
if [[ "$only" != operator ]]; then
    build runtime/Dockerfile "$registry/ascend-pd-runtime:$runtime_tag" \
        --build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg "SGLANG_VERSION=$SGLANG_VERSION"
fi
