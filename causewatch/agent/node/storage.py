"""/proc/diskstats and the mounted filesystems: node_exporter's diskstats and filesystem collectors."""

from __future__ import annotations

import os
import re
import threading
import time

from causewatch.agent.node.files import columns, name, path, read, read_or

# node_exporter's defaults (Debian's package): partitions, loops and ram disks are left out
DISK_EXCLUDE = re.compile(r"^(ram|loop|fd|(h|s|v|xv)d[a-z]|nvme\d+n\d+p)\d+$")
MOUNT_EXCLUDE = re.compile(r"^/(dev|proc|run|sys|mnt|media|var/lib/docker/.+|var/lib/containers/storage/.+)($|/)")
FS_EXCLUDE = re.compile(r"^(autofs|binfmt_misc|bpf|cgroup2?|configfs|debugfs|devpts|devtmpfs|fusectl|hugetlbfs|"
                        r"iso9660|mqueue|nsfs|overlay|proc|procfs|pstore|rpc_pipefs|securityfs|selinuxfs|squashfs|"
                        r"sysfs|tracefs)$")
# filesystems whose statvfs waits on a server: each is read in a thread of its own, against a deadline
REMOTE = re.compile(r"^(nfs4?|cifs|smb3?|fuse(\..+)?|9p|ceph|glusterfs|lustre|gpfs|beegfs|afs|davfs)$")
# /proc/diskstats columns after major, minor, device: (node_exporter name, factor to base units)
DISK_FIELDS = (("reads_completed_total", 1), ("reads_merged_total", 1), ("read_bytes_total", 512),
               ("read_time_seconds_total", 1e-3), ("writes_completed_total", 1), ("writes_merged_total", 1),
               ("written_bytes_total", 512), ("write_time_seconds_total", 1e-3), ("io_now", 1),
               ("io_time_seconds_total", 1e-3), ("io_time_weighted_seconds_total", 1e-3),
               ("discards_completed_total", 1), ("discards_merged_total", 1), ("discarded_sectors_total", 1),
               ("discard_time_seconds_total", 1e-3), ("flush_requests_total", 1),
               ("flush_requests_time_seconds_total", 1e-3))
_UDEV = {"model": "ID_MODEL", "path": "ID_PATH", "revision": "ID_REVISION", "serial": "ID_SERIAL_SHORT",
         "wwn": "ID_WWN"}


class DiskStats:
    """Per device counters from one split of /proc/diskstats, each value read at its place in the split;
    names, places and node_disk_info worked out once per set of devices."""
    name = "diskstats"

    def __init__(self, proc: str = "/proc", udev: str = "/run/udev/data", exclude: re.Pattern = DISK_EXCLUDE):
        self.file, self.udev, self.exclude = path(proc, "diskstats"), udev, exclude
        self._layout: dict[tuple, tuple[list[tuple[str, int, float]], dict[str, float]]] = {}

    def collect(self) -> dict[str, float]:
        width, fields = columns(read(self.file))
        if width < 14:
            raise ValueError(f"{self.file}: {width} columns, fewer than the 14 of any kernel")
        devices = (width, *fields[2::width])
        values, info = self._layout.get(devices) or self._plan(devices, fields, width)
        out = {metric: float(fields[i]) * factor for metric, i, factor in values}
        out.update(info)
        return out

    def _plan(self, devices, fields, width):
        """(metric, place, factor) of each kept value and the devices' info series, for one set of devices."""
        keep = [i for i, d in enumerate(devices[1:]) if not self.exclude.match(d)]
        values = [(name(f"node_disk_{f}", ("device", devices[1 + i])), i * width + 3 + j, factor)
                  for j, (f, factor) in enumerate(DISK_FIELDS[:width - 3]) for i in keep]
        info = {self._info(devices[1 + i], fields[i * width], fields[i * width + 1]): 1.0 for i in keep}
        self._layout = {devices: (values, info)}   # a changed set replaces the old
        return self._layout[devices]

    def _info(self, device: str, major: str, minor: str) -> str:
        env = {}
        for line in (read_or(path(self.udev, f"b{major}:{minor}"), "") or "").splitlines():
            key, _, value = line.removeprefix("E:").partition("=")
            env[key] = value
        labels = {k: env.get(v, "") for k, v in _UDEV.items()}
        return name("node_disk_info", ("device", device), ("major", major), ("minor", minor), *sorted(labels.items()))


def _unoctal(text: str) -> str:
    """A mounts field with its \\040-style escapes undone."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), text) if "\\" in text else text


class Filesystems:
    """statvfs of each mounted filesystem node_exporter would report. A remote one's statvfs runs in a
    thread: past `mount_timeout` the mount is reported with node_filesystem_device_error 1 and skipped
    until that call returns (as node_exporter's stuck mounts), so a hung server stops only its mount."""
    name = "filesystem"

    def __init__(self, proc: str = "/proc", mount_timeout: float = 1.0, statvfs=os.statvfs):
        self.proc, self.mount_timeout, self.statvfs = proc, mount_timeout, statvfs
        self.stuck: dict[str, float] = {}   # mount point -> when its statvfs began

    def mounts(self) -> list[tuple[str, str, str, bool]]:
        """(device, mount point, fstype, read-only) of each reported mount, the first of a mount point."""
        try:
            text = read(path(self.proc, "1/mounts"))
        except OSError:   # an unprivileged agent may not read init's
            text = read(path(self.proc, "self/mounts"))
        seen, out = set(), []
        for line in text.splitlines():
            fields = line.split()
            if len(fields) < 4:
                raise ValueError(f"mounts: {line[:60]!r} has fewer than 4 fields")
            device, mountpoint, fstype = _unoctal(fields[0]), _unoctal(fields[1]), fields[2]
            if mountpoint in seen or MOUNT_EXCLUDE.match(mountpoint) or FS_EXCLUDE.match(fstype):
                continue
            seen.add(mountpoint)
            out.append((device, mountpoint, fstype, "ro" in fields[3].split(",")))
        return out

    def collect(self) -> dict[str, float]:
        out = {}
        for device, mountpoint, fstype, readonly in self.mounts():
            labels = (("device", device), ("fstype", fstype), ("mountpoint", mountpoint))
            out[name("node_filesystem_readonly", *labels)] = float(readonly)
            st = self._stat(mountpoint, fstype)
            out[name("node_filesystem_device_error", *labels)] = float(st is None)
            if st is not None:
                out.update({name("node_filesystem_size_bytes", *labels): float(st.f_blocks * st.f_bsize),
                            name("node_filesystem_free_bytes", *labels): float(st.f_bfree * st.f_bsize),
                            name("node_filesystem_avail_bytes", *labels): float(st.f_bavail * st.f_bsize),
                            name("node_filesystem_files", *labels): float(st.f_files),
                            name("node_filesystem_files_free", *labels): float(st.f_ffree)})
        return out

    def _stat(self, mountpoint: str, fstype: str):
        if mountpoint in self.stuck:
            return None
        if not REMOTE.match(fstype):
            try:
                return self.statvfs(mountpoint)
            except OSError:
                return None
        result: list = []
        done = threading.Event()
        thread = threading.Thread(target=self._stat_into, args=(mountpoint, result, done), daemon=True,
                                  name=f"causewatch-statvfs:{mountpoint}")
        self.stuck[mountpoint] = time.monotonic()
        thread.start()
        if done.wait(self.mount_timeout):
            return result[0] if result else None
        return None   # left in `stuck` until its call returns

    def _stat_into(self, mountpoint: str, result: list, done: threading.Event) -> None:
        try:
            result.append(self.statvfs(mountpoint))
        except OSError:
            pass
        finally:
            self.stuck.pop(mountpoint, None)
            done.set()
