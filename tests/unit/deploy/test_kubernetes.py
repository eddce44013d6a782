"""deploy/kubernetes, checked without a cluster: the kustomize base is rendered (namespace,
resources, labels and images, applied as kustomize applies them: the base uses no other
feature, and the first test says so), and every resource is validated against a schema
pinned in deploy/schemas/kubernetes: Kubernetes' own (1.34, strict: unknown fields are
errors) and the openAPIV3Schema of the operators' CRDs (Flink Kubernetes Operator's
FlinkDeployment, Strimzi's Kafka, KafkaNodePool and KafkaTopic), closed against unknown
fields as `kubectl apply --validate=strict` would. Then what the manifests mean: the topics
are the product's, three replicas; the job runs in application mode with savepoint
upgrades and checkpoints on a shared volume or an S3-style store; the probes hit the
endpoints the services serve; alerting is one replica with its state on a volume, or, in
the replicated variant (deploy/kubernetes/replicated), replicas on different nodes that
share the work on a PostgreSQL state, with settings the service accepts."""

from __future__ import annotations

import copy
import hashlib
import json
import re
import tomllib
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from referencing import Registry, Resource

from anchorwatch.alerting.settings import AlertingSettings
from anchorwatch.settings import TopicSettings
from anchorwatch.stack.topics import topic_specs

ROOT = Path(__file__).resolve().parents[3]
BASE = ROOT / "deploy" / "kubernetes"
REPLICATED = BASE / "replicated"
SCHEMAS = ROOT / "deploy" / "schemas" / "kubernetes"
KUBE = SCHEMAS / "kubernetes-v1.34.0"

Doc = dict[str, Any]

# (apiVersion, kind) -> the pinned schema, relative to SCHEMAS.
CORE_SCHEMAS = {
    ("apps/v1", "Deployment"): "kubernetes-v1.34.0/deployment-apps-v1.json",
    ("v1", "Service"): "kubernetes-v1.34.0/service-v1.json",
    ("autoscaling/v2", "HorizontalPodAutoscaler"): (
        "kubernetes-v1.34.0/horizontalpodautoscaler-autoscaling-v2.json"
    ),
    ("v1", "PersistentVolumeClaim"): "kubernetes-v1.34.0/persistentvolumeclaim-v1.json",
    ("v1", "ServiceAccount"): "kubernetes-v1.34.0/serviceaccount-v1.json",
    ("v1", "ConfigMap"): "kubernetes-v1.34.0/configmap-v1.json",
}
CRD_SCHEMAS = {
    ("flink.apache.org/v1beta1", "FlinkDeployment"): (
        "flink-kubernetes-operator-1.10.0/flinkdeployment-flink.apache.org-v1beta1.json"
    ),
    ("kafka.strimzi.io/v1", "Kafka"): "strimzi-1.2.0/kafka-kafka.strimzi.io-v1.json",
    ("kafka.strimzi.io/v1", "KafkaNodePool"): (
        "strimzi-1.2.0/kafkanodepool-kafka.strimzi.io-v1.json"
    ),
    ("kafka.strimzi.io/v1", "KafkaTopic"): "strimzi-1.2.0/kafkatopic-kafka.strimzi.io-v1.json",
}
# The one change made to a pinned schema: the newest FlinkDeployment CRD Maven Central
# serves here (operator 1.10.0) lists Flink versions up to v1_20; the image runs Flink 2.2,
# which later operator releases know as v2_2 (deploy/schemas/kubernetes/README.md).
FLINK_VERSIONS_ADDED = ["v2_2"]
KUSTOMIZE_FEATURES = {"apiVersion", "kind", "namespace", "resources", "labels", "images"}


# --------------------------------------------------------------------------- rendering


def _set_images(node: Any, images: list[dict[str, str]]) -> None:
    """kustomize's images transformer: the image of every container and init container,
    wherever the containers list sits; nothing else (a CRD's own image field stays)."""
    if isinstance(node, list):
        for item in node:
            _set_images(item, images)
        return
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        if key in ("containers", "initContainers") and isinstance(value, list):
            for container in value:
                if "image" not in container:
                    continue
                name = re.split(r"[:@]", container["image"], maxsplit=1)[0]
                for image in images:
                    if image["name"] == name:
                        new = image.get("newName", name)
                        tag = f"@{image['digest']}" if "digest" in image else ""
                        tag = tag or (f":{image['newTag']}" if "newTag" in image else "")
                        container["image"] = new + tag
        _set_images(value, images)


def render(base: Path = BASE) -> list[Doc]:
    """`kustomize build base` for the features the base uses (anything else fails here)."""
    kustomization = yaml.safe_load((base / "kustomization.yaml").read_text())
    assert set(kustomization) <= KUSTOMIZE_FEATURES, set(kustomization) - KUSTOMIZE_FEATURES
    docs: list[Doc] = []
    for name in kustomization["resources"]:
        if (base / name).is_dir():  # another kustomization: rendered, then transformed here
            docs += render(base / name)
            continue
        docs += [d for d in yaml.safe_load_all((base / name).read_text()) if d is not None]
    for doc in docs:
        meta = doc.setdefault("metadata", {})
        if "namespace" in kustomization:
            meta["namespace"] = kustomization["namespace"]
        for entry in kustomization.get("labels", []):
            # Metadata labels only: selectors and pod templates keep their own.
            assert not entry.get("includeSelectors")
            assert not entry.get("includeTemplates")
            meta.setdefault("labels", {}).update(entry["pairs"])
        _set_images(doc, kustomization.get("images", []))
    return docs


@cache
def _rendered(base: Path = BASE) -> tuple[Doc, ...]:
    return tuple(render(base))


def docs(base: Path = BASE) -> list[Doc]:
    return copy.deepcopy(list(_rendered(base)))


def of_kind(kind: str) -> list[Doc]:
    return [d for d in docs() if d["kind"] == kind]


def one(kind: str, name: str) -> Doc:
    (doc,) = [d for d in of_kind(kind) if d["metadata"]["name"] == name]
    return doc


def settings_file() -> dict[str, Any]:
    config = one("ConfigMap", "anchorwatch-config")
    return tomllib.loads(config["data"]["anchorwatch.toml"])


# --------------------------------------------------------------------------- schemas


def _load(relative: str) -> Any:
    return json.loads((SCHEMAS / relative).read_text())


def _closed(schema: Any) -> Any:
    """Objects with declared properties refuse others, as the API server's strict field
    validation does for a structural schema (unless it preserves unknown fields)."""
    if isinstance(schema, list):
        return [_closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _closed(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@cache
def _registry() -> Registry[Any]:
    definitions = json.loads((KUBE / "_definitions.json").read_text())
    registry: Registry[Any] = Registry().with_resource(
        definitions["$id"], Resource.from_contents(definitions)
    )
    return registry


@cache
def _object_meta() -> Any:
    # The CRD schemas leave metadata open ({type: object}); the API server checks it as
    # every object's: against ObjectMeta.
    ref = "https://kubernetes.io/api/_definitions.json#/$defs/"
    return {"$ref": ref + "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}


def crd_schema(relative: str) -> Any:
    schema = _closed(_load(relative))
    # Every object has these, whether the CRD's schema spells them out (Strimzi's does,
    # fabric8's does not); metadata is checked against ObjectMeta in errors().
    for field, kind in (("apiVersion", "string"), ("kind", "string"), ("metadata", "object")):
        schema["properties"].setdefault(field, {"type": kind})
    if relative.startswith("flink-kubernetes-operator"):
        versions = schema["properties"]["spec"]["properties"]["flinkVersion"]["enum"]
        assert not set(FLINK_VERSIONS_ADDED) & set(versions), "drop the widening"
        versions += FLINK_VERSIONS_ADDED
    return schema


def errors(doc: Doc) -> list[str]:
    """What the pinned schemas find wrong with ``doc`` (empty: valid)."""
    key = (doc.get("apiVersion"), doc.get("kind"))
    found: list[jsonschema.ValidationError] = []
    if key in CORE_SCHEMAS:
        schema = _load(CORE_SCHEMAS[key])
        found += jsonschema.Draft202012Validator(schema, registry=_registry()).iter_errors(doc)
    elif key in CRD_SCHEMAS:
        schema = crd_schema(CRD_SCHEMAS[key])
        found += jsonschema.Draft4Validator(schema).iter_errors(doc)
        meta = jsonschema.Draft202012Validator(_object_meta(), registry=_registry())
        found += meta.iter_errors(doc.get("metadata", {}))
    else:
        return [f"no pinned schema for {key}"]
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in found]


def _id(doc: Doc) -> str:
    return f"{doc['kind']}/{doc['metadata']['name']}"


def _replicated_only() -> list[Doc]:
    """The replicated variant's resources that the default does not have as they are."""
    default = docs()
    return [d for d in docs(REPLICATED) if d not in default]


@pytest.mark.parametrize(
    "doc",
    docs() + _replicated_only(),
    ids=lambda d: _id(d) + (" (replicated)" if d not in _rendered() else ""),
)
def test_every_resource_validates_against_its_pinned_schema(doc: Doc) -> None:
    assert errors(doc) == []


@pytest.mark.parametrize(
    ("kind", "name", "path", "value"),
    [
        ("FlinkDeployment", "anchorwatch-drift", ["spec", "job", "upgradMode"], "savepoint"),
        ("FlinkDeployment", "anchorwatch-drift", ["spec", "flinkVersion"], "v9_9"),
        ("FlinkDeployment", "anchorwatch-drift", ["spec", "job", "upgradeMode"], "latest"),
        ("Kafka", "anchorwatch", ["spec", "kafka", "replicas"], 3),
        ("KafkaNodePool", "dual-role", ["spec", "roles"], ["leader"]),
        ("KafkaTopic", "anchorwatch.verdicts", ["spec", "replica"], 3),
        ("Deployment", "anchorwatch-ingest", ["spec", "template", "spec", "restart"], "Always"),
        ("HorizontalPodAutoscaler", "anchorwatch-ingest", ["spec", "minReplicas"], "2"),
        ("Service", "anchorwatch-ingest", ["metadata", "labelz"], {}),
    ],
)
def test_the_validation_rejects_a_wrong_or_unknown_field(
    kind: str, name: str, path: list[str], value: Any
) -> None:
    doc = one(kind, name)
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    assert errors(doc), f"{kind}/{name} with {'.'.join(path)}={value!r} passed"


def test_an_unknown_kind_has_no_schema() -> None:
    assert errors({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}})


def test_pinned_schemas_match_the_checksums_in_their_readme() -> None:
    readme = (SCHEMAS / "README.md").read_text()
    listed = dict(
        (path, digest)
        for path, digest in re.findall(r"`([\w./-]+\.json)`: sha256 `([0-9a-f]{64})`", readme)
    )
    on_disk = {
        str(p.relative_to(SCHEMAS)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in SCHEMAS.rglob("*.json")
    }
    assert listed == on_disk
    used = {*CORE_SCHEMAS.values(), *CRD_SCHEMAS.values(), "kubernetes-v1.34.0/_definitions.json"}
    assert set(on_disk) == used, "only the kinds used are pinned"


# --------------------------------------------------------------------------- the base


def test_the_base_renders_into_one_namespace_with_its_labels_and_images() -> None:
    rendered = docs()
    assert {d["metadata"]["namespace"] for d in rendered} == {"anchorwatch"}
    assert all(d["metadata"]["labels"]["app.kubernetes.io/part-of"] for d in rendered)
    names = [(d["kind"], d["metadata"]["name"]) for d in rendered]
    assert len(names) == len(set(names))
    images = {c["image"] for d in of_kind("Deployment") for c in _containers(d)}
    assert images == {"anchorwatch:0.1.0"}
    # No file of the base holds a Secret: they are created by hand.
    for path in BASE.rglob("*.yaml"):
        kinds = {d.get("kind") for d in yaml.safe_load_all(path.read_text()) if d}
        assert "Secret" not in kinds, path


def _containers(deployment: Doc) -> list[Doc]:
    containers: list[Doc] = deployment["spec"]["template"]["spec"]["containers"]
    return containers


def _env(container: Doc) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def _walk(node: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield key, value
            yield from _walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item)


def test_topics_are_the_products_with_three_replicas() -> None:
    config = settings_file()["topics"]
    assert config["replication_factor"] == 3
    expected = topic_specs(TopicSettings(**config))
    topics = {t["metadata"]["name"]: t for t in of_kind("KafkaTopic")}
    assert set(topics) == {s.name for s in expected}
    for spec in expected:
        topic = topics[spec.name]["spec"]
        assert "topicName" not in topic  # the resource name is the topic name
        assert topic["replicas"] == 3
        assert topic["partitions"] == spec.partitions
        assert topic["config"] == spec.config


def test_kafka_runs_three_brokers_and_the_clients_find_it() -> None:
    (kafka,) = of_kind("Kafka")
    name = kafka["metadata"]["name"]
    pools = of_kind("KafkaNodePool")
    assert all(p["metadata"]["labels"]["strimzi.io/cluster"] == name for p in pools)
    assert sum(p["spec"]["replicas"] for p in pools if "broker" in p["spec"]["roles"]) >= 3
    assert sum(p["spec"]["replicas"] for p in pools if "controller" in p["spec"]["roles"]) >= 3
    broker = kafka["spec"]["kafka"]["config"]
    assert broker["default.replication.factor"] == 3
    assert broker["offsets.topic.replication.factor"] == 3
    assert broker["transaction.state.log.replication.factor"] == 3
    assert broker["min.insync.replicas"] == 2
    assert broker["auto.create.topics.enable"] is False
    assert broker["message.max.bytes"] >= TopicSettings().max_message_bytes
    assert "topicOperator" in kafka["spec"]["entityOperator"]
    assert all(t["metadata"]["labels"]["strimzi.io/cluster"] == name for t in of_kind("KafkaTopic"))
    (plain,) = [x for x in kafka["spec"]["kafka"]["listeners"] if not x["tls"]]
    bootstrap = settings_file()["kafka"]["bootstrap_servers"]
    assert bootstrap == f"{name}-kafka-bootstrap:{plain['port']}"


def _flink_version() -> str:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (pin,) = [d for d in pyproject["project"]["dependencies"] if d.startswith("apache-flink==")]
    return str(pin.split("==")[1])


def test_the_drift_job_runs_in_application_mode_with_savepoint_upgrades() -> None:
    (flink,) = of_kind("FlinkDeployment")
    spec = flink["spec"]
    version = _flink_version()
    major, minor = version.split(".")[:2]
    assert spec["flinkVersion"] == f"v{major}_{minor}"
    assert spec.get("mode", "native") == "native"
    job = spec["job"]  # a job in the spec: application mode (no job: a session cluster)
    assert job["upgradeMode"] == "savepoint"
    assert job["state"] == "running"
    assert job["entryClass"] == "org.apache.flink.client.python.PythonDriver"
    assert job["jarURI"] == f"local:///opt/flink/opt/flink-python-{version}.jar"
    args = job["args"]
    assert args[args.index("-pym") + 1] == "anchorwatch.jobs.drift_job"
    assert job["parallelism"] == settings_file()["job"]["parallelism"]
    config = spec["flinkConfiguration"]
    pod = spec["podTemplate"]["spec"]
    claims = {
        v["name"]: v["persistentVolumeClaim"]["claimName"]
        for v in pod["volumes"]
        if "persistentVolumeClaim" in v
    }
    mounts = {m["mountPath"]: m["name"] for c in pod["containers"] for m in c["volumeMounts"]}
    for key in (
        "execution.checkpointing.dir",
        "execution.checkpointing.savepoint-dir",
        "high-availability.storageDir",
    ):
        where = config[key]
        if where.startswith("s3://"):
            continue
        assert where.startswith("file:///"), (key, where)
        path = where.removeprefix("file://")
        (mount,) = [m for m in mounts if path.startswith(m.rstrip("/") + "/")]
        claim = one("PersistentVolumeClaim", claims[mounts[mount]])
        # JobManager and TaskManagers on different nodes all write there.
        assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert config["execution.checkpointing.externalized-checkpoint-retention"] == (
        "RETAIN_ON_CANCELLATION"
    )


def _served_paths(source: Path) -> set[str]:
    text = source.read_text()
    return set(re.findall(r'add_get\("([^"]+)"', text)) | set(re.findall(r'"(/\w+)": lambda', text))


@pytest.mark.parametrize(
    ("deployment", "source", "port_variable"),
    [
        ("anchorwatch-ingest", "connectors/server.py", "ANCHORWATCH_INGEST__PORT"),
        ("anchorwatch-alerting", "alerting/http.py", "ANCHORWATCH_ALERTING__METRICS_PORT"),
    ],
)
def test_probes_and_scrapes_hit_the_services_own_endpoints(
    deployment: str, source: str, port_variable: str
) -> None:
    served = _served_paths(ROOT / source)
    assert {"/healthz", "/readyz", "/metrics"} <= served
    doc = one("Deployment", deployment)
    (container,) = _containers(doc)
    port = int(_env(container)[port_variable])
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = container[probe]["httpGet"]
        assert get["path"] == path
        assert named.get(get["port"], get["port"]) == port
    annotations = doc["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == port
    assert annotations["prometheus.io/path"] in served
    (service,) = [s for s in of_kind("Service") if s["metadata"]["name"] == deployment]
    labels = doc["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert doc["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_flink_metrics_are_scraped_from_the_reporters_port() -> None:
    (flink,) = of_kind("FlinkDeployment")
    port = flink["spec"]["flinkConfiguration"]["metrics.reporter.prom.port"]
    template = flink["spec"]["podTemplate"]
    assert template["metadata"]["annotations"]["prometheus.io/port"] == port
    ports = {p["containerPort"] for c in template["spec"]["containers"] for p in c["ports"]}
    assert int(port) in ports


def test_ingest_scales_out_on_cpu() -> None:
    (hpa,) = of_kind("HorizontalPodAutoscaler")
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", "anchorwatch-ingest")
    assert 2 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
    (container,) = _containers(one("Deployment", "anchorwatch-ingest"))
    assert "cpu" in container["resources"]["requests"]  # utilization is of the request


def test_alerting_is_one_replica_with_its_state_on_a_volume() -> None:
    doc = one("Deployment", "anchorwatch-alerting")
    # Local SQLite state and a lock file: one instance, the old pod gone before the new one.
    assert doc["spec"]["replicas"] == 1
    assert doc["spec"]["strategy"] == {"type": "Recreate"}
    assert all(
        h["spec"]["scaleTargetRef"]["name"] != "anchorwatch-alerting"
        for h in of_kind("HorizontalPodAutoscaler")
    )
    (container,) = _containers(doc)
    state_dir = _env(container)["ANCHORWATCH_ALERTING__STATE_DIR"]
    volumes = {v["name"]: v for v in doc["spec"]["template"]["spec"]["volumes"]}
    (mount,) = [
        m
        for m in container["volumeMounts"]
        if (state_dir + "/").startswith(m["mountPath"].rstrip("/") + "/")
    ]
    claim_name = volumes[mount["name"]]["persistentVolumeClaim"]["claimName"]
    claim = one("PersistentVolumeClaim", claim_name)
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert "one replica" in (BASE / "alerting.yaml").read_text().lower()


def test_secrets_are_referenced_never_held_and_the_walkthrough_creates_them() -> None:
    referenced: set[str] = set()
    for doc in docs():
        for key, value in _walk(doc):
            if key == "secretKeyRef":
                referenced.add(value["name"])
            elif key == "secret" and isinstance(value, dict):
                referenced.add(value["secretName"])
            elif key == "name" and isinstance(value, str) and value.endswith("_TOKEN"):
                pytest.fail(f"a secret's value in an environment variable: {value}")
    assert referenced == {"anchorwatch-ingest", "anchorwatch-alerting", "anchorwatch-kafka-client"}
    walkthrough = (ROOT / "docs" / "operations.md").read_text()
    for name in referenced:
        assert f"secret generic {name}" in walkthrough, name
    # Each secret is read from a file the product's *_file setting names.
    for deployment in of_kind("Deployment"):
        (container,) = _containers(deployment)
        mounts = [m["mountPath"] for m in container["volumeMounts"] if "secrets" in m["mountPath"]]
        for name, value in _env(container).items():
            if name.endswith("_FILE") and "/secrets/" in str(value):
                assert any(str(value).startswith(m + "/") for m in mounts), name


def test_every_setting_named_is_one_the_product_reads() -> None:
    documented = (ROOT / "docs" / "settings.md").read_text()
    names = {e["name"] for d in docs() for key, value in _walk(d) if key == "env" for e in value}
    ours = {n for n in names if n.startswith("ANCHORWATCH_")}
    assert ours, names
    for name in ours:
        assert f"`{name}`" in documented, name
    for section, values in settings_file().items():
        for key in values:
            assert f"`[{section}] {key}`" in documented, (section, key)


# --------------------------------------------------------------------------- replicated


def test_the_replicated_variant_differs_only_in_its_alerting_service() -> None:
    default, replicated = docs(), docs(REPLICATED)
    alerting = {"anchorwatch-alerting", "anchorwatch-alerting-state"}
    assert [d for d in default if d["metadata"]["name"] not in alerting] == [
        d for d in replicated if d["metadata"]["name"] not in alerting
    ]
    assert [_id(d) for d in replicated if d["metadata"]["name"] in alerting] == [
        "Deployment/anchorwatch-alerting",
        "Service/anchorwatch-alerting",
    ]  # no volume claim: the state is in PostgreSQL


def test_replicated_alerting_shares_the_work_across_nodes_on_a_postgresql_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (doc,) = [
        d
        for d in docs(REPLICATED)
        if (d["kind"], d["metadata"]["name"]) == ("Deployment", "anchorwatch-alerting")
    ]
    spec = doc["spec"]
    assert spec["replicas"] >= 2
    assert spec["strategy"]["type"] == "RollingUpdate"
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    (spread,) = spec["template"]["spec"]["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["labelSelector"]["matchLabels"].items() <= (
        spec["template"]["metadata"]["labels"].items()
    )
    volumes = spec["template"]["spec"]["volumes"]
    assert not [v for v in volumes if "persistentVolumeClaim" in v]
    (container,) = _containers(doc)
    env = _env(container)
    # The state's password is a file of the alerting Secret, created in the walkthrough.
    password_file = str(env["ANCHORWATCH_ALERTING__STATE_PASSWORD_FILE"])
    (secrets,) = [m for m in container["volumeMounts"] if m["name"] == "alerting-secrets"]
    assert password_file.startswith(secrets["mountPath"] + "/")
    key = password_file.rsplit("/", 1)[1]
    assert f"--from-file={key}=" in (ROOT / "docs" / "operations.md").read_text()
    # The service accepts these settings as the pod would load them.
    (tmp_path / "secret").write_text("s3cret\n")
    (tmp_path / "anchorwatch.toml").write_text(
        one("ConfigMap", "anchorwatch-config")["data"]["anchorwatch.toml"]
    )
    for name, value in env.items():
        if name.startswith("ANCHORWATCH_") and isinstance(value, str):
            monkeypatch.setenv(name, str(tmp_path / "secret") if name.endswith("_FILE") else value)
    monkeypatch.setenv("ANCHORWATCH_CONFIG", str(tmp_path / "anchorwatch.toml"))
    settings = AlertingSettings.load()
    assert settings.alerting.work_split
    assert settings.alerting.state_url == env["ANCHORWATCH_ALERTING__STATE_URL"]
    assert not settings.grouping.enabled
