"""The Kubernetes manifests (config/kubernetes), offline: every overlay rendered by `kubectl
kustomize`, every object checked against the schemas of the Kubernetes version we support
(kubernetes-validate ships them), then the project's own rules: containers that run as non-root
on a read-only root with requests and limits, the gateway's probes on paths the app serves, only
GATEWAY_* names the gateway reads, a catalog that passes `gateway check-config`'s checks, a grace
period that covers the graceful stop, one Deployment per process kind.

Without kubectl on the machine the tests skip, saying so; under CI (CI=true) they fail instead.
"""

from __future__ import annotations

import base64
import functools
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gateway.cli import build_parser
from gateway.commands.preflight import serving_problem
from gateway.server import serving, writer_process
from gateway.settings import ConfigError, Settings, load_settings, unpriced_deployments

REPO = Path(__file__).resolve().parents[2]
KUBERNETES = REPO / "config" / "kubernetes"
OVERLAYS = ("dev", "production")
# The Kubernetes version whose schemas every object must satisfy (the manifests need 1.30 or
# later, where the preStop `sleep` action is on by default).
KUBERNETES_VERSION = "1.32"
SERVING_COMMAND = ["serve"]
PROCESS_COMMANDS = {"serve", "metering-writer", "job-runner", "migrate"}

QUANTITY_UNITS = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}  # fmt: skip

Manifest = dict[str, Any]


@dataclass(frozen=True)
class Container:
    """A container with the pod spec and the object it belongs to."""

    owner: Manifest
    pod: dict[str, Any]
    spec: dict[str, Any]

    @property
    def where(self) -> str:
        return f"{self.owner['kind']}/{self.owner['metadata']['name']} container {self.spec['name']}"

    def security(self, field: str) -> Any:
        """The container's own setting, else the pod's (as the kubelet resolves it)."""
        own = self.spec.get("securityContext", {})
        return own[field] if field in own else self.pod.get("securityContext", {}).get(field)


def kubectl() -> str:
    found = shutil.which("kubectl")
    if found is None:
        message = "kubectl is not installed: the manifests cannot be rendered (kubectl kustomize)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


@functools.cache
def _render(directory: Path) -> tuple[Manifest, ...]:
    out = subprocess.run(
        [kubectl(), "kustomize", str(directory)], capture_output=True, text=True, check=False, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return tuple(doc for doc in yaml.safe_load_all(out.stdout) if doc)


def rendered(overlay: str) -> tuple[Manifest, ...]:
    return _render(KUBERNETES / "overlays" / overlay)


def named(objects: tuple[Manifest, ...], kind: str, name: str) -> Manifest:
    """The object of `kind` named `name` (a generated one by its name before the hash suffix)."""
    found = [
        o
        for o in objects
        if o["kind"] == kind and re.fullmatch(rf"{re.escape(name)}(-[a-z0-9]{{10}})?", o["metadata"]["name"])
    ]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def containers(objects: tuple[Manifest, ...]) -> Iterator[Container]:
    for owner in objects:
        if owner["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
            pod = owner["spec"]["template"]["spec"]
            for spec in pod.get("initContainers", []) + pod["containers"]:
                yield Container(owner, pod, spec)


def gateway_containers(objects: tuple[Manifest, ...]) -> list[Container]:
    """The containers that run the `gateway` command (by their labels: app.kubernetes.io/name)."""
    return [
        c for c in containers(objects) if c.owner["metadata"]["labels"]["app.kubernetes.io/name"] == "gateway"
    ]


def serving_container(objects: tuple[Manifest, ...]) -> Container:
    [found] = [c for c in gateway_containers(objects) if c.spec["args"] == SERVING_COMMAND]
    return found


def overlay_image(overlay: str) -> str:
    """`newName:newTag` of the overlay's `images:` entry for the image `gateway`."""
    kustomization = yaml.safe_load((KUBERNETES / "overlays" / overlay / "kustomization.yaml").read_text())
    [image] = [i for i in kustomization["images"] if i["name"] == "gateway"]
    return f"{image['newName']}:{image['newTag']}"


def quantity(value: str | int | float) -> float:
    """A Kubernetes resource quantity (`500m`, `2`, `512Mi`, `1G`) as a number."""
    match = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(value))
    assert match is not None and match.group(2) in ("", *QUANTITY_UNITS), f"not a quantity: {value!r}"
    return float(match.group(1)) * QUANTITY_UNITS.get(match.group(2), 1)


def settings_env_names() -> set[str]:
    """The GATEWAY_* variables gateway/settings/environment.py reads (it is the only module that reads any)."""
    return set(
        re.findall(r'"(GATEWAY_[A-Z0-9_]+)"', (REPO / "gateway" / "settings" / "environment.py").read_text())
    )


def secret_values(objects: tuple[Manifest, ...], name: str) -> dict[str, str]:
    """What the Secret `name` holds: the overlay's, or where the overlay expects the Secret to exist
    already, the placeholders of the base's template of it."""
    found = [o for o in objects if o["kind"] == "Secret" and o["metadata"]["name"] == name]
    if not found:
        found = [
            o for o in _render(KUBERNETES / "base") if o["kind"] == "Secret" and o["metadata"]["name"] == name
        ]
    assert len(found) == 1, f"Secret {name}: neither rendered nor templated in the base"
    secret = found[0]
    values = {key: base64.b64decode(value).decode() for key, value in secret.get("data", {}).items()}
    return values | secret.get("stringData", {})


def container_environment(
    objects: tuple[Manifest, ...], container: Container, catalog_dir: Path
) -> dict[str, str]:
    """What the container's process finds in its environment (with the production Secrets'
    placeholders), GATEWAY_CONFIG pointing at a copy of the catalog mounted where it says."""
    env: dict[str, str] = {}
    for source in container.spec.get("envFrom", []):
        if "configMapRef" in source:
            env |= named(objects, "ConfigMap", _base_name(source["configMapRef"]["name"]))["data"]
        else:
            env |= secret_values(objects, source["secretRef"]["name"])
    env |= {e["name"]: e["value"] for e in container.spec.get("env", [])}
    env["GATEWAY_CONFIG"] = str(mounted_catalog(objects, container, env, catalog_dir))
    return env


def process_settings(objects: tuple[Manifest, ...], container: Container, tmp_path: Path) -> Settings:
    """The settings the container's process loads at start (or the failure it would stop with)."""
    try:
        return load_settings(container_environment(objects, container, tmp_path))
    except ConfigError as exc:
        pytest.fail(f"{container.where}: {exc}")


def _base_name(name: str) -> str:
    return re.sub(r"-[a-z0-9]{10}$", "", name)


def mounted_catalog(
    objects: tuple[Manifest, ...], container: Container, env: dict[str, str], into: Path
) -> Path:
    """The file GATEWAY_CONFIG names, taken from the ConfigMap mounted at its folder."""
    config = Path(env["GATEWAY_CONFIG"])
    [mount] = [m for m in container.spec["volumeMounts"] if Path(m["mountPath"]) == config.parent]
    [volume] = [v for v in container.pod["volumes"] if v["name"] == mount["name"]]
    catalog = named(objects, "ConfigMap", _base_name(volume["configMap"]["name"]))
    assert config.name in catalog["data"], f"{container.where}: GATEWAY_CONFIG names no file of the ConfigMap"
    copy = into / config.name
    copy.write_text(catalog["data"][config.name])
    return copy


@pytest.mark.parametrize("directory", ["base", *(f"overlays/{o}" for o in OVERLAYS)])
def test_every_object_is_valid_for_the_supported_kubernetes_version(directory: str) -> None:
    objects = _render(KUBERNETES / directory)
    assert objects
    for manifest in objects:
        where = f"{directory}: {manifest['kind']}/{manifest['metadata']['name']}"
        try:
            kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{where}: {exc.message} at {'.'.join(map(str, exc.path))}")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_runs_as_non_root_on_a_read_only_root(overlay: str) -> None:
    for container in containers(rendered(overlay)):
        assert container.security("runAsNonRoot") is True, container.where
        assert isinstance(container.security("runAsUser"), int), container.where
        assert container.security("runAsUser") > 0, container.where
        assert container.spec["securityContext"]["readOnlyRootFilesystem"] is True, container.where
        assert container.spec["securityContext"]["allowPrivilegeEscalation"] is False, container.where
        assert container.spec["securityContext"]["capabilities"]["drop"] == ["ALL"], container.where
        assert "add" not in container.spec["securityContext"]["capabilities"], container.where
        assert container.security("seccompProfile") == {"type": "RuntimeDefault"}, container.where


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_pod_keeps_the_cluster_out_of_its_environment_and_holds_no_token(overlay: str) -> None:
    """A Service named `gateway` would put GATEWAY_PORT=tcp://... into pods with service links."""
    objects = rendered(overlay)
    for container in containers(objects):
        assert container.pod["enableServiceLinks"] is False, container.where
        assert container.pod["automountServiceAccountToken"] is False, container.where
    for container in gateway_containers(objects):
        account = named(objects, "ServiceAccount", container.pod["serviceAccountName"])
        assert account["automountServiceAccountToken"] is False


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_requests_and_is_limited_in_cpu_and_memory(overlay: str) -> None:
    for container in containers(rendered(overlay)):
        resources = container.spec["resources"]
        for resource in ("cpu", "memory"):
            request, limit = resources["requests"][resource], resources["limits"][resource]
            assert 0 < quantity(request) <= quantity(limit), f"{container.where}: {resource}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_gateway_is_probed_on_paths_the_app_serves(overlay: str, tmp_path: Path) -> None:
    from gateway.app import create_app

    objects = rendered(overlay)
    container = serving_container(objects)
    probes = {
        kind: container.spec[kind]["httpGet"] for kind in ("startupProbe", "livenessProbe", "readinessProbe")
    }
    assert probes["readinessProbe"]["path"] == "/readyz"
    assert probes["livenessProbe"]["path"] == "/healthz"

    settings = process_settings(objects, container, tmp_path)
    routes = create_app(settings).route_handler_method_map
    [port] = [p for p in container.spec["ports"] if p["name"] == probes["readinessProbe"]["port"]]
    for kind, probe in probes.items():
        assert "GET" in routes.get(probe["path"], {}), f"{kind}: the app serves no GET {probe['path']}"
        assert probe["port"] == port["name"], kind
    assert port["containerPort"] == settings.port


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_only_variables_the_gateway_reads_are_set(overlay: str) -> None:
    objects = rendered(overlay)
    known = settings_env_names()
    for container in gateway_containers(objects):
        names: set[str] = {e["name"] for e in container.spec.get("env", [])}
        for source in container.spec["envFrom"]:
            if "configMapRef" in source:
                names |= set(named(objects, "ConfigMap", _base_name(source["configMapRef"]["name"]))["data"])
            else:
                names |= set(secret_values(objects, source["secretRef"]["name"]))
        unknown = {n for n in names if n.startswith("GATEWAY_")} - known
        assert not unknown, f"{container.where}: gateway/settings/environment.py reads no {sorted(unknown)}"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_process_finds_a_catalog_that_passes_check_config(overlay: str, tmp_path: Path) -> None:
    """`gateway check-config`'s checks, less the resolution of the stores' host names (a question
    for the cluster's DNS): the settings load, the catalog's ${...} are all set, every deployment
    is priced, and the serving settings are servable."""
    objects = rendered(overlay)
    for container in gateway_containers(objects):
        settings = process_settings(objects, container, tmp_path)
        assert serving_problem(settings, settings.workers) is None, container.where
        assert list(unpriced_deployments(settings.catalog)) == [], container.where
        assert settings.catalog.models, container.where


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_process_kind_runs_on_its_own(overlay: str, tmp_path: Path) -> None:
    """The serving pods leave the usage stream and the batch jobs to the writer and runner
    Deployments; every container runs a command the `gateway` CLI has."""
    objects = rendered(overlay)
    commands = set(build_parser()._subparsers._group_actions[0].choices or ())  # type: ignore[union-attr]
    ran = {container.spec["args"][0] for container in gateway_containers(objects)}
    assert ran == PROCESS_COMMANDS
    assert ran <= commands
    for container in gateway_containers(objects):
        assert container.spec["command"] == ["gateway"], container.where
        assert container.owner["kind"] == ("Job" if container.spec["args"] == ["migrate"] else "Deployment")

    serving_settings = process_settings(objects, serving_container(objects), tmp_path)
    assert serving_settings.metering_writer == "external"
    assert serving_settings.run_jobs is False
    assert serving_settings.redis_url is not None  # the stream and the job leases are shared


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_grace_periods_cover_the_graceful_stops(overlay: str) -> None:
    objects = rendered(overlay)
    serving_pod = serving_container(objects)
    pause = serving_pod.spec["lifecycle"]["preStop"]["sleep"]["seconds"]
    # uvicorn's wait for the requests in flight, then the drain of what the pod spooled itself
    # (services.aclose, bounded as the writer process's drain)
    graceful = serving.OPTIONS["timeout_graceful_shutdown"] + writer_process.DRAIN_TIMEOUT_S
    assert serving_pod.pod["terminationGracePeriodSeconds"] > pause + graceful
    for container in gateway_containers(objects):
        assert container.pod["terminationGracePeriodSeconds"] > writer_process.DRAIN_TIMEOUT_S, (
            container.where
        )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_service_budget_and_autoscaler_point_at_the_serving_pods(overlay: str) -> None:
    objects = rendered(overlay)
    serving_pod = serving_container(objects)
    deployment, labels = serving_pod.owner, serving_pod.owner["spec"]["template"]["metadata"]["labels"]
    service = named(objects, "Service", "gateway")
    assert service["spec"]["selector"].items() <= labels.items()
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= {
        p["name"] for p in serving_pod.spec["ports"]
    }
    budget = named(objects, "PodDisruptionBudget", "gateway")
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    autoscaler = named(objects, "HorizontalPodAutoscaler", "gateway")
    target = autoscaler["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    assert [m["resource"]["name"] for m in autoscaler["spec"]["metrics"]] == ["cpu"]
    assert "replicas" not in deployment["spec"]  # the autoscaler's to set, not each apply's
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_image_comes_from_the_overlay(overlay: str) -> None:
    objects = rendered(overlay)
    image = overlay_image(overlay)
    assert {c.spec["image"] for c in gateway_containers(objects)} == {image}
    [job] = [o for o in objects if o["kind"] == "Job"]
    if overlay == "production":  # one migration Job per release: a Job's template is immutable
        tag = re.sub(r"[^a-z0-9]+", "-", image.rsplit(":", 1)[1].lower()).strip("-")
        assert job["metadata"]["name"] == f"gateway-migrate-{tag}"


def test_production_applies_no_placeholder_secret() -> None:
    """Production expects its Secrets to exist (an external secret manager); the base's templates
    of placeholders are not applied there."""
    objects = rendered("production")
    assert [o for o in objects if o["kind"] == "Secret"] == []
    referenced = {
        s["secretRef"]["name"]
        for c in gateway_containers(objects)
        for s in c.spec["envFrom"]
        if "secretRef" in s
    }
    assert referenced == {"gateway-secrets", "gateway-provider-keys"}
