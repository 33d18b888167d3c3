"""What runs on the node, found by the cgroup v2 hierarchy's folder names alone: Slurm jobs and steps,
systemd services, containers and Kubernetes pods (docs/agent.md, "Units").

A scan is one walk of folder listings (no file is read), descending only where units can lie below:
not into a service, a container or a step, whose sub-cgroups are their own business. Each unit is
named KIND:ID (`wire.UNIT_KINDS`), the scope of its samples.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

MAX_DEPTH = 12    # folders below the root a unit may lie at (kubepods.slice/…/pod/container is 4)
_HEX = r"[0-9a-f]{64}"
_JOB = re.compile(r"job_(\d+)")
_STEP = re.compile(r"step_([A-Za-z0-9_]+)")
# a container's scope or folder by runtime: systemd's cgroup driver names scopes, cgroupfs plain ids
_CONTAINERS = ((re.compile(rf"docker-({_HEX})\.scope"), "docker"), (re.compile(rf"libpod-({_HEX})\.scope"), "podman"),
               (re.compile(rf"cri-containerd-({_HEX})\.scope"), "containerd"),
               (re.compile(rf"crio-({_HEX})\.scope"), "cri-o"), (re.compile(_HEX), ""))
# kubepods-burstable-pod1234_5678.slice (systemd, '-' written '_') or pod1234-5678 (cgroupfs)
_POD = re.compile(r"(?:kubepods(?:-[a-z]+)*-)?pod([0-9a-f_-]{8,})(?:\.slice)?")
SHORT_ID = 12   # a container's id in its unit name, as `docker ps` shows it


@dataclass
class Found:
    """A unit a scan found: its name, kind, cgroup folder (absolute) and what its path says of it."""
    name: str
    kind: str
    path: str
    parent: str | None = None
    job_id: str | None = None
    step: str | None = None
    extra: dict = field(default_factory=dict)


def _container(folder: str, parts: tuple[str, ...]) -> Found | None:
    for pattern, runtime in _CONTAINERS:
        m = pattern.fullmatch(folder)
        if m:
            # a bare id is a container only in a runtime's own folder (cgroupfs: /docker/ID, /kubepods/…/ID)
            if not runtime and not any(p == "docker" or p.startswith("kubepods") for p in parts):
                return None
            runtime = runtime or ("docker" if "docker" in parts else "kubernetes")
            return Found(f"container:{m[1 if m.groups() else 0][:SHORT_ID]}", "container", "",
                         extra={"runtime": runtime, "container_id": m[1 if m.groups() else 0]})
    return None


def classify(folder: str, parts: tuple[str, ...], parent: Found | None) -> Found | None:
    """The unit a cgroup folder named `folder` is, below the folders `parts` (relative to the root) and
    the unit `parent` it lies in (None: it is no unit)."""
    if parent is not None and parent.kind == "job":
        m = _STEP.fullmatch(folder)
        return m and Found(f"step:{parent.job_id}.{m[1]}", "step", "", parent.name, parent.job_id, m[1])
    m = _JOB.fullmatch(folder)
    if m:
        return Found(f"job:{m[1]}", "job", "", job_id=m[1])
    if folder.endswith(".service") and "system.slice" in parts:
        return Found(f"service:{folder}", "service", "")
    m = _POD.fullmatch(folder)
    if m and any(p.startswith("kubepods") for p in (*parts, folder)):
        uid = m[1].replace("_", "-")
        return Found(f"pod:{uid}", "pod", "", extra={"pod_uid": uid})
    found = _container(folder, parts)
    if found is not None and parent is not None and parent.kind == "pod":
        found.parent = parent.name
    return found


def descends(unit: Found | None) -> bool:
    """Whether units can lie below this folder: below a job (its steps) and a pod (its containers)."""
    return unit is None or unit.kind in ("job", "pod")


def scan(root: str) -> dict[str, Found]:
    """Every unit under the cgroup v2 hierarchy at `root`, by name; a folder that vanishes mid-walk
    (a unit ending) is passed over."""
    found: dict[str, Found] = {}
    stack: list[tuple[str, tuple[str, ...], Found | None]] = [(root, (), None)]
    while stack:
        path, parts, parent = stack.pop()
        try:
            entries = [e for e in os.scandir(path) if e.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        for entry in entries:
            unit = classify(entry.name, parts, parent)
            if unit is not None:
                unit.path = entry.path
                found.setdefault(unit.name, unit)
            if descends(unit) and len(parts) < MAX_DEPTH:
                stack.append((entry.path, (*parts, entry.name), unit or parent))
    return found
