"""What the node runs: node_exporter's uname, os and selinux collectors (info series, value 1)."""

from __future__ import annotations

import os
import re

from causewatch.agent.node.files import name, path, read, read_or

_OS_LABELS = ("build_id", "id", "id_like", "image_id", "image_version", "name", "pretty_name", "variant",
              "variant_id", "version", "version_codename", "version_id")
_VERSION = re.compile(r"^\d+(\.\d+)?")


class Uname:
    name = "uname"

    def __init__(self, proc: str = "/proc"):
        self.proc = proc

    def collect(self) -> dict[str, float]:
        u = os.uname()
        labels = {"domainname": read_or(path(self.proc, "sys/kernel/domainname"), "(none)"), "machine": u.machine,
                  "nodename": u.nodename, "release": u.release, "sysname": u.sysname, "version": u.version}
        return {name("node_uname_info", *sorted(labels.items())): 1.0}


class OsRelease:
    name = "os"

    def __init__(self, files: tuple[str, ...] = ("/etc/os-release", "/usr/lib/os-release")):
        self.files = files

    def collect(self) -> dict[str, float]:
        text = next((t for f in self.files if (t := read_or(f)) is not None), None)
        if text is None:
            raise FileNotFoundError(f"none of {', '.join(self.files)}")
        fields = {}
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                fields[key.strip().lower()] = value.strip().strip("\"'")
        labels = {k: fields.get(k, "") for k in _OS_LABELS}
        out = {name("node_os_info", *sorted(labels.items())): 1.0}
        version = _VERSION.match(fields.get("version_id", ""))
        if version:
            out[name("node_os_version", ("id", labels["id"]), ("id_like", labels["id_like"]),
                     ("name", labels["name"]))] = float(version[0])
        return out


class SELinux:
    name = "selinux"

    def __init__(self, sys: str = "/sys"):
        self.dir = path(sys, "fs/selinux")

    def collect(self) -> dict[str, float]:
        if not os.path.isdir(self.dir):
            return {"node_selinux_enabled": 0.0}
        return {"node_selinux_enabled": 1.0,
                "node_selinux_current_mode": float(read(path(self.dir, "enforce")).strip())}
