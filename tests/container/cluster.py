"""hippo's OCI image run as containers, the way examples/kubernetes/ runs it.

    /usr/bin/python3 tests/container/cluster.py OCI_LAYOUT:TAG BUILD_DIR WORK_DIR

Podman cannot start a container on these machines (the sandbox refuses its runtime's setrlimit),
so this test is the container runtime: the image's layer, unpacked by umoci, is the lower layer of
an overlay per container; each container is a process tree in namespaces of its own (pid, mount,
uts, ipc, net: `unshare` in an `ip netns`), chrooted into its overlay, as the image's user, with
its volumes bind-mounted. The network is a bridge with a veth pair per container (as
tests/e2e/cluster_test.cc's hosts); the host reaches the containers through the bridge's address.

What each container runs, and how, comes from the manifests (kubernetes.py reads them): the
master's StatefulSet, the workers' Indexed Job (`completions` workers, the completion index in
JOB_COMPLETION_INDEX), the Secrets of examples/kubernetes/keys. The claims are directories here:
the master's plan a fresh one kept across its restarts, hippo-datasets the host's data sets.

Checked: a study submitted from the host with --master ends done with every trial's metrics equal
to `hippo run`'s, bit for bit; a longer one survives a worker container killed and started again
under its name (a new pod: a new emptyDir) and the master container killed and started again on
its plan's volume, and ends done with `hippo run`'s metrics too. Prints the wall times.
"""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kubernetes  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
# The claims that are not made for a pod (the test's storage class): the host's data sets.
CLAIMS = {"hippo-datasets": "/usr/share/datasets"}


class Failure(Exception):
    pass


def run(*args, check=True, **kw):
    r = subprocess.run([str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, **kw)
    if check and r.returncode != 0:
        raise Failure(f"{' '.join(map(str, args))} exited {r.returncode}:\n{r.stdout}")
    return r.stdout


class Network:
    """A bridge with an address for the host, and a network namespace per container, each joined
    to the bridge by a veth pair: 10.N.0.1 the host, 10.N.0.2... the containers."""

    def __init__(self):
        self.tag = f"hk{os.getpid() % 100000}"
        self.net = f"10.{200 + os.getpid() % 50}.0"
        self.bridge = self.tag + "b"
        self.spaces = []
        run("ip", "link", "add", self.bridge, "type", "bridge")
        run("ip", "addr", "add", f"{self.net}.1/24", "dev", self.bridge)
        run("ip", "link", "set", self.bridge, "up")

    def add(self, pod):
        """A namespace for the pod; its address."""
        i = len(self.spaces)
        ns, outside, address = f"{self.tag}-{pod}", f"{self.tag}v{i}", f"{self.net}.{i + 2}"
        run("ip", "netns", "add", ns)
        run("ip", "link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", ns)
        run("ip", "link", "set", outside, "master", self.bridge, "up")
        run("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
        run("ip", "-n", ns, "link", "set", "eth0", "up")
        run("ip", "-n", ns, "link", "set", "lo", "up")
        self.spaces.append(ns)
        return ns, address

    def close(self):
        for ns in self.spaces:
            run("ip", "netns", "del", ns, check=False)
        run("ip", "link", "del", self.bridge, check=False)


class Container:
    """One container of a pod: its overlay on the image's root, its namespaces, its process."""

    SETUP = r"""set -eu
m=$1 rootfs=$2 layer=$3 hostname=$4
shift 4
mount -t overlay overlay -o "lowerdir=$rootfs,upperdir=$layer/upper,workdir=$layer/work" "$m"
mount -t proc proc "$m/proc"
mount -t sysfs -o ro sysfs "$m/sys"
mount -t tmpfs -o nosuid,mode=755 dev "$m/dev"
for d in null zero full random urandom tty; do
  touch "$m/dev/$d" && mount --bind "/dev/$d" "$m/dev/$d"
done
mkdir "$m/dev/shm" && mount -t tmpfs -o nosuid,nodev,mode=1777 shm "$m/dev/shm"
ln -s /proc/self/fd "$m/dev/fd"
hostname "$hostname"
# The volumes: SOURCE TARGET rw|ro, then -- and the process (chroot's arguments).
while [ "$1" != -- ]; do
  if [ -d "$1" ]; then mkdir -p "$m$2"; else mkdir -p "$(dirname "$m$2")" && touch "$m$2"; fi
  mount --bind "$1" "$m$2"
  [ "$3" = rw ] || mount -o remount,bind,ro "$m$2"
  shift 3
done
shift
exec chroot "$@"
"""

    def __init__(self, name, pod, image, network_ns, work, mounts):
        self.name, self.network_ns = name, network_ns
        self.log = work / f"{name}.log"
        layer = work / "layer"
        for d in ("upper", "work", "merged"):
            (layer / d).mkdir(parents=True)
        c = pod.container
        user = f"{c.user}:{c.group}"
        groups = ",".join(str(g) for g in c.groups) or str(c.group)
        env = {"HOSTNAME": pod.hostname, **c.env}  # the runtime's HOSTNAME, then the image's
        process = [f"--userspec={user}", f"--groups={groups}", str(layer / "merged"),
                   "/usr/bin/env", "-i", "-C", c.working_dir or "/",
                   *[f"{k}={v}" for k, v in env.items()], *c.command]
        volumes = [w for m in mounts for w in (m[0], m[1], "ro" if m[2] else "rw")]
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                ["ip", "netns", "exec", network_ns, "unshare", "--pid", "--fork",
                 "--mount", "--uts", "--ipc", "--propagation", "private", "bash", "-c", self.SETUP,
                 "setup", str(layer / "merged"), str(image.rootfs), str(layer), pod.hostname,
                 *volumes, "--", *process],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)

    def kill(self):
        """SIGKILL to every process of the pod, as a node that fails or a pod deleted without
        grace (unshare's --kill-child would not do: the parent-death signal is cleared when chroot
        takes the image's user). Returns when none is left (a StatefulSet's next pod starts only
        when the last one is gone)."""
        for _ in range(100):
            pids = run("ip", "netns", "pids", self.network_ns).split()
            if not pids:
                self.process.wait()
                return
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)
        raise Failure(f"container {self.name}: processes left 5 s after SIGKILL")

    def running(self):
        return self.process.poll() is None

    def output(self):
        return self.log.read_text(errors="replace")


class Cluster:
    def __init__(self, image, manifests, secrets, work, hippo):
        self.image, self.manifests, self.secrets = image, manifests, secrets
        self.work, self.hippo = work, hippo
        self.network = Network()
        self.containers = {}
        self.addresses = {}
        self.claims = dict(CLAIMS)
        self.starts = {}

    def pod_address(self, pod_name):
        if pod_name not in self.addresses:
            self.addresses[pod_name] = self.network.add(pod_name)
        return self.addresses[pod_name]

    def start(self, pod):
        """Starts the pod's container (a new pod each time: fresh emptyDirs and writable layer;
        the same claims, name and address)."""
        n = self.starts[pod.name] = self.starts.get(pod.name, 0) + 1
        work = self.work / "pods" / f"{pod.name}-{n}"
        work.mkdir(parents=True)
        ns, address = self.pod_address(pod.name)
        master_address = self.pod_address(self.manifests.service_pod)[1]
        hosts = work / "hosts"  # kubelet's /etc/hosts, and the cluster DNS's answer for the Service
        hosts.write_text(f"127.0.0.1\tlocalhost\n{address}\t{pod.hostname}\n"
                         f"{master_address}\t{self.manifests.service}\n")
        mounts = [(str(hosts), "/etc/hosts", True)]
        for volume_mount in pod.container.mounts:
            source = self.volume_source(pod, volume_mount.volume, work)
            mounts.append((source, volume_mount.path, volume_mount.read_only))
        container = Container(pod.name, pod, self.image, ns, work, mounts)
        self.containers[pod.name] = container
        return container

    def volume_source(self, pod, volume, work):
        """The host directory that stands for a pod's volume, made as kubelet makes it."""
        kind, what = volume
        group = pod.container.fs_group
        if kind == "emptyDir":
            d = work / "volumes" / what
            d.mkdir(parents=True)
            d.chmod(0o777)
            return str(d)
        if kind == "secret":
            d = work / "volumes" / what["name"]
            files = kubernetes.secret_files(self.secrets, what)
            for path, (data, mode) in files.items():
                (d / path).parent.mkdir(parents=True, exist_ok=True)
                (d / path).write_bytes(data)
                # With fsGroup, kubelet gives the files to the group and lets it read them.
                if group is not None:
                    os.chown(d / path, 0, group)
                    mode |= 0o440
                os.chmod(d / path, mode)
            return str(d)
        if kind == "claim":
            if what not in self.claims:
                d = self.work / "claims" / what
                d.mkdir(parents=True)
                if group is not None:  # fsGroup: the volume is the group's, setgid
                    os.chown(d, 0, group)
                    d.chmod(0o2775)
                self.claims[what] = str(d)
            return self.claims[what]
        raise Failure(f"{pod.name}: a volume of kind {kind} is not supported by this test")

    def close(self):
        """Kills every container, then removes the network: a process left behind would keep
        its network namespace, and its veth pair, alive."""
        left = []
        for c in self.containers.values():
            try:
                c.kill()
            except Failure as e:
                left.append(str(e))
        self.network.close()
        if left:
            raise Failure("; ".join(left))


class Image:
    """The OCI image: its root filesystem unpacked by umoci, its configuration read from the
    layout (Entrypoint, Cmd, Env, User, WorkingDir)."""

    def __init__(self, reference, work):
        layout, tag = reference.rsplit(":", 1)
        bundle = work / "bundle"
        run("umoci", "unpack", "--image", reference, bundle)
        self.rootfs = bundle / "rootfs"
        size = run("du", "-sm", self.rootfs).split()[0]
        print(f"containers: the image's root unpacked by umoci: {size} MiB")
        blobs = Path(layout) / "blobs"

        def blob(descriptor):
            algorithm, digest = descriptor["digest"].split(":")
            return json.loads((blobs / algorithm / digest).read_text())

        index = json.loads((Path(layout) / "index.json").read_text())
        [manifest] = [m for m in index["manifests"]
                      if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag]
        self.config = blob(blob(manifest)["config"])["config"]


def trials(hippo, db, study):
    return json.loads(run(hippo, "--db", db, "--format", "json", "trials", study))


def metrics_by_trial(hippo, db, study):
    return {t["trial"]: json.dumps(t["metrics"], sort_keys=True) for t in trials(hippo, db, study)}


def study_status(hippo, db, study):
    r = subprocess.run([hippo, "--db", db, "--format", "json", "studies"], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    if r.returncode != 0:
        return None  # the plan is being written: ask again
    return next((s["status"] for s in json.loads(r.stdout) if s["name"] == study), None)


def query(db, sql, *parameters):
    """One number from the plan, read-only (the master may still have it open)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as connection:
        return connection.execute(sql, parameters).fetchone()[0]


def wait_for(what, condition, seconds, cluster):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        for c in cluster.containers.values():
            if not c.running():
                raise Failure(f"container {c.name} exited while waiting for {what}:\n{c.output()}")
        time.sleep(0.1)
    logs = "\n".join(f"--- {c.name}\n{c.output()[-3000:]}" for c in cluster.containers.values())
    raise Failure(f"no {what} in {seconds} s\n{logs}")


def reference(hippo, spec, work):
    """`hippo run` of the spec on the host with 2 local workers: its metrics and wall time."""
    db = work / f"reference-{spec.stem}.db"
    start = time.monotonic()
    run(hippo, "--db", db, "run", spec, "--workers", "2")
    seconds = time.monotonic() - start
    name = json.loads(spec.read_text())["name"]
    return metrics_by_trial(hippo, db, name), seconds


def main(reference_name, build, work):
    hippo = str(Path(build) / "hippo")
    work = Path(work)
    manifests = kubernetes.Manifests(REPO / "examples" / "kubernetes")
    keys = work / "keys"
    run(REPO / "examples" / "kubernetes" / "keys", keys, env=dict(os.environ, HIPPO=hippo))
    secrets = kubernetes.load_secrets(keys / "secrets.yaml")
    image = Image(reference_name, work)
    specs = work / "specs"
    specs.mkdir()
    ci = specs / "fmnist-mlp-ci.json"
    ci.write_text((REPO / "examples" / "fmnist-mlp-ci.json").read_text())
    # Long enough to kill a worker, then the master, while it trains: 4 trials of 8 epochs on
    # 16,384 samples, evaluated at each (about 8 s with 2 workers on 2 cores).
    longer = json.loads(ci.read_text())
    longer.update(name="containers-longer", length={"epochs": 8})
    longer["data"]["train_samples"] = 16384
    long_spec = specs / "containers-longer.json"
    long_spec.write_text(json.dumps(longer))

    expected, run_seconds = reference(hippo, ci, work)
    expected_long, _ = reference(hippo, long_spec, work)

    cluster = Cluster(image, manifests, secrets, work, hippo)
    try:
        master = manifests.master_pod(image.config)
        workers = manifests.worker_pods(image.config)
        print(f"containers: master {master.hostname} ({' '.join(master.container.command)}), "
              f"{len(workers)} workers ({' '.join(workers[0].container.command)})")
        start = time.monotonic()
        cluster.start(master)
        wait_for("master listening", lambda: "listening on" in cluster.containers[master.name]
                 .output(), 30, cluster)
        for pod in workers:
            cluster.start(pod)
        address = f"tcp://{cluster.pod_address(master.name)[1]}:{manifests.port}"
        client = [hippo, "--master", address, "--master-key", keys / "master.pub", "--key",
                  keys / "client.key", "--format", "json"]
        submitted = time.monotonic()
        summary = json.loads(run(*client, "submit", ci, "--wait").splitlines()[-1])
        study_seconds = time.monotonic() - submitted
        up_seconds = submitted - start
        plan = cluster.claims[manifests.plan_claim] + "/plan.db"
        if summary["status"] != "done":
            raise Failure(f"the study ended {summary['status']}: {summary}")
        got = metrics_by_trial(hippo, plan, "fmnist-mlp-ci")
        if got != expected:
            raise Failure(f"the containers' metrics differ from hippo run's:\n{got}\n{expected}")
        print(f"containers: fmnist-mlp-ci done, {len(got)} trials equal to hippo run's bit for "
              f"bit; {study_seconds:.1f} s in containers (after {up_seconds:.1f} s to start "
              f"them) against {run_seconds:.1f} s for hippo run --workers 2")

        # Preemption: a worker, then the master, killed while the longer study trains.
        run(*client, "submit", long_spec)
        victim = workers[-1]

        def metrics_count():  # the evaluations so far, over all trials
            return sum(m["name"] == "accuracy" for t in trials(hippo, plan, longer["name"])
                       for m in t["metrics"])
        wait_for("a first metric", lambda: metrics_count() > 0, 60, cluster)
        cluster.containers[victim.name].kill()
        restarted_at = time.time()
        cluster.start(victim)
        print(f"containers: {victim.name} killed and started again after {metrics_count()} "
              "evaluations")
        # It comes back under its name (the completion index).
        victim_name = victim.container.command[victim.container.command.index("--name") + 1]

        def joins():
            return query(plan, "SELECT count(*) FROM events WHERE kind = 'worker_joined' AND "
                         "json_extract(detail, '$.name') = ?", victim_name)
        wait_for(f"{victim_name} joining again", lambda: joins() >= 2, 60, cluster)
        status = study_status(hippo, plan, longer["name"])
        if status != "running":
            raise Failure(f"the longer study ended ({status}) before the master could be killed: "
                          "make it longer")
        cluster.containers[master.name].kill()
        seen = metrics_count()
        cluster.start(master)
        print(f"containers: the master killed and started again on its plan after {seen} "
              "evaluations")
        wait_for("the longer study's end", lambda: study_status(hippo, plan, longer["name"])
                 not in (None, "running"), 300, cluster)
        status = study_status(hippo, plan, longer["name"])
        if status != "done":
            raise Failure(f"the longer study ended {status}")
        got = metrics_by_trial(hippo, plan, longer["name"])
        if got != expected_long:
            raise Failure(f"after the restarts, the metrics differ from hippo run's:\n{got}\n"
                          f"{expected_long}")
        # The restarted worker trained again; the master resumed the study.
        jobs = query(plan, "SELECT count(*) FROM executions WHERE worker = ? AND started_at > ?",
                     victim_name, restarted_at)
        starts = query(plan, "SELECT count(*) FROM events WHERE kind = 'master_started'")
        resumed = query(plan, "SELECT count(*) FROM events WHERE kind = 'resumed'")
        if jobs < 1 or starts != 2 or resumed < 1:
            raise Failure(f"{victim_name} ran {jobs} jobs after its restart; the master started "
                          f"{starts} times, resumed {resumed} studies")
        print(f"containers: {longer['name']} done after a worker and the master were killed, "
              f"{len(got)} trials equal to hippo run's bit for bit ({victim_name}: {jobs} jobs "
              f"after its restart; the master resumed the study)")
    finally:
        cluster.close()


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__.split("\n\n")[1])
    try:
        main(*sys.argv[1:])
    except Failure as e:
        sys.exit(f"container test FAILED: {e}")
