"""Daemon analysis job on a sharded site: each scope's causal model learnt once, by its owner (the shard
the scope hashes to: causewatch/shards.py), from the task rows of every shard (docs/shards.md).

An application's tasks land on whichever shards its nodes hash to. The owner reads its own rows and
the other shards' through their `/api/tasks` (as a peer: X-Causewatch-Peer and the api_token), each
shard's rows from where it last learnt (by that shard's own `received` clock), and learns as CausalJob
does; the model and its anomalies are stored on the owner, where every shard's cluster answers find them
(daemon/cluster.py), and exported once, by the owner. A peer that does not answer is named in `missing_`
and the log; its rows join when it answers again (from where the owner last read them).
"""

from __future__ import annotations

import json
import logging

import pandas as pd
import pyarrow as pa

from causewatch import shards
from causewatch.analytics.causal import features
from causewatch.config import DaemonConfig
from causewatch.daemon import cluster, readers, verbs
from causewatch.daemon.job_causal import CausalJob
from causewatch.daemon.jobs import JobContext

log = logging.getLogger("causewatch.daemon.job_causal")


class ShardCausalJob(CausalJob):
    """CausalJob for the scopes shard `shard` owns among itself and `peers` {name: http URL}."""

    def __init__(self, shard: str, peers: dict[str, str], token: str = "", timeout: float = 10.0, **kwargs):
        super().__init__(**kwargs)
        self.shard, self.peers, self.token, self.timeout = shard, dict(peers), token, timeout
        self.members = sorted({shard, *peers})
        self.since: dict[tuple[str, str], float] = {}   # (scope, shard) -> its newest row learnt from
        self.missing_: dict[str, str] = {}              # the shards the last run could not read, and why

    @classmethod
    def from_config(cls, cfg: DaemonConfig) -> ShardCausalJob:
        return cls(cfg.shard, cfg.peer_urls(), cfg.api_token, cfg.peer_timeout, min_new=cfg.causal_min_new,
                   confirm=cfg.causal_confirm, interval=cfg.causal_interval, baseline_rows=cfg.causal_baseline_rows,
                   quiet_intervals=cfg.causal_quiet_intervals)

    def owns(self, scope: str) -> bool:
        return shards.owner(scope, self.members) == self.shard

    def run(self, ctx: JobContext) -> None:
        self.missing_, read_at = {}, self.clock()
        with ctx.read() as cur:
            apps = set(readers.tasks.task_apps(cur))
        for name in self.peers:
            found = self._ask(name, verbs.TASK_APPS.path, {})
            if isinstance(found, list):
                apps |= {r["app"] for r in found if isinstance(r, dict) and isinstance(r.get("app"), str)}
        for app in sorted(apps):
            scope = f"app:{app}"
            if self.owns(scope):
                self._learn(ctx, app, scope)
        if self.missing_:
            log.warning("causal models: shards not read this run: %s",
                        "; ".join(f"{k}: {v}" for k, v in self.missing_.items()))
        self._resolve_quiet(ctx, read_at)
        ctx.exporter.publish(self.name, self._families())

    def _learn(self, ctx: JobContext, app: str, scope: str) -> None:
        parts: dict[str, tuple[pd.DataFrame, list[str]]] = {}
        with ctx.read() as cur:
            parts[self.shard] = features.name_task_columns(
                *readers.tasks.task_df(cur, app, self.since.get((scope, self.shard))))
        for name in self.peers:
            df = self._ask(name, verbs.TASKS.path, {"app": app})
            if isinstance(df, pd.DataFrame):
                since = self.since.get((scope, name))
                named, inputs = features.name_task_columns(df, df.attrs.get("params", {}), df.attrs.get("counters", {}))
                parts[name] = (named if since is None else named[named["received"] > since], inputs)
        frames = [df for df, _ in parts.values() if len(df)]
        if not frames:
            return
        # rows in the order they were received (each shard's clock; ties keep each shard's own order)
        rows = pd.concat(frames, ignore_index=True).sort_values("received", kind="stable", ignore_index=True)
        inputs = sorted({c for _, names in parts.values() for c in names})
        before = self.scopes[scope].received if scope in self.scopes else 0.0   # a new scope's (_Scope)
        self._update(ctx, scope, rows, inputs)
        if self.scopes[scope].received != before:   # learnt from them: next time, from after them
            for name, (df, _) in parts.items():
                if len(df):
                    self.since[(scope, name)] = float(df["received"].max())

    def _ask(self, name: str, path: str, params: dict):
        """A peer's answer as a peer: JSON, or a DataFrame with its attrs; None (and `missing_` says why)
        when it cannot be had or is not what the verb gives."""
        reply = cluster.fetch(name, self.peers[name], "GET", path, params, b"", f"{verbs.ARROW}, application/json",
                              self.token, self.shard, self.timeout)
        if reply.error or reply.code != 200:
            self.missing_[name] = reply.error or f"HTTP {reply.code} on {path}"
            return None
        try:
            if reply.ctype == verbs.ARROW:
                table = pa.ipc.open_stream(reply.data).read_all()
                df = table.to_pandas()
                df.attrs.update(json.loads((table.schema.metadata or {}).get(b"causewatch", b"{}")))
                return df
            return json.loads(reply.data)
        except (pa.ArrowException, ValueError) as e:
            self.missing_[name] = f"{path}: unreadable answer ({str(e)[:160]})"
            return None
