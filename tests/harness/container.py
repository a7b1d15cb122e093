"""The operator image, run the way a kubelet runs the chart's Deployment, with podman.

``hack/image.sh`` builds the image (no-op for unchanged sources). :func:`podman_run_args` turns a
rendered Deployment's container (command, args, env, ports, security contexts, emptyDir mounts)
into ``podman run`` arguments and fails on anything it cannot reproduce faithfully, so a chart
change cannot silently escape the test. The container shares the host's network namespace, where
the local apiserver listens on 127.0.0.1; in-cluster configuration comes as a kubelet provides it:
the ServiceAccount's token, the cluster CA and the namespace mounted at
``/var/run/secrets/kubernetes.io/serviceaccount`` and ``KUBERNETES_SERVICE_HOST``/``_PORT``.

podman runs as these machines allow: runc with cgroupfs (crun refuses a hybrid cgroup layout), and
explicit ulimits no higher than this process's own: podman's defaults (1048576 open files) need
CAP_SYS_RESOURCE, which root lacks in this sandbox.
"""

from __future__ import annotations

import json
import re
import resource
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.harness.cluster import repo_root

PODMAN = ("podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs")
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
_QUANTITY = re.compile(r"^(\d+)(Ki|Mi|Gi|Ti|k|M|G|T)?$")
_UNITS = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_UNITS.update({"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40})


class UnsupportedPodSpec(ValueError):
    """The rendered pod uses something this runner does not reproduce."""


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    res = subprocess.run([*PODMAN, *args], capture_output=True, text=True, timeout=timeout)
    if check and res.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args)} failed ({res.returncode}): {res.stderr.strip()[-2000:]}")
    return res


def container_problem() -> str | None:
    """Why containers cannot run on this machine, or None when they can."""
    for tool in ("podman", "runc"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            return f"{tool} is not installed (Debian: apt-get install podman runc mmdebstrap)"
    try:
        res = podman("info", "--format", "{{.Host.OCIRuntime.Name}}", check=False, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"podman info: {exc}"
    if res.returncode != 0:
        return f"podman info failed: {res.stderr.strip()[-500:]}"
    return None


def build_image(timeout: float = 1800) -> str:
    """Build the operator image with ``hack/image.sh`` (cached by source hash); its reference."""
    res = subprocess.run(
        ["bash", str(repo_root() / "hack" / "image.sh"), "build"],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if res.returncode != 0:
        raise RuntimeError(f"hack/image.sh build failed ({res.returncode}):\n{res.stderr[-4000:]}")
    return res.stdout.strip().splitlines()[-1]


def ulimit_args() -> list[str]:
    """This process's open-file limit and a modest process limit, which need no extra privilege."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[0], 32768)
    return [f"--ulimit=nofile={soft}:{hard}", f"--ulimit=nproc={nproc}:{nproc}"]


def quantity_bytes(value: str) -> int:
    match = _QUANTITY.match(str(value))
    if not match:
        raise UnsupportedPodSpec(f"quantity {value!r}")
    return int(match.group(1)) * _UNITS[match.group(2)]


def write_service_account(directory: Path, token: str, ca_file: Path, namespace: str) -> Path:
    """The files a kubelet projects for a pod's ServiceAccount, readable by any user."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "token").write_text(token)
    shutil.copyfile(ca_file, directory / "ca.crt")
    (directory / "namespace").write_text(namespace)
    for path in (directory, *directory.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return directory


@dataclass(frozen=True)
class PodIdentity:
    """What the kubelet knows about the pod: names for the downward API, where the API server is."""

    pod_name: str
    namespace: str
    service_account_dir: Path
    apiserver_port: int


def podman_run_args(
    deployment: dict[str, Any], pod: PodIdentity, container_name: str, name: str
) -> list[str]:
    """``podman run`` arguments for one container of a rendered Deployment, run like a kubelet would."""
    spec = deployment["spec"]["template"]["spec"]
    (container,) = [c for c in spec["containers"] if c["name"] == container_name]
    args = ["run", "--detach", "--name", name, "--pull=never", "--network=host", *ulimit_args()]
    args += _security_args(spec.get("securityContext") or {}, container.get("securityContext") or {})
    for env in container.get("env") or []:
        args += ["--env", f"{env['name']}={_env_value(env, pod)}"]
    args += [
        "--env", "KUBERNETES_SERVICE_HOST=127.0.0.1",
        "--env", f"KUBERNETES_SERVICE_PORT={pod.apiserver_port}",
    ]  # fmt: skip
    if spec.get("automountServiceAccountToken", True):
        args += ["--volume", f"{pod.service_account_dir}:{SERVICE_ACCOUNT_DIR}:ro"]
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        args += _mount_args(mount, volumes[mount["name"]])
    limits = (container.get("resources") or {}).get("limits") or {}
    if "memory" in limits:
        args += ["--memory", str(quantity_bytes(limits["memory"]))]
    if container.get("command"):
        args += ["--entrypoint", json.dumps(container["command"])]
    args.append(container["image"])
    args += [str(a) for a in container.get("args") or []]
    return args


def _security_args(pod_sc: dict[str, Any], sc: dict[str, Any]) -> list[str]:
    merged = {**pod_sc, **sc}
    user, group = merged.get("runAsUser"), merged.get("runAsGroup")
    if merged.get("runAsNonRoot") and not user:
        raise UnsupportedPodSpec("runAsNonRoot without a numeric runAsUser")
    args = []
    if user is not None:
        args += ["--user", f"{user}:{group if group is not None else user}"]
    if merged.get("readOnlyRootFilesystem"):
        # podman would add tmpfs on /tmp, /run and /var/tmp; a kubelet does not.
        args += ["--read-only", "--read-only-tmpfs=false"]
    if merged.get("privileged"):
        args.append("--privileged")
    if merged.get("allowPrivilegeEscalation") is False:
        args += ["--security-opt", "no-new-privileges"]
    caps = merged.get("capabilities") or {}
    args += [f"--cap-drop={c}" for c in caps.get("drop") or []]
    args += [f"--cap-add={c}" for c in caps.get("add") or []]
    seccomp = (merged.get("seccompProfile") or {}).get("type", "RuntimeDefault")
    if seccomp == "Unconfined":
        args += ["--security-opt", "seccomp=unconfined"]
    elif seccomp != "RuntimeDefault":
        raise UnsupportedPodSpec(f"seccompProfile {seccomp}")
    return args


def _env_value(env: dict[str, Any], pod: PodIdentity) -> str:
    if "value" in env:
        return str(env["value"])
    field = ((env.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
    downward = {"metadata.name": pod.pod_name, "metadata.namespace": pod.namespace}
    if field in downward:
        return downward[field]
    raise UnsupportedPodSpec(f"env {env['name']}: {env.get('valueFrom')}")


def _mount_args(mount: dict[str, Any], volume: dict[str, Any]) -> list[str]:
    if "emptyDir" not in volume or mount.get("readOnly") or mount.get("subPath"):
        raise UnsupportedPodSpec(f"volume {volume['name']}: only writable emptyDir mounts are reproduced")
    options = [f"destination={mount['mountPath']}", "tmpfs-mode=1777"]
    size = (volume["emptyDir"] or {}).get("sizeLimit")
    if size:
        options.append(f"tmpfs-size={quantity_bytes(size)}")
    return ["--mount", "type=tmpfs," + ",".join(options)]


def container_state(name: str) -> dict[str, Any]:
    res = podman("inspect", "--format", "{{json .State}}", name, check=False)
    return dict(json.loads(res.stdout)) if res.returncode == 0 and res.stdout.strip() else {}


def logs_tail(name: str, chars: int = 4000) -> str:
    res = podman("logs", name, check=False)
    return (res.stdout + res.stderr)[-chars:]


def remove(name: str) -> None:
    podman("rm", "--force", "--time", "0", name, check=False)
