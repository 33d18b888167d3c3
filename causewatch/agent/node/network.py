"""Network: /proc/net/dev, /sys/class/net, softnet_stat, netstat/snmp/snmp6, sockstat, arp, udp, conntrack
(node_exporter's netdev, netclass, softnet, netstat, sockstat, arp, udp_queues and conntrack collectors)."""

from __future__ import annotations

import os
import re

from causewatch.agent.node.files import columns, name, number, path, read, read_or

NETDEV_EXCLUDE = re.compile(r"^lo$")   # node_exporter's default --collector.netdev.device-exclude
NETDEV_FIELDS = tuple(f"node_network_receive_{f}_total" for f in
                      ("bytes", "packets", "errs", "drop", "fifo", "frame", "compressed", "multicast")) + \
    tuple(f"node_network_transmit_{f}_total" for f in
          ("bytes", "packets", "errs", "drop", "fifo", "colls", "carrier", "compressed"))
NETSTAT_FIELDS = re.compile(
    r"^(.*_(InErrors|InErrs)|Ip_Forwarding|Ip(6|Ext)_(InOctets|OutOctets)|Icmp6?_(InMsgs|OutMsgs)|"
    r"TcpExt_(Listen.*|Syncookies.*|TCPSynRetrans|TCPTimeouts)|Tcp_(ActiveOpens|InSegs|OutSegs|OutRsts|"
    r"PassiveOpens|RetransSegs|CurrEstab)|Udp6?_(InDatagrams|OutDatagrams|NoPorts|RcvbufErrors|SndbufErrors))$")
_SNMP6 = re.compile(r"^(Ip6|Icmp6|UdpLite6|Udp6)(.+)$")
PAGE = os.sysconf("SC_PAGE_SIZE")


class NetDev:
    """/proc/net/dev: 16 counters per interface, the numbers split once and each read at its place."""
    name = "netdev"

    def __init__(self, proc: str = "/proc", exclude: re.Pattern = NETDEV_EXCLUDE):
        self.file, self.exclude = path(proc, "net/dev"), exclude
        self._names: dict[tuple[str, ...], list[tuple[str, int]]] = {}

    def collect(self) -> dict[str, float]:
        rows = [line.split(":", 1) for line in read(self.file).splitlines()[2:]]
        if not rows or any(len(r) != 2 for r in rows):
            raise ValueError(f"{self.file}: no interfaces, or a line without 'interface:'")
        devices = tuple(r[0].strip() for r in rows)
        numbers = " ".join(r[1] for r in rows).split()
        if len(numbers) != 16 * len(rows):
            raise ValueError(f"{self.file}: {len(numbers)} numbers for {len(rows)} interfaces (16 each)")
        places = self._names.get(devices) or self._plan(devices)
        return {metric: float(numbers[i]) for metric, i in places}

    def _plan(self, devices):
        keep = [i for i, d in enumerate(devices) if not self.exclude.match(d)]
        self._names = {devices: [(name(f, ("device", devices[i])), 16 * i + j) for j, f in enumerate(NETDEV_FIELDS)
                                 for i in keep]}
        return self._names[devices]


# /sys/class/net/IF/<file> -> node_exporter's name (the int files; speed, operstate and info below)
_NETCLASS = {"addr_assign_type": "address_assign_type", "carrier": "carrier",
             "carrier_changes": "carrier_changes_total",
             "carrier_up_count": "carrier_up_changes_total", "carrier_down_count": "carrier_down_changes_total",
             "dev_id": "device_id", "dormant": "dormant", "flags": "flags", "ifindex": "iface_id",
             "iflink": "iface_link", "link_mode": "iface_link_mode", "mtu": "mtu_bytes",
             "name_assign_type": "name_assign_type", "netdev_group": "net_dev_group", "type": "protocol_type",
             "tx_queue_len": "transmit_queue_length", "statistics/rx_nohandler": "receive_nohandler_total"}


class NetClass:
    """/sys/class/net: link state, MTU, speed and the info series per interface (lo included, as
    node_exporter's netclass); a file a driver does not offer is left out. Each interface's file paths and
    series names are made once per set of interfaces."""
    name = "netclass"

    def __init__(self, sys: str = "/sys"):
        self.dir = path(sys, "class/net")
        self._plans: dict[tuple[str, ...], list[tuple]] = {}

    def collect(self) -> dict[str, float]:
        devices = tuple(sorted(os.listdir(self.dir)))
        out = {}
        for device, base, files, up, speed in self._plans.get(devices) or self._plan(devices):
            for file, metric in files:
                text = read_or(file)
                if text:
                    out[metric] = number(text)
            operstate = read_or(base + "operstate", "")
            out[up] = float(operstate == "up")
            value = read_or(base + "speed")
            if value and value.lstrip("-").isdigit():   # -1 (unknown) too, as node_exporter gives it
                out[speed] = int(value) * 125_000.0
            info = {"address": read_or(base + "address", ""), "broadcast": read_or(base + "broadcast", ""),
                    "device": device, "duplex": read_or(base + "duplex", ""),
                    "ifalias": read_or(base + "ifalias", ""), "operstate": operstate}
            out[name("node_network_info", *sorted(info.items()))] = 1.0
        return out

    def _plan(self, devices: tuple[str, ...]) -> list[tuple]:
        """(device, its folder, (file, metric) of each number file, its up and speed series) per interface."""
        plans = []
        for device in devices:
            base = path(self.dir, device) + "/"
            files = [(base + file, name(f"node_network_{metric}", ("device", device)))
                     for file, metric in _NETCLASS.items()]
            plans.append((device, base, files, name("node_network_up", ("device", device)),
                          name("node_network_speed_bytes", ("device", device))))
        self._plans = {devices: plans}   # a changed set replaces the old
        return plans


class SoftNet:
    """/proc/net/softnet_stat, one hex row per CPU: packets processed, dropped, and time squeezes."""
    name = "softnet"

    def __init__(self, proc: str = "/proc"):
        self.file = path(proc, "net/softnet_stat")

    def collect(self) -> dict[str, float]:
        width, fields = columns(read(self.file))
        if width < 3:
            raise ValueError(f"{self.file}: {width} columns, fewer than 3")
        out = {}
        for j, metric in enumerate(("node_softnet_processed_total", "node_softnet_dropped_total",
                                    "node_softnet_times_squeezed_total")):
            column = fields[j::width]
            out.update({name(metric, ("cpu", str(i))): float(int(v, 16)) for i, v in enumerate(column)})
        return out


class NetStat:
    """/proc/net/netstat and snmp (header and value line pairs) and snmp6 (name value lines), the fields
    node_exporter keeps by default, untyped as there."""
    name = "netstat"

    def __init__(self, proc: str = "/proc", fields: re.Pattern = NETSTAT_FIELDS):
        self.dir, self.fields = path(proc, "net"), fields
        self._keep: dict[tuple[str, ...], list[tuple[int, str]]] = {}

    def collect(self) -> dict[str, float]:
        keys, values = [], []
        for file in ("netstat", "snmp"):
            lines = read(path(self.dir, file)).splitlines()
            if len(lines) % 2:
                raise ValueError(f"{self.dir}/{file}: {len(lines)} lines, not header and value pairs")
            for head, row in zip(lines[0::2], lines[1::2]):
                proto, names = head.split(":", 1)
                numbers = row.split(":", 1)[1].split()
                names = names.split()
                if len(names) != len(numbers) or not row.startswith(proto + ":"):
                    raise ValueError(f"{self.dir}/{file}: {proto} has {len(names)} names, {len(numbers)} values")
                keys.extend(f"{proto}_{n}" for n in names)
                values.extend(numbers)
        snmp6 = read_or(path(self.dir, "snmp6"), "").split()
        for key, value in zip(snmp6[0::2], snmp6[1::2]):
            m = _SNMP6.match(key)
            if m:
                keys.append(f"{m[1]}_{m[2]}")
                values.append(value)
        keep = self._keep.get(tuple(keys)) or self._plan(tuple(keys))
        return {metric: float(values[i]) for i, metric in keep}

    def _plan(self, keys):
        self._keep = {keys: [(i, f"node_netstat_{k}") for i, k in enumerate(keys) if self.fields.match(k)]}
        return self._keep[keys]


class SockStat:
    """/proc/net/sockstat and sockstat6: sockets in use per protocol; memory also in bytes."""
    name = "sockstat"

    def __init__(self, proc: str = "/proc"):
        self.dir = path(proc, "net")

    def collect(self) -> dict[str, float]:
        out = {}
        for file in ("sockstat", "sockstat6"):
            text = read(path(self.dir, file)) if file == "sockstat" else read_or(path(self.dir, file), "")
            for line in text.splitlines():
                proto, _, rest = line.partition(":")
                words = rest.split()
                if len(words) % 2:
                    raise ValueError(f"{self.dir}/{file}: {line[:60]!r} is not name-value pairs")
                for key, value in zip(words[0::2], words[1::2]):
                    out[f"node_sockstat_{proto}_{key}"] = float(value)
                    if key == "mem":
                        out[f"node_sockstat_{proto}_mem_bytes"] = float(value) * PAGE
        return out


class Arp:
    name = "arp"

    def __init__(self, proc: str = "/proc"):
        self.file = path(proc, "net/arp")

    def collect(self) -> dict[str, float]:
        counts: dict[str, int] = {}
        for line in read(self.file).splitlines()[1:]:
            fields = line.split()
            if len(fields) < 6:
                raise ValueError(f"{self.file}: {line[:60]!r} has fewer than 6 columns")
            counts[fields[5]] = counts.get(fields[5], 0) + 1
        return {name("node_arp_entries", ("device", d)): float(c) for d, c in counts.items()}


class UdpQueues:
    """The bytes queued on UDP sockets, summed per direction, from /proc/net/udp and udp6."""
    name = "udp_queues"

    def __init__(self, proc: str = "/proc"):
        self.dir = path(proc, "net")

    def collect(self) -> dict[str, float]:
        out = {}
        for ip, file in (("v4", "udp"), ("v6", "udp6")):
            tx = rx = 0
            for line in read(path(self.dir, file)).splitlines()[1:]:
                queues = line.split()[4]
                t, _, r = queues.partition(":")
                tx, rx = tx + int(t, 16), rx + int(r, 16)
            out[name("node_udp_queues", ("ip", ip), ("queue", "tx"))] = float(tx)
            out[name("node_udp_queues", ("ip", ip), ("queue", "rx"))] = float(rx)
        return out


_CONNTRACK_STAT = ("found", "invalid", "ignore", "insert", "insert_failed", "drop", "early_drop", "search_restart")


class Conntrack:
    """Connection tracking's table size and limit, and its per-CPU statistics summed."""
    name = "conntrack"

    def __init__(self, proc: str = "/proc"):
        self.proc = proc

    def collect(self) -> dict[str, float]:
        out = {"node_nf_conntrack_entries": float(read(path(self.proc, "sys/net/netfilter/nf_conntrack_count"))),
               "node_nf_conntrack_entries_limit": float(read(path(self.proc, "sys/net/netfilter/nf_conntrack_max")))}
        text = read_or(path(self.proc, "net/stat/nf_conntrack"))
        if text:
            head, *rows = text.splitlines()
            keys = head.split()
            totals = [sum(int(v, 16) for v in col) for col in zip(*(r.split() for r in rows))]
            stats = dict(zip(keys, totals))
            out.update({f"node_nf_conntrack_stat_{k}": float(stats[k]) for k in _CONNTRACK_STAT if k in stats})
        return out
