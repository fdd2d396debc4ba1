"""``ascend-pd-runtime launch``: the serving container's entrypoint.

It turns the operator's env contract (``env_contract``) into an SGLang command
line, but only after checking that the image's SGLang is the version the spec names (the
operator computed the KV layout for that version: ``sglang_version``) and, with the layout
core, that the model it finds
at ``<model path>/config.json`` gives the same KV layout the operator computed
(the mounted ``<name>-kv-layout`` plan). A difference means a wrong model on
one side or a stale ConfigMap: the pod exits naming both values rather than
serving KV into the wrong layers. Then it asks the installed SGLang's own parser
whether it accepts the command (``sglang_args``): SGLang's flags drift between
releases and ``extraArgs`` are free text, and a refusal should end the pod at once,
not after the model started loading. Then it runs the NPU preflight (``preflight``: the
devices, hccn.conf, the links, the leader and the store), and execs SGLang so signals reach it.

Exit codes (``env_contract.LAUNCHER_EXITS``; the operator shows each in the status): 1 bad
input (the env contract or the kv-layout file), 3 the KV layout differs from the operator's,
4 the leader or store host did not resolve, 5 SGLang's parser refused the command line, 6 the
pod's env contract version is not one this launcher speaks (checked first), 7 an NPU
preflight check failed, 8 the image's SGLang is not the spec's version (checked second). Every
failure
is also written as the container's termination message (``TERMINATION_LOG``), so
``kubectl describe pod`` and the PDDeployment's status show it.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import env_contract, sglang_args
from .env_contract import (
    EXIT_ARGS_REFUSED,
    EXIT_BAD_INPUT,
    EXIT_CONTRACT_VERSION,
    EXIT_LAYOUT_MISMATCH,
    EXIT_PREFLIGHT,
    EXIT_SGLANG_VERSION,
    EXIT_UNRESOLVED,
    LaunchEnv,
    read_launch_env,
)
from .errors import BadInput, ContractMismatch, LayoutMismatch, SGLangVersionMismatch
from .layout import KVLayout, StageLayout, compute_layout
from .model_facts import load_model_facts
from .partition import format_partition
from .plan import plan_document
from .preflight import PreflightFailed, Targets, run_preflight, split_address
from .sglang_version import check_installed

#: A termination message is at most 4096 bytes; kubelet truncates the rest.
TERMINATION_MESSAGE_LIMIT = 4096
#: The arguments of ``python -m sglang.launch_server`` start after these three.
SERVER_ARGS_START = 3

Resolver = Callable[[str], str]


@dataclass(frozen=True)
class Launch:
    """What the launcher would exec: argv, the environment it adds, and a summary."""

    argv: list[str]
    env: dict[str, str]
    summary: str
    #: The user's extraArgs, the tail of ``argv``.
    extra_args: tuple[str, ...] = ()
    sglang_version: str = ""
    role: str = ""
    #: The contract as read, and the resolved addresses the preflight tries (None: the
    #: launch was built by hand, no preflight).
    contract: LaunchEnv | None = None
    targets: Targets = field(default_factory=Targets)

    @property
    def server_args(self) -> list[str]:
        """What ``sglang.launch_server`` parses."""
        return self.argv[SERVER_ARGS_START:]

    def as_json(self) -> dict[str, Any]:
        return {"command": self.argv, "env": self.env, "summary": self.summary}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the command and environment as JSON (checks neither SGLang nor the node)",
    )
    parser.add_argument(
        "--resolve-timeout",
        type=float,
        default=600.0,
        help="seconds to wait for the leader and store hosts to resolve (600)",
    )
    parser.add_argument("--python", default=sys.executable, help="python that runs SGLang")
    parser.add_argument(
        "--check",
        action="store_true",
        help="plan and check the command with SGLang's parser, then exit (0: accepted)",
    )
    parser.add_argument(
        "--no-parser-check",
        action="store_true",
        help="exec without asking SGLang's parser first",
    )
    parser.add_argument(
        "--no-preflight",
        action="store_true",
        help="skip the NPU preflight checks (devices, hccn.conf, links, leader, store)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        if not args.dry_run:  # a dry run prints what would run, and runs nothing
            # Before the layout, the parser and the preflight: each of them assumes this
            # SGLang, and a layout for another version is what this project must never run.
            spec = read_launch_env(os.environ).sglang_version
            installed = check_installed(spec, args.python, os.environ)
            print(f"ascend-pd-runtime: the image's SGLang {installed} follows "
                  f"spec.runtime.sglangVersion {spec}", file=sys.stderr, flush=True)  # fmt: skip
        launch = plan_launch(
            os.environ, resolver=retrying_resolver(args.resolve_timeout), python=args.python
        )
    except ContractMismatch as exc:
        return _fail(EXIT_CONTRACT_VERSION, str(exc))
    except SGLangVersionMismatch as exc:
        return _fail(EXIT_SGLANG_VERSION, str(exc))
    except LayoutMismatch as exc:
        return _fail(EXIT_LAYOUT_MISMATCH, f"KV layout mismatch: {exc}")
    except BadInput as exc:
        return _fail(EXIT_BAD_INPUT, str(exc))
    except TimeoutError as exc:
        return _fail(EXIT_UNRESOLVED, str(exc))
    if args.dry_run:
        print(json.dumps(launch.as_json(), indent=2))
        return 0
    if not args.no_parser_check:
        env = exec_environment(os.environ, launch.env)
        try:
            refusal = parser_refusal(launch, args.python, env)
        except BadInput as exc:
            return _fail(EXIT_BAD_INPUT, str(exc))
        if refusal:
            return _fail(EXIT_ARGS_REFUSED, refusal)
    if launch.contract is not None and not args.no_preflight:
        try:
            report = run_preflight(launch.contract, launch.targets, os.environ)
        except PreflightFailed as exc:
            return _fail(EXIT_PREFLIGHT, exc.message)
        print(f"ascend-pd-runtime: {report.summary()}", file=sys.stderr, flush=True)
    if args.check:
        print("ascend-pd-runtime: SGLang's parser accepts the command", file=sys.stderr)
        return 0
    print(launch.summary, file=sys.stderr, flush=True)
    os.execvpe(launch.argv[0], launch.argv, exec_environment(os.environ, launch.env))
    return 0  # not reached


def exec_environment(environ: Mapping[str, str], exports: Mapping[str, str]) -> dict[str, str]:
    """SGLang's environment: the container's, with the launcher's exports over it, except
    ``HCCL_CONNECT_TIMEOUT`` when the role's env sets it too (the more specific choice
    wins, and stderr says so)."""
    out = {**environ, **exports}
    name = env_contract.HCCL_CONNECT_TIMEOUT
    if name in exports and environ.get(name) and environ[name] != exports[name]:
        print(
            f"ascend-pd-runtime: {name}={environ[name]} from the role's env wins over "
            f"ascend.hcclConnectTimeoutSeconds ({exports[name]})",
            file=sys.stderr,
        )
        out[name] = environ[name]
    return out


def _fail(code: int, message: str) -> int:
    """Report a failure on stderr and as the termination message; return ``code``."""
    print(f"ascend-pd-runtime: {message}", file=sys.stderr, flush=True)
    write_termination_message(os.environ.get(env_contract.TERMINATION_LOG) or "", message)
    return code


def write_termination_message(path: str, message: str) -> None:
    """Best effort: outside a pod the default path may not exist or be writable."""
    path = path or env_contract.DEFAULT_TERMINATION_LOG
    data = message.encode("utf-8")[:TERMINATION_MESSAGE_LIMIT]
    try:
        Path(path).write_bytes(data)
    except OSError as exc:
        print(f"ascend-pd-runtime: cannot write {path}: {exc}", file=sys.stderr)


def run_parser(
    python: str, argv: list[str], report: tuple[str, ...], env: Mapping[str, str]
) -> dict[str, Any]:
    """Run ``sglang_args`` in ``python`` (SGLang's interpreter) on ``argv``; its answer.

    Raises ``BadInput`` when the parser cannot be consulted (SGLang does not import).
    """
    with tempfile.TemporaryDirectory(prefix="ascend-pd-args-") as tmp:
        out = Path(tmp) / "result.json"
        request = json.dumps({"argv": argv, "report": list(report)})
        done = subprocess.run(
            [python, sglang_args.__file__, str(out)],
            input=request,
            env=dict(env),
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0 or not out.exists():
            tail = (done.stderr or done.stdout).strip()[-1500:]
            raise BadInput(
                f"could not ask SGLang's parser about the command ({python} exited "
                f"{done.returncode}): {tail}"
            )
        result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
        return result


def parser_refusal(launch: Launch, python: str, env: Mapping[str, str]) -> str:
    """The termination message when SGLang's parser refuses ``launch``, else ""."""
    result = run_parser(python, launch.server_args, (), env)
    if result.get("ok"):
        return ""
    return refusal_message(launch, str(result.get("error", "")), str(result.get("argument", "")))


def refusal_message(launch: Launch, error: str, argument: str) -> str:
    """Name the offending argument, where it came from, and SGLang's own words."""
    version = f"SGLang {launch.sglang_version}" if launch.sglang_version else "SGLang"
    text = f"{version} refused the command line: {error}"
    if argument:
        if argument in launch.extra_args:
            origin = f"from spec.{launch.role}.extraArgs ({env_contract.EXTRA_ARGS})"
        else:
            origin = "set by the launcher (this SGLang version lacks it)"
        text += f". Offending argument {argument!r}, {origin}"
    return text


def plan_launch(environ: Mapping[str, str], resolver: Resolver, python: str) -> Launch:
    """Everything but the exec: read, check, resolve, build. Pure but for the resolver."""
    env = read_launch_env(environ)
    facts = load_model_facts(Path(env.model_path) / "config.json")
    layout = compute_layout(facts, env.layout_request())
    if layout.problems:
        raise LayoutMismatch("; ".join(layout.problems))
    computed = plan_document(layout, include_transfers=False)
    check_expected_layout(env, computed, read_expected_plan(env.kv_layout_file))
    stages = pod_stages(env, layout)
    leader_host, leader_port = env.dist_init_addr.rsplit(":", 1)
    dist_init = f"{resolver(leader_host)}:{leader_port}"
    extra_env = sglang_environment(env, resolver)
    argv = sglang_command(env, dist_init, python)
    ranges = ", ".join(f"pp{s.pp_rank}[{s.start_layer},{s.end_layer})" for s in stages)
    summary = (
        f"ascend-pd {env.role} instance {env.instance} node {env.node_rank}/{env.nnodes}: "
        f"{facts.architecture} total_kv_layers={facts.total_kv_layers} "
        f"kv_buf_groups={facts.kv_buf_groups} draft={layout_draft(layout, env.role)} "
        f"stages {ranges} fingerprint={computed['fingerprint']} dist-init={dist_init} "
        f"sglang={env.sglang_version}"
    )
    store = extra_env.get(env_contract.MF_STORE_URL)
    targets = Targets(
        leader=None if env.is_leader else split_address(dist_init),
        store=split_address(store) if store else None,
    )
    return Launch(
        argv=argv,
        env=extra_env,
        summary=summary,
        extra_args=env.extra_args,
        sglang_version=env.sglang_version,
        role=env.role,
        contract=env,
        targets=targets,
    )


def read_expected_plan(path: str) -> dict[str, Any]:
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadInput(
            f"{env_contract.KV_LAYOUT_FILE} {path!r}: the operator's KV layout file is missing "
            "(is the <name>-kv-layout ConfigMap mounted?)"
        ) from None
    except (OSError, json.JSONDecodeError) as exc:
        raise BadInput(f"{env_contract.KV_LAYOUT_FILE} {path!r} is unreadable: {exc}") from None
    if not isinstance(doc, dict):
        raise BadInput(f"{env_contract.KV_LAYOUT_FILE} {path!r} is not a JSON object")
    return doc


def check_expected_layout(
    env: LaunchEnv, computed: Mapping[str, Any], expected: Mapping[str, Any]
) -> None:
    """Compare this pod's view with the operator's; raise naming both values on a difference."""
    checks = [
        ("total_kv_layers", computed["total_kv_layers"], expected.get("total_kv_layers")),
        (
            "kv_buf_groups",
            computed["model"]["kv_buf_groups"],
            (expected.get("model") or {}).get("kv_buf_groups"),
        ),
        (
            f"{env_contract.TOTAL_KV_LAYERS} (total_kv_layers)",
            computed["total_kv_layers"],
            env.total_kv_layers,
        ),
        (
            f"{env_contract.KV_BUF_GROUPS} (kv_buf_groups)",
            computed["model"]["kv_buf_groups"],
            env.kv_buf_groups,
        ),
    ]
    for role in ("prefill", "decode"):
        checks.append(
            (
                f"{role} draft_layers",
                computed[role]["draft_layers"],
                (expected.get(role) or {}).get("draft_layers"),
            )
        )
        checks.append(
            (
                f"{role} stages",
                _ranges(computed[role]),
                _ranges(expected.get(role) or {}),
            )
        )
    checks.append(("fingerprint", computed["fingerprint"], expected.get("fingerprint")))
    if env.kv_fingerprint:
        checks.append(
            (f"{env_contract.KV_FINGERPRINT}", computed["fingerprint"], env.kv_fingerprint)
        )
    differences = [
        f"{name}: the model here gives {mine!r}, the operator expects {theirs!r}"
        for name, mine, theirs in checks
        if mine != theirs
    ]
    if differences:
        raise LayoutMismatch(
            f"{env.model_path}/config.json does not match the operator's KV layout "
            f"({env.kv_layout_file}): "
            + "; ".join(differences)
            + ". A different model on one side, or a stale layout ConfigMap."
        )


def _ranges(role: Mapping[str, Any]) -> list[list[int]]:
    return [[s.get("start_layer"), s.get("end_layer")] for s in role.get("stages") or []]


def layout_draft(layout: KVLayout, role: str) -> int:
    return layout.prefill.draft_layers if role == "prefill" else layout.decode.draft_layers


def pod_stages(env: LaunchEnv, layout: KVLayout) -> list[StageLayout]:
    """PP stages whose ranks run on this pod (SGLang orders ranks TP-inner, PP-outer)."""
    role = layout.prefill if env.role == "prefill" else layout.decode
    first = env.node_rank * env.devices_per_node
    ranks = range(first, min(first + env.devices_per_node, env.tp_size * env.pp_size))
    pp_ranks = sorted({rank // env.tp_size for rank in ranks})
    return [role.stages[r] for r in pp_ranks if r < len(role.stages)]


def sglang_command(env: LaunchEnv, dist_init: str, python: str) -> list[str]:
    argv = [
        python, "-m", "sglang.launch_server",
        "--model-path", env.model_path,
        "--disaggregation-mode", env.role,
        "--disaggregation-transfer-backend", env.transfer_backend,
        "--tp-size", str(env.tp_size),
        "--pp-size", str(env.pp_size),
        "--dp-size", str(env.dp_size),
        "--dist-init-addr", dist_init,
        "--nnodes", str(env.nnodes),
        "--node-rank", str(env.node_rank),
        "--host", "0.0.0.0",
        "--port", str(env.port),
        "--device", "npu",
        # Prometheus metrics at /metrics on --port, which the chart's PodMonitor scrapes.
        "--enable-metrics",
    ]  # fmt: skip
    if env.served_model_name:
        argv += ["--served-model-name", env.served_model_name]
    if env.role == "prefill" and env.bootstrap_port is not None:
        argv += ["--disaggregation-bootstrap-port", str(env.bootstrap_port)]
    if env.speculative_here:
        argv += [
            "--speculative-algorithm", env.speculative_algorithm,
            "--speculative-num-steps", str(env.speculative_num_steps),
            "--speculative-eagle-topk", str(env.speculative_eagle_topk),
            "--speculative-num-draft-tokens", str(env.speculative_num_draft_tokens),
        ]  # fmt: skip
    return argv + list(env.extra_args)


def sglang_environment(env: LaunchEnv, resolver: Resolver) -> dict[str, str]:
    out: dict[str, str] = {}
    if env.store_url:
        scheme, _, rest = env.store_url.partition("://")
        host, _, port = rest.rpartition(":")
        out[env_contract.MF_STORE_URL] = f"{scheme}://{resolver(host)}:{port}"
        # Newer memfabric reads this name first; the launcher sets both, so no pod template
        # has to change for it.
        out[env_contract.MF_CONFIG_STORE_URL] = out[env_contract.MF_STORE_URL]
    if env.transfer_protocol:
        out[env_contract.MF_TRANSFER_PROTOCOL] = env.transfer_protocol
    applies_partition = env.role == "prefill" or env.decode_pp == env.prefill_pp
    if env.layer_partition and env.pp_size > 1 and applies_partition:
        out[env_contract.SGLANG_LAYER_PARTITION] = format_partition(env.layer_partition)
    if env.hccl_socket_ifname:
        out[env_contract.HCCL_IFNAME] = env.hccl_socket_ifname
        out[env_contract.GLOO_IFNAME] = env.hccl_socket_ifname
    if env.hccl_connect_timeout is not None:
        out[env_contract.HCCL_CONNECT_TIMEOUT] = str(env.hccl_connect_timeout)
    return out


def retrying_resolver(timeout: float, interval: float = 2.0) -> Resolver:
    """Resolve a host to an IPv4/IPv6 address, retrying until ``timeout`` (pods of a
    StatefulSet get their DNS records only once they are scheduled)."""

    def resolve(host: str) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                return str(socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)[0][4][0])
            except OSError as exc:
                if time.monotonic() >= deadline:
                    raise TimeoutError(
                        f"host {host!r} did not resolve within {timeout:g} s: {exc}"
                    ) from None
                time.sleep(interval)

    return resolve
