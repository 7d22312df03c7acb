"""examples/kubernetes/ checked offline: every manifest (and the Secrets that
examples/kubernetes/keys writes) against the Kubernetes API's schemas, unknown fields refused
(tests/container/validate.mjs, with npm's kubernetes-models, which scripts/setup installs); the
hippo arguments of every container against `hippo --help` and `hippo SUBCOMMAND --help`, as the
doc test checks its skipped blocks; the image tag against the binary's version.
tests/container/check runs the same containers for real.
"""
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "container"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import kubernetes  # noqa: E402
from test_doc_blocks import environment, help_text, hippo_invocations, subcommands  # noqa: E402

EXAMPLES = REPO / "examples" / "kubernetes"
VALIDATOR = REPO / "tests" / "container" / "validate.mjs"
# The image's configuration as scripts/image writes it: the entry point is hippo.
IMAGE_CONFIG = {"Entrypoint": ["hippo"], "Cmd": ["--help"], "User": "1000:1000",
                "WorkingDir": "/home/hippo", "Env": ["PATH=/usr/bin:/bin"]}


def validate(*files):
    if not (REPO / "tests" / "container" / "node_modules" / "kubernetes-models").is_dir():
        pytest.fail("no tests/container/node_modules: scripts/setup installs kubernetes-models "
                    "(npm ci --prefix tests/container)", pytrace=False)
    return subprocess.run(["node", str(VALIDATOR), *map(str, files)], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=60)


def manifests():
    return sorted(EXAMPLES.glob("*.yaml"))


def test_the_manifests_and_the_secrets_match_the_api_schemas(tmp_path):
    env = environment(tmp_path)
    subprocess.run([str(EXAMPLES / "keys"), str(tmp_path / "keys")], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    r = validate(*manifests(), tmp_path / "keys" / "secrets.yaml")
    assert r.returncode == 0, r.stdout
    print(r.stdout)
    # Every object the page describes, one each.
    kinds = sorted(line.split(": ")[2].split()[1] for line in r.stdout.splitlines())
    assert kinds == ["Job", "Secret", "Secret", "Secret", "Service", "StatefulSet"], r.stdout


def test_the_validator_refuses_a_misspelt_field_a_wrong_value_and_an_unknown_kind(tmp_path):
    text = (EXAMPLES / "workers.yaml").read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("completionMode: Indexed", "completionMode: Indexd")
                   .replace("mountPath: /var/lib/hippo-worker",
                            "mountPath: /var/lib/hippo-worker\n              readonly: true")
                   + "---\napiVersion: v1\nkind: Pdo\nmetadata:\n  name: x\n")
    r = validate(bad)
    assert r.returncode == 1, r.stdout
    assert "/spec/completionMode must be one of Indexed, NonIndexed" in r.stdout
    mount = "/spec/template/spec/containers/0/volumeMounts/0"
    assert f"{mount}/readonly is not a field of Job" in r.stdout
    assert "no schema for v1 Pdo" in r.stdout


def pods():
    m = kubernetes.Manifests(EXAMPLES)
    return [m.master_pod(IMAGE_CONFIG)] + m.worker_pods(IMAGE_CONFIG)


def wrong_arguments(command, env):
    """What `hippo --help` and `hippo SUBCOMMAND --help` do not know in a container's command."""
    found = hippo_invocations(shlex.join(command))
    if not found:
        return [f"no hippo subcommand in {shlex.join(command)}"]
    known = subcommands(env) | {"worker"}  # `hippo worker` is hippo-worker
    global_help = help_text(env)
    wrong = []
    for sub, options in found:
        if sub not in known:
            wrong.append(f"`hippo {sub}` is not a subcommand")
            continue
        text = help_text(env, sub) + global_help
        wrong += [f"`hippo {sub}` has no option {o}" for o in options
                  if f"{o} " not in text and f"{o}," not in text]
    return wrong


@pytest.mark.parametrize("pod", pods(), ids=lambda p: p.name)
def test_the_hippo_arguments_are_hippo_s(pod, tmp_path):
    assert wrong_arguments(pod.container.command, environment(tmp_path)) == [], \
        shlex.join(pod.container.command)


def test_the_argument_check_finds_a_wrong_subcommand_and_a_wrong_option(tmp_path):
    env = environment(tmp_path)
    assert wrong_arguments(["hippo", "--db", "p.db", "mastr", "--bind", "x"], env) == [
        "`hippo mastr` is not a subcommand"]
    assert wrong_arguments(["hippo", "worker", "--master", "x", "--threds", "1"], env) == [
        "`hippo worker` has no option --threds"]
    assert wrong_arguments(["sleep", "1"], env) == ["no hippo subcommand in sleep 1"]


def test_the_images_tag_is_the_binarys_version(tmp_path):
    version = subprocess.run(["hippo", "--version"], env=environment(tmp_path),
                             stdout=subprocess.PIPE, text=True, check=True).stdout.split()[1]
    for path in manifests():
        for doc in kubernetes.load_documents(path):
            spec = doc.get("spec", {}).get("template", {}).get("spec", {})
            for c in spec.get("containers", []):
                assert c["image"] == f"hippo:{version}", f"{path.name}: {c['name']}: {c['image']}"


def test_the_worker_names_are_the_completion_indexes():
    workers = kubernetes.Manifests(EXAMPLES).worker_pods(IMAGE_CONFIG)
    names = [c.container.command[c.container.command.index("--name") + 1] for c in workers]
    assert names == [f"worker-{i}" for i in range(len(workers))]
    assert "worker-$(JOB_COMPLETION_INDEX)" in workers[0].container.manifest_args
