"""What examples/kubernetes/'s manifests tell a node to run: for each pod of the master's
StatefulSet and of the workers' Indexed Job, its container's process (the image's entry point and
the manifest's command and arguments, with Kubernetes' $(VAR) expansion), environment, user and
groups, working directory and volume mounts. cluster.py runs these; tests/docs/
test_kubernetes_manifests.py checks their hippo arguments against `hippo --help`.

Only what the manifests use is read; anything else that would change what runs (env from a
reference, a volume of another kind) is refused by name rather than ignored.
"""
import base64
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml


class ManifestError(Exception):
    pass


@dataclass
class Mount:
    volume: tuple  # (kind, what): ("emptyDir", name), ("secret", the volume), ("claim", name)
    path: str
    read_only: bool


@dataclass
class ContainerSpec:
    command: list  # the process: entry point (or command) and arguments, expanded
    env: dict
    user: int
    group: int
    groups: list  # supplementary: fsGroup, supplementalGroups
    fs_group: int | None
    working_dir: str
    mounts: list = field(default_factory=list)
    manifest_args: list = field(default_factory=list)  # as written, before expansion


@dataclass
class Pod:
    name: str
    hostname: str
    container: ContainerSpec


def expand(text, env):
    """Kubernetes' expansion of command and args: $(VAR) is VAR's value when the container's
    environment defines it (else left as written), $$ is $."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


def load_documents(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def load_secrets(path):
    """{Secret name: {key: bytes}} of a YAML file of Secrets (examples/kubernetes/keys')."""
    out = {}
    for doc in load_documents(path):
        if doc.get("kind") != "Secret":
            raise ManifestError(f"{path}: a {doc.get('kind')} among the Secrets")
        data = {k: base64.b64decode(v) for k, v in (doc.get("data") or {}).items()}
        data.update({k: v.encode() for k, v in (doc.get("stringData") or {}).items()})
        out[doc["metadata"]["name"]] = data
    return out


def secret_files(secrets, volume):
    """{relative path: (bytes, mode)} of a secret volume, as kubelet writes them."""
    spec = volume["secret"]
    name = spec["secretName"]
    if name not in secrets:
        raise ManifestError(f"volume {volume['name']}: no Secret {name}")
    data = secrets[name]
    default_mode = spec.get("defaultMode", 0o644)
    items = spec.get("items") or [{"key": k, "path": k} for k in data]
    out = {}
    for item in items:
        if item["key"] not in data:
            raise ManifestError(f"volume {volume['name']}: Secret {name} has no key {item['key']}")
        out[item["path"]] = (data[item["key"]], item.get("mode", default_mode))
    return out


class Manifests:
    def __init__(self, directory):
        self.objects = {}
        for path in sorted(Path(directory).glob("*.yaml")):
            for doc in load_documents(path):
                self.objects[(doc["kind"], doc["metadata"]["name"])] = doc
        [self.master] = self.of_kind("StatefulSet")
        [self.job] = self.of_kind("Job")
        [service] = self.of_kind("Service")
        self.service = service["metadata"]["name"]
        self.port = service["spec"]["ports"][0]["port"]
        selector = service["spec"]["selector"]
        labels = self.master["spec"]["template"]["metadata"]["labels"]
        if any(labels.get(k) != v for k, v in selector.items()):
            raise ManifestError(f"Service {self.service} does not select the master's pods")
        self.service_pod = self.master["metadata"]["name"] + "-0"
        [template] = self.master["spec"]["volumeClaimTemplates"]
        self.plan_claim = f"{template['metadata']['name']}-{self.service_pod}"

    def of_kind(self, kind):
        return [d for (k, _), d in self.objects.items() if k == kind]

    def master_pod(self, image_config):
        """The StatefulSet's one pod, <name>-0, its claims <template>-<name>-0."""
        name = self.service_pod
        claims = {t["metadata"]["name"]: f"{t['metadata']['name']}-{name}"
                  for t in self.master["spec"].get("volumeClaimTemplates", [])}
        return Pod(name, name, container_spec(self.master["spec"]["template"]["spec"],
                                              image_config, {}, claims))

    def worker_pods(self, image_config):
        """The Indexed Job's pods: index i's hostname <job>-<i>, JOB_COMPLETION_INDEX=i."""
        spec = self.job["spec"]
        if spec.get("completionMode") != "Indexed":
            raise ManifestError("the workers' Job is not Indexed")
        job = self.job["metadata"]["name"]
        return [Pod(f"{job}-{i}", f"{job}-{i}",
                    container_spec(spec["template"]["spec"], image_config,
                                   {"JOB_COMPLETION_INDEX": str(i)}, {}))
                for i in range(spec["completions"])]


def container_spec(pod_spec, image_config, injected_env, claim_templates):
    """The one container of a pod spec, as a runtime runs it from the image's configuration."""
    [c] = pod_spec["containers"]
    if pod_spec.get("enableServiceLinks", True):
        raise ManifestError("enableServiceLinks: the Services' variables are not made by this test")
    env = {}
    for entry in image_config.get("Env") or []:
        k, _, v = entry.partition("=")
        env[k] = v
    container_env = dict(injected_env)
    for entry in c.get("env", []):
        if "value" not in entry:
            raise ManifestError(f"env {entry['name']}: only values are supported (not valueFrom)")
        container_env[entry["name"]] = expand(entry["value"], container_env)
    env.update(container_env)
    entrypoint = c.get("command") or image_config.get("Entrypoint") or []
    args = c.get("args") if "args" in c or "command" in c else image_config.get("Cmd")
    command = [expand(a, container_env) for a in entrypoint + (args or [])]
    security = dict(pod_spec.get("securityContext") or {})
    security.update(c.get("securityContext") or {})
    image_user = (image_config.get("User") or "0:0").split(":")
    user = security.get("runAsUser", int(image_user[0]))
    group = security.get("runAsGroup", int(image_user[1]) if len(image_user) > 1 else 0)
    if security.get("runAsNonRoot") and user == 0:
        raise ManifestError("runAsNonRoot with user 0")
    fs_group = security.get("fsGroup")
    groups = ([fs_group] if fs_group is not None else []) + security.get("supplementalGroups", [])
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    mounts = []
    for m in c.get("volumeMounts", []):
        name = m["name"]
        if name in claim_templates:
            volume = ("claim", claim_templates[name])
        elif name not in volumes:
            raise ManifestError(f"volumeMount {name}: no such volume")
        elif "emptyDir" in volumes[name]:
            volume = ("emptyDir", name)
        elif "secret" in volumes[name]:
            volume = ("secret", volumes[name])
        elif "persistentVolumeClaim" in volumes[name]:
            volume = ("claim", volumes[name]["persistentVolumeClaim"]["claimName"])
        else:
            raise ManifestError(f"volume {name}: a kind this test does not run")
        mounts.append(Mount(volume, m["mountPath"], bool(m.get("readOnly"))))
    return ContainerSpec(command, env, user, group, groups, fs_group,
                         c.get("workingDir") or image_config.get("WorkingDir") or "/", mounts,
                         list(c.get("args") or []))
