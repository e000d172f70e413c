"""A one-node Slurm cluster for tests, started without systemd: munged, slurmctld and slurmd with
their key, sockets, state, pid and log files in one temporary directory, on free ports, addressed
through SLURM_CONF so that nothing on the machine's own Slurm setup is used or changed.

    cluster = LocalSlurm(tmpdir)
    cluster.start()                          # raises ClusterUnavailable with the daemons' last log lines
    code, out, err = cluster.run(["srun", "-N1", "-n2", "hostname"], timeout=60)
    cluster.stop()                           # cancels this cluster's jobs, ends the daemons by PID
"""

import os
import re
import shutil
import signal
import subprocess
import time

from proc import free_port, pid_alive, run, wait_dead

SLURM_CONF_TEMPLATE = """\
ClusterName=dpttest
SlurmctldHost={node}
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
# A job id picked at random names each cluster's jobs apart (and their derived master ports).
FirstJobId={first_job_id}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={dir}/munge.socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
# No cgroups in a container: track processes by parentage, bind nothing.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
NodeName={node} CPUs={cpus} Boards={boards} SocketsPerBoard={sockets} CoresPerSocket={cores} ThreadsPerCore={threads} RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""

# Variables of an enclosing job or launcher that would tell the programs under test who they are.
_FOREIGN_ENV = re.compile(r"^(SLURM_|OMPI_|PMIX_|RANK$|WORLD_SIZE$|LOCAL_RANK$|LOCAL_WORLD_SIZE$|GROUP_RANK$|"
                          r"MASTER_ADDR$|MASTER_PORT$)")


class ClusterUnavailable(Exception):
    """The daemons could not be started here; the message says why, with their last log lines."""


def node_hardware():
    """`slurmd -C`'s description of this machine: {'NodeName': 'vm', 'CPUs': '2', ...}."""
    out = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, timeout=30).stdout
    return dict(field.split("=", 1) for field in out.split() if "=" in field)


class LocalSlurm:
    DAEMONS = ("munged", "slurmctld", "slurmd")

    def __init__(self, directory):
        self.dir = directory
        self.conf = os.path.join(directory, "slurm.conf")
        self.procs = {}  # daemon name -> Popen, each in its own session
        self.node = None

    def env(self, **overrides):
        """This process's environment without any job or launcher identity, pointed at this cluster."""
        env = {k: v for k, v in os.environ.items() if not _FOREIGN_ENV.match(k)}
        env["SLURM_CONF"] = self.conf
        env.update({k: str(v) for k, v in overrides.items()})
        return env

    def run(self, args, timeout, env=None, **kwargs):
        """Runs a client command (srun, sbatch, ...) against this cluster, bounded by `timeout` s."""
        return run(args, timeout=timeout, env=env or self.env(), **kwargs)

    def start(self, ready_timeout=60):
        missing = [d for d in ("munged", "mungekey", "slurmctld", "slurmd", "srun", "sinfo") if not shutil.which(d)]
        if missing:
            raise ClusterUnavailable(f"not installed: {', '.join(missing)} (scripts/install-deps installs them)")
        if os.geteuid() != 0:
            raise ClusterUnavailable("slurmd runs jobs as their users and must be started as root")
        hw = node_hardware()
        if "NodeName" not in hw or int(hw.get("CPUs", "0")) < 2:
            raise ClusterUnavailable(f"slurmd -C reports {hw or 'nothing'}; two CPUs are needed for two tasks")
        self.node = hw["NodeName"]
        for sub in ("state", "spool"):
            os.makedirs(os.path.join(self.dir, sub), exist_ok=True)
        # munged checks that the socket's directory is reachable by everyone.
        os.chmod(self.dir, 0o755)
        with open(self.conf, "w") as f:
            f.write(SLURM_CONF_TEMPLATE.format(
                node=self.node, dir=self.dir, ctld_port=free_port(), slurmd_port=free_port(),
                first_job_id=1000 + int.from_bytes(os.urandom(2), "little") % 8000, cpus=hw["CPUs"],
                boards=hw.get("Boards", 1), sockets=hw.get("SocketsPerBoard", 1),
                cores=hw.get("CoresPerSocket", hw["CPUs"]), threads=hw.get("ThreadsPerCore", 1)))
        key = os.path.join(self.dir, "munge.key")
        subprocess.run(["mungekey", "--create", "--keyfile", key], check=True, capture_output=True, timeout=30)
        self._spawn("munged", ["munged", "--foreground", "--force", f"--key-file={key}",
                               f"--socket={self.dir}/munge.socket", f"--pid-file={self.dir}/munged.pid",
                               f"--log-file={self.dir}/munged.log", f"--seed-file={self.dir}/munged.seed"])
        self._wait_for(lambda: os.path.exists(f"{self.dir}/munge.socket"), 15, "munged never created its socket")
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", self.conf])
        self._spawn("slurmd", ["slurmd", "-D", "-f", self.conf, "-N", self.node])
        self._wait_for(self._node_idle, ready_timeout, f"node {self.node} never became idle")

    def _spawn(self, name, args):
        log = open(os.path.join(self.dir, f"{name}.out"), "w")
        with log:
            self.procs[name] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                start_new_session=True, env=self.env())

    def _node_idle(self):
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise ClusterUnavailable(f"{name} exited with code {proc.returncode}\n{self.log_tails()}")
        try:
            out = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], env=self.env(), capture_output=True,
                                 text=True, timeout=10).stdout
        except subprocess.TimeoutExpired:
            return False
        return out.strip() == "idle"

    def _wait_for(self, ready, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                return
            time.sleep(0.2)
        raise ClusterUnavailable(f"{what} within {timeout} s\n{self.log_tails()}")

    def log_tails(self, lines=8):
        parts = []
        for name in self.DAEMONS:
            for suffix in (".out", ".log"):
                path = os.path.join(self.dir, name + suffix)
                if os.path.exists(path):
                    with open(path, errors="replace") as f:
                        tail = f.read().splitlines()[-lines:]
                    parts.append(f"--- {name}{suffix}:\n" + "\n".join(tail))
        return "\n".join(parts)

    def stop(self):
        """Cancels every job of this cluster, then ends the daemons: SIGTERM, SIGKILL after 10 s.
        Killing each daemon's session also ends any job step (slurmstepd and its tasks) left behind."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            try:
                subprocess.run(["scancel", "--full", "--quiet", "--user", "root"], env=self.env(),
                               capture_output=True, timeout=15)
            except subprocess.TimeoutExpired:
                pass
        for name in reversed(self.DAEMONS):
            proc = self.procs.get(name)
            if proc is None:
                continue
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        self.procs.clear()
        self._kill_step_daemons()

    def _kill_step_daemons(self):
        """slurmstepd and the tasks it starts leave slurmd's session; find this cluster's by the
        SLURM_CONF in their environment and end them by PID."""
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    environ = f.read()
            except OSError:
                continue
            if f"SLURM_CONF={self.conf}".encode() in environ.split(b"\0") and int(entry) != os.getpid():
                pids.append(int(entry))
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        wait_dead([p for p in pids if pid_alive(p)], 10)
