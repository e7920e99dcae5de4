"""The Helm chart (infra/helm/inferq) as Kubernetes would receive it: `helm template` renders it,
and the manifests are checked for what a cluster operator relies on: probes that tell "not ready"
from "broken", bounded resources, no root, a kill deadline past the drain, a disruption budget per
Deployment, the topics created before the services start, metrics scraped where they are served,
and no secret in a ConfigMap. No cluster is needed (`make test-helm`; marker ``helm``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.helm

CHART = Path(__file__).resolve().parents[2] / "infra" / "helm" / "inferq"
RENDER_TIMEOUT_S = 60
SECRET_WORDS = ("PASSWORD", "SECRET", "API_KEY", "TOKEN")
# Every variable the services read as a drain bound (dispatcher, then ingest and results).
DRAIN_VARIABLES = ("INFERQ_DISPATCHER_DRAIN_TIMEOUT_S", "INFERQ_HTTP_GRACEFUL_SHUTDOWN_S")

# Overrides a user would plausibly set: three results replicas, a longer drain, SASL and secret env.
OVERRIDES = [
    "--set",
    "results.replicas=3",
    "--set",
    "shutdown.drainTimeoutSeconds=120",
    "--set",
    "kafka.securityProtocol=SASL_SSL",
    "--set",
    "kafka.sasl.existingSecret=kafka-user",
    "--set",
    "secretEnv.INFERQ_DISPATCHER_BACKEND_API_KEY.secretName=backend",
    "--set",
    "secretEnv.INFERQ_DISPATCHER_BACKEND_API_KEY.key=api-key",
]


def helm() -> str:
    found = os.environ.get("HELM") or shutil.which("helm") or "/opt/helm/helm"
    if not Path(found).is_file():
        pytest.fail(f"no helm binary at {found}: run `make helm` (or set HELM)")
    return found


def render(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [helm(), "template", "inferq", str(CHART), *args],
        capture_output=True,
        text=True,
        timeout=RENDER_TIMEOUT_S,
        check=False,
    )


def manifests(*args: str) -> list[dict[str, Any]]:
    rendered = render(*args)
    assert rendered.returncode == 0, rendered.stderr
    return [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def pod_specs(docs: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for doc in of_kind(docs, "Deployment") + of_kind(docs, "Job"):
        yield doc["metadata"]["name"], doc["spec"]["template"]["spec"]


def env_of(container: dict[str, Any], configmaps: dict[str, dict[str, str]]) -> dict[str, str]:
    """The plain-value environment a container starts with: its ConfigMaps, then its env (which wins)."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(configmaps[source["configMapRef"]["name"]])
    env.update({e["name"]: e["value"] for e in container.get("env", []) if "value" in e})
    return env


@pytest.fixture(scope="module", params=["defaults", "overrides"])
def docs(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return manifests(*([] if request.param == "defaults" else OVERRIDES))


def test_there_is_a_deployment_per_service(docs):
    names = {d["metadata"]["name"] for d in of_kind(docs, "Deployment")}
    assert names == {"inferq-ingest", "inferq-results", "inferq-dispatcher"}


def test_the_replicas_are_the_values():
    def replicas(*args: str) -> dict[str, int]:
        return {d["metadata"]["name"]: d["spec"]["replicas"] for d in of_kind(manifests(*args), "Deployment")}

    assert replicas() == {"inferq-ingest": 2, "inferq-results": 2, "inferq-dispatcher": 2}
    assert replicas(*OVERRIDES)["inferq-results"] == 3


def test_every_service_container_probes_readiness_and_liveness_on_different_paths(docs):
    for deployment in of_kind(docs, "Deployment"):
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            where = f"{deployment['metadata']['name']}/{container['name']}"
            assert "readinessProbe" in container, f"{where} has no readiness probe"
            assert "livenessProbe" in container, f"{where} has no liveness probe"
            ready = container["readinessProbe"]["httpGet"]
            alive = container["livenessProbe"]["httpGet"]
            assert (ready["path"], alive["path"]) == ("/readyz", "/healthz"), where
            ports = {p["name"] for p in container["ports"]} | {p["containerPort"] for p in container["ports"]}
            assert ready["port"] in ports and alive["port"] in ports, where


def test_every_container_has_requests_and_limits_and_runs_unprivileged(docs):
    seen = 0
    for name, spec in pod_specs(docs):
        pod_security = spec.get("securityContext", {})
        for container in spec["containers"]:
            seen += 1
            where = f"{name}/{container['name']}"
            resources = container.get("resources", {})
            for bound in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(resources.get(bound, {})), f"{where}: {bound} {resources}"
            security = container.get("securityContext", {})
            assert security.get("runAsNonRoot", pod_security.get("runAsNonRoot")) is True, where
            assert security.get("allowPrivilegeEscalation") is False, where
            assert security.get("capabilities", {}).get("drop") == ["ALL"], where
            assert security.get("readOnlyRootFilesystem") is True, where
    assert seen == 4  # three services and the topics Job


def test_results_writes_its_database_to_a_volume_not_the_read_only_root(docs):
    (results,) = [d for d in of_kind(docs, "Deployment") if d["metadata"]["name"] == "inferq-results"]
    spec = results["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    db_path = Path(next(e["value"] for e in container["env"] if e["name"] == "INFERQ_RESULTS_DB_PATH"))
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volume = mounts.get(str(db_path.parent))
    assert volume is not None, f"{db_path.parent} is not mounted: {mounts}"
    assert any(
        v["name"] == volume and ("emptyDir" in v or "persistentVolumeClaim" in v) for v in spec["volumes"]
    )


def test_the_kill_deadline_comes_after_the_drain_each_container_is_configured_with(docs):
    configmaps = {c["metadata"]["name"]: c["data"] for c in of_kind(docs, "ConfigMap")}
    for deployment in of_kind(docs, "Deployment"):
        spec = deployment["spec"]["template"]["spec"]
        for container in spec["containers"]:
            env = env_of(container, configmaps)
            drains = [float(env[v]) for v in DRAIN_VARIABLES if v in env]
            assert drains, (
                f"{deployment['metadata']['name']}: no drain bound configured, so none is waited for"
            )
            pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
            assert spec["terminationGracePeriodSeconds"] > pre_stop + max(drains), deployment["metadata"][
                "name"
            ]


def test_a_longer_drain_lengthens_every_kill_deadline():
    def graces(*args: str) -> dict[str, int]:
        return {
            d["metadata"]["name"]: d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
            for d in of_kind(manifests(*args), "Deployment")
        }

    short, long = graces(), graces("--set", "shutdown.drainTimeoutSeconds=120")
    assert all(long[name] - short[name] == 90 for name in short), (short, long)


def test_every_deployment_has_a_disruption_budget_selecting_its_pods(docs):
    budgets = [b["spec"]["selector"]["matchLabels"] for b in of_kind(docs, "PodDisruptionBudget")]
    for deployment in of_kind(docs, "Deployment"):
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        covering = [b for b in budgets if b.items() <= labels.items()]
        assert len(covering) == 1, f"{deployment['metadata']['name']}: {len(covering)} budgets"


def test_the_topics_are_created_by_a_hook_before_install_and_upgrade(docs):
    (job,) = of_kind(docs, "Job")
    hooks = set(job["metadata"]["annotations"]["helm.sh/hook"].split(","))
    assert {"pre-install", "pre-upgrade"} <= hooks
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["command"][:3] == ["inferq", "topics", "create"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    # At pre-install the chart's ConfigMap does not exist yet: the Job cannot depend on it.
    assert "envFrom" not in container
    assert env["INFERQ_KAFKA_BOOTSTRAP_SERVERS"] and env["INFERQ_TOPIC_PREFIX"]


def test_scrape_annotations_point_at_a_port_serving_metrics(docs):
    for deployment in of_kind(docs, "Deployment"):
        annotations = deployment["spec"]["template"]["metadata"].get("annotations", {})
        name = deployment["metadata"]["name"]
        assert annotations.get("prometheus.io/scrape") == "true", name
        assert annotations.get("prometheus.io/path") == "/metrics", name
        ports = [
            p["containerPort"]
            for c in deployment["spec"]["template"]["spec"]["containers"]
            for p in c["ports"]
        ]
        assert int(annotations["prometheus.io/port"]) in ports, name


def test_metrics_are_on_their_own_port_which_the_api_services_do_not_expose(docs):
    """/metrics names the tenants: ingest and results serve it on a port of its own (the pods'
    `metrics` port, the scrape annotations' and a headless -metrics Service's), never the API's."""
    services = {s["metadata"]["name"]: s for s in of_kind(docs, "Service")}
    for name in ("ingest", "results"):
        deployment = next(d for d in of_kind(docs, "Deployment") if d["metadata"]["name"] == f"inferq-{name}")
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        command = container["command"]
        assert int(command[command.index("--metrics-port") + 1]) == ports["metrics"] != ports["http"]
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        assert int(annotations["prometheus.io/port"]) == ports["metrics"]
        assert [p["targetPort"] for p in services[f"inferq-{name}"]["spec"]["ports"]] == ["http"]
        metrics = services[f"inferq-{name}-metrics"]["spec"]
        assert metrics["clusterIP"] == "None"
        assert [(p["port"], p["targetPort"]) for p in metrics["ports"]] == [(ports["metrics"], "metrics")]


def test_services_listen_on_every_address_with_a_tenants_file_from_a_secret(docs):
    for deployment in of_kind(docs, "Deployment"):
        spec = deployment["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        command = container["command"]
        assert command[command.index("--host") + 1] == "0.0.0.0"
        tenants_file = Path(next(e["value"] for e in container["env"] if e["name"] == "INFERQ_TENANTS_FILE"))
        mount = next(m for m in container["volumeMounts"] if m["mountPath"] == str(tenants_file.parent))
        volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
        assert volume["secret"]["secretName"]


def test_no_secret_reaches_a_configmap(docs):
    for configmap in of_kind(docs, "ConfigMap"):
        for name, value in configmap["data"].items():
            assert not any(word in name.upper() for word in SECRET_WORDS), name
            assert "@" not in value or "://" not in value, f"{name} may carry credentials"
    secret_env = [
        e
        for _, spec in pod_specs(docs)
        for c in spec["containers"]
        for e in c.get("env", [])
        if any(word in e["name"] for word in SECRET_WORDS)
    ]
    assert all("valueFrom" in e and "value" not in e for e in secret_env), secret_env


@pytest.mark.parametrize(
    ("override", "refusal"),
    [
        ("settings.INFERQ_KAFKA_SASL_PASSWORD=hunter2", "looks secret"),
        ("redis.url=redis://:hunter2@redis:6379/0", "carries a password"),
        ("settings.INFERQ_DISPATCHER_DRAIN_TIMEOUT_S=600", "shutdown.drainTimeoutSeconds"),
        ("tenants.existingSecret=", "open mode"),
        ("dispatcher.coordination=local", "whole budget"),
    ],
)
def test_values_that_would_leak_a_secret_or_break_the_release_are_refused(override, refusal):
    rendered = render("--set", override)
    assert rendered.returncode != 0, f"{override} rendered"
    assert refusal in rendered.stderr
    assert "hunter2" not in rendered.stdout


def test_the_checks_catch_a_deployment_without_probes(tmp_path):
    """The assertions above can fail: a chart whose probes were removed is caught."""
    broken = tmp_path / "inferq"
    shutil.copytree(CHART, broken)
    helpers = broken / "templates" / "_helpers.tpl"
    text = helpers.read_text(encoding="utf-8")
    start = text.index('{{- define "inferq.probes" -}}')
    end = text.index("{{- end -}}", text.index("livenessProbe:", start))
    helpers.write_text(text[:start] + '{{- define "inferq.probes" -}}\n' + text[end:], encoding="utf-8")
    rendered = subprocess.run(
        [helm(), "template", "inferq", str(broken)],
        capture_output=True,
        text=True,
        timeout=RENDER_TIMEOUT_S,
        check=False,
    )
    assert rendered.returncode == 0, rendered.stderr
    with pytest.raises(AssertionError, match="has no readiness probe"):
        test_every_service_container_probes_readiness_and_liveness_on_different_paths(
            [d for d in yaml.safe_load_all(rendered.stdout) if d]
        )
