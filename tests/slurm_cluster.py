"""A real Slurm on this machine for tests: Debian's slurmctld and three `slurmd -N nX` (munge on a private
socket), configured with proctrack/linuxproc and task/none (no job cgroups), children of the test."""

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest
from support import free_port, wait_for

NEEDED = ("slurmctld", "slurmd", "srun", "scontrol", "sinfo", "munged")


def exe(name: str) -> str:
    """A program's path: on PATH, else Debian's /usr/sbin (which a non-login root PATH may lack)."""
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin") or name


missing = [p for p in NEEDED if exe(p) == p]
SLURM_MARKS = [
    pytest.mark.skipif(bool(missing), reason=f"{', '.join(missing)} missing"),
    pytest.mark.skipif(os.geteuid() != 0, reason="slurmd and munged start only as root: run `make test` as root"),
]
NODES = ("n1", "n2", "n3")


def conf(d: Path, munge: str) -> str:
    nodes = "\n".join(f"NodeName={n} NodeHostname=localhost Port={free_port()} CPUs=1 RealMemory=200 Features=cw"
                      for n in NODES)
    return f"""ClusterName=cw
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={munge}
SlurmctldPort={free_port()}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd-%n.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
ReturnToService=2
{nodes}
PartitionName=p Nodes={','.join(NODES)} Default=YES State=UP
"""


class Cluster:
    """munged, slurmctld and one slurmd per node, children of this test module."""

    def __init__(self, d: Path):
        self.d, self.procs = d, {}
        # munged refuses a socket folder others may write, and runs as munge: a folder of its own
        self.munge = Path(tempfile.mkdtemp(prefix="cw-munge-"))
        shutil.chown(self.munge, "munge", "munge")
        self.munge.chmod(0o711)
        (d / "state").mkdir()
        (d / "spool").mkdir()
        (d / "slurm.conf").write_text(conf(d, f"{self.munge}/sock"))
        self.env = dict(os.environ, SLURM_CONF=str(d / "slurm.conf"))

    def start(self) -> "Cluster":
        m = self.munge
        self.procs["munged"] = subprocess.Popen(
            [exe("munged"), "-F", f"--socket={m}/sock", f"--pid-file={m}/pid", f"--log-file={m}/log",
             f"--seed-file={m}/seed"], user="munge", group="munge", stderr=subprocess.DEVNULL)
        assert wait_for(lambda: (m / "sock").exists(), timeout=20), "munged did not start"
        self.start_controller(first=True)
        for n in NODES:
            self.procs[n] = self._daemon([exe("slurmd"), "-D", "-N", n], n)
        assert wait_for(lambda: self.states() == {"idle"}, timeout=60), f"nodes not idle: {self.states()}"
        return self

    def _daemon(self, argv, name):
        return subprocess.Popen(argv, env=self.env, stdout=subprocess.DEVNULL,
                                stderr=open(self.d / f"{name}.err", "w"))

    def start_controller(self, first=False) -> None:
        self.procs["slurmctld"] = self._daemon([exe("slurmctld"), "-D", *(["-i"] if first else [])], "slurmctld")
        assert wait_for(lambda: self.run("scontrol", "ping").returncode == 0, timeout=30), "slurmctld did not start"

    def stop_controller(self) -> None:
        ctld = self.procs.pop("slurmctld")
        ctld.send_signal(signal.SIGTERM)
        ctld.wait(30)

    def run(self, *argv, check=False, timeout=60) -> subprocess.CompletedProcess:
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, check=check, timeout=timeout)

    def states(self, busy=()) -> set[str]:
        """The states of the nodes not in `busy` ({"?"} while sinfo does not list them all)."""
        out = dict(line.split() for line in self.run("sinfo", "-h", "-N", "-o", "%N %t").stdout.splitlines())
        return {s for n, s in out.items() if n not in busy} if len(out) == len(NODES) else {"?"}

    def lands(self, *options, busy=()) -> str:
        """The node a one-node job is allocated: srun runs `printenv SLURMD_NODENAME` there. Asked once every
        node but `busy` is idle: one still completing the last job is not free, and the job goes elsewhere."""
        assert wait_for(lambda: self.states(busy) == {"idle"}, timeout=30), f"not idle: {self.states(busy)}"
        done = self.run("srun", "-N1", *options, "printenv", "SLURMD_NODENAME", check=True)
        return done.stdout.strip()

    def node(self, name) -> dict:
        line = self.run("scontrol", "show", "node", name, "--oneliner", check=True).stdout
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        return {"weight": int(fields["Weight"]), "features": fields["ActiveFeatures"].split(",")}

    def stop(self) -> None:
        for p in reversed(list(self.procs.values())):
            p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(self.munge, ignore_errors=True)
