"""`causewatch agent`: sample this node (and one target) and stream it to the daemon."""

from __future__ import annotations

import argparse
import json
import logging

from causewatch import config
from causewatch.config import AgentConfig
from causewatch.errors import InputError

log = logging.getLogger("causewatch.agent")
UNDELIVERED = 3   # exit status: frames were left unacked in the spool

EPILOG = """examples:
  causewatch agent --config /etc/causewatch/agent.toml          # node metrics only
  causewatch agent --daemon tcp://10.0.0.5:5555 --pid 4242      # and one process with its threads
  causewatch agent --match postgres                             # the oldest process named postgres
  causewatch agent --cgroup system.slice/nginx.service          # a cgroup (perf_event or cgroup2)
  causewatch agent --node n17 -- ./solver --size 4096           # launch a command, stop when it ends
  causewatch agent --node n17 --daemon tcp://10.0.0.5:5555 --server-key server.key --client-key n17.key_secret
  causewatch agent --check --json                               # what can be counted here, and why not

exit status: 0 when the daemon acked every frame; a launched command's own status when it failed
(128+N when signal N killed it); else 3 when frames were left unacked, e.g. by a daemon that does not
answer (they stay in the spool for the next run; a WARNING line names it); 2 for a mistake in the
flags or the config, or when the daemon refused every frame.
"""


def add_arguments(p):
    p.add_argument("--config", help="TOML file (table [agent] or top level)")
    p.add_argument("--daemon", help="daemon endpoint (default tcp://127.0.0.1:5555)")
    p.add_argument("--daemons", metavar="NAME=ENDPOINT,...",
                   help="a sharded site's daemons: send to the one this node hashes to (docs/shards.md)")
    p.add_argument("--node", help="node name (default: the host name)")
    p.add_argument("--ipc", help="ipc:// endpoint where instrumented programs send task/region records")
    p.add_argument("--server-key", help="the daemon's public key file (server.key): turns CURVE on")
    p.add_argument("--client-key", help="this agent's secret key file (NAME.key_secret), authorized as --node")
    p.add_argument("--spool", help="folder where frames wait for the daemon's ack (default: $STATE_DIRECTORY/spool "
                                   "under a systemd unit, else $XDG_CACHE_HOME/causewatch/spool, ~/.cache/… unset)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--pid", type=int, help="watch this process and its threads")
    which.add_argument("--match", metavar="NAME", help="watch the oldest process with this name")
    which.add_argument("--cgroup", metavar="PATH", help="watch this cgroup (absolute or under /sys/fs/cgroup)")
    p.add_argument("--stop-drain-seconds", "--flush-timeout", type=float, dest="stop_drain_seconds",
                   metavar="SECONDS", help="seconds to wait for the daemon's acks at exit (stop_drain_seconds, "
                                           "default 10; unacked frames stay spooled: exit 3)")
    p.add_argument("--leave-running", action="store_true",
                   help="when the agent stops, leave a launched command running (default: stop it)")
    p.add_argument("--stop-grace", type=float, default=10.0, metavar="SECONDS",
                   help="seconds between SIGTERM and SIGKILL when stopping a launched command (default 10)")
    p.add_argument("--check", action="store_true", help="print what can be counted on this node and exit")
    p.add_argument("--json", action="store_true", help="with --check: print the hello body as JSON")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS: launch and watch a command")


def load_config(args) -> AgentConfig:
    return config.load(AgentConfig, args.config, "agent", daemon=args.daemon, node=args.node, ipc=args.ipc,
                       server_key=args.server_key, client_key=args.client_key, spool=args.spool,
                       stop_drain_seconds=args.stop_drain_seconds,
                       daemons=args.daemons and [d.strip() for d in args.daemons.split(",") if d.strip()])


def probe_runner(cfg: AgentConfig):
    """The agent's probe runner: the probe is loaded on the first run_probe command (it needs scipy, which
    a plain agent install lacks: `pip install 'causewatch[all]'` on nodes that run probes), and waits for
    the node to be idle as `cfg` says."""
    def run_probe(body: dict) -> dict:
        from causewatch.probe.run import handle_run_probe
        return handle_run_probe(body, cfg.probe_max_other_cpu, cfg.probe_idle_wait)
    return run_probe


def run(args) -> int:
    from causewatch.agent import runner, shard
    from causewatch.agent.sender import Sender
    cfg = load_config(args)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if cmd and (args.pid or args.match or args.cgroup):
        raise InputError("give either a target (--pid/--match/--cgroup) or a command after --, not both")
    if args.json and not args.check:
        raise InputError("--json applies only to --check (the agent streams to the daemon, it prints nothing)")
    if args.stop_grace < 0:
        raise InputError(f"--stop-grace must be 0 or more seconds, got {args.stop_grace}")
    if args.check:
        return _check(cfg, runner.find_target(args.pid, args.match, args.cgroup), args.json)
    cfg, name = shard.choose(cfg)
    if name:
        log.info("node %s sends to shard %s (%s)", cfg.node, name, cfg.daemon)
    drains = [shard.Drain(c).start() for c in shard.hand_over(cfg, name)]
    target = (runner.launch(cmd, args.leave_running, cfg=cfg, config_file=args.config) if cmd
              else runner.find_target(args.pid, args.match, args.cgroup))
    stop = runner.StopSignal()
    runner.install_signal_handlers(stop)
    agent = None
    try:
        try:
            sender = Sender(cfg, on_command=lambda frame: agent and agent.on_command(frame))
            agent = runner.Agent(cfg, sender, target, run_probe=probe_runner(cfg))
            hello = agent.open()
            sender.start()
        except BaseException:
            if target is not None and target.child is not None:   # held before exec: never let it run unwatched
                target.child.kill()
            raise
        missing = {k: v for k, v in hello["counters"].items() if v != "ok"}
        if missing:
            log.info("not counted here: %s", "; ".join(f"{k}: {v}" for k, v in missing.items()))
        agent.start()
        code = agent.run(stop)
    finally:
        if target is not None and not args.leave_running:
            target.stop(args.stop_grace)     # stopped with the agent: nothing left re-parented to PID 1
        for drain in drains:
            drain.close()
    return exit_status(code, agent.shutdown(cfg.stop_drain_seconds))


def exit_status(command: int | None, delivered: bool) -> int:
    """A launched command's failure wins (a wrapped job's status stays meaningful to its scheduler);
    then frames left unacked, which a plain 0 would hide."""
    if command:
        return command if command > 0 else 128 - command   # killed by a signal: the shell's convention
    return 0 if delivered else UNDELIVERED


def _check(cfg: AgentConfig, target, as_json: bool) -> int:
    from causewatch.agent import runner
    agent = runner.Agent(cfg, sender=None, target=target)
    hello = agent.open()
    for c in (agent.node_counters, agent.target_counters, agent.bbv, agent.node):
        if c is not None:
            c.close()
    if as_json:
        print(json.dumps(hello, indent=2))
    else:
        print(f"{hello['hostname']}: {hello['cpu_model'] or 'unknown cpu'}, {hello['cores']} cores")
        for name, status in hello["counters"].items():
            print(f"  {name:28s} {status}")
        print("node collectors:")
        for name, c in hello["collectors"].items():
            every = f"every {c['interval']:g} s" if c["interval"] else ""
            print(f"  {name:12s} {every:14s} {c['state']}")
            for field, why in ((k, v) for k, v in c.items() if k not in ("interval", "state")):
                print(f"    {field}: {why}")   # a field that fails alone (a GPU's)
    return 0
