"""The global query tier: a daemon configured with peers answers every /api/ verb for the whole cluster,
as Thanos' querier and VictoriaMetrics' vmselect do: it asks its own shard and each peer at once, merges
the answers in the verb's order, and says which shards answered. A shard that did not (down, past the
timeout, an answer that is not what the verb gives: truncated Arrow, another schema, not JSON) is named
with why; the answer is then partial: `cluster.partial` in JSON, `causewatch_cluster` in an Arrow stream's
metadata, the X-Causewatch-Partial header, a line on the CLI. Never silently short, never a hang.

A peer's request carries X-Causewatch-Peer (the asking shard) and the api_token: it is answered from that
shard alone. Runs in the daemon process (no pandas: Arrow tables are merged with pyarrow).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import threading
import time
from collections.abc import Callable

import pyarrow as pa

from causewatch.daemon import promjson, promql, rangeq, verbs
from causewatch.daemon.store import lake as store_lake

log = logging.getLogger("causewatch.daemon.cluster")
PEER = "X-Causewatch-Peer"           # on a peer's request: the asking shard; answer from this shard alone
ANSWERED = "X-Causewatch-Shards"     # on a cluster answer: the shards that answered, comma-separated
PARTIAL = "X-Causewatch-Partial"     # the shards that did not, "name: why; ..." (absent when none is missing)
META = b"causewatch_cluster"         # the same in an Arrow stream's schema metadata (JSON)
MAX_ANSWER = 1 << 30                 # bytes of a peer's answer, at most
@dataclasses.dataclass
class Reply:
    """One shard's answer: (code, data, ctype), or `error` saying why there is none."""
    shard: str
    code: int = 0
    data: bytes = b""
    ctype: str = ""
    error: str = ""
    shards: str = ""     # the ANSWERED header: set when the shard answered for a cluster of its own


def ask_all(targets: dict[str, str], method: str, path: str, params: dict, raw: bytes, accept: str, token: str,
            asker: str | None, timeout: float, meanwhile: Callable[[], Reply] | None = None,
            client=None) -> list[Reply]:
    """`fetch` from every {name: url} at once (and `meanwhile()` in this thread, first in the list); a
    target still silent at the deadline is 'no answer'. `client`: the CLI's http_client.HttpClient."""
    replies = {name: Reply(name, error=f"no answer within {timeout:g} s") for name in targets}

    def ask(name, url):
        replies[name] = fetch(name, url, method, path, params, raw, accept, token, asker, timeout, client)

    threads = [threading.Thread(target=ask, args=item, name=f"peer-{item[0]}", daemon=True)
               for item in targets.items()]
    for t in threads:
        t.start()
    mine = [meanwhile()] if meanwhile is not None else []
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    # a thread still running past the deadline leaves its 'no answer' in place (dict writes are atomic)
    return [*mine, *(dict(replies)[name] for name in targets)]


def fetch(shard: str, url: str, method: str, path: str, params: dict, raw: bytes, accept: str, token: str,
          asker: str | None, timeout: float, client=None) -> Reply:
    """Ask one shard: as a peer (PEER header: `asker`, the token), or as a client (`asker` None, with
    `client`'s credentials and TLS context when given); never raises."""
    # imported here: urllib.request (http.client, email, ssl) costs the ingesting daemon ~10 MB, and a
    # lone daemon never asks a peer
    import urllib.error
    import urllib.parse
    import urllib.request
    query = urllib.parse.urlencode(params, doseq=True)
    headers = {"Accept": accept} if asker is None else {"Accept": accept, PEER: asker}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if method == "POST":
        headers["Content-Type"] = "application/json"
    if client is not None:
        headers.update(client.headers)
    request = urllib.request.Request(f"{url.rstrip('/')}{path}?{query}", data=raw if method == "POST" else None,
                                     headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=client and client.context) as reply:
            data = reply.read(MAX_ANSWER + 1)
            if len(data) > MAX_ANSWER:
                return Reply(shard, error=f"answer over {MAX_ANSWER} bytes")
            return Reply(shard, reply.status, data, reply.headers.get("Content-Type", ""),
                         shards=reply.headers.get(ANSWERED, ""))
    except urllib.error.HTTPError as e:
        return Reply(shard, e.code, e.read()[:MAX_ANSWER], e.headers.get("Content-Type", ""))
    except Exception as e:   # refused, reset, timed out, a malformed status line: the shard did not answer
        reason = getattr(e, "reason", e)
        if isinstance(reason, TimeoutError):
            return Reply(shard, error=f"no answer within {timeout:g} s")
        return Reply(shard, error=f"{type(e).__name__}: {reason}")


class Cluster:
    """This shard (`local(method, path, params, raw, accept)`, the daemon's own answer) and its `peers`
    {name: http URL}; `answer` is the cluster's answer to one request."""

    def __init__(self, shard: str, peers: dict[str, str], local: Callable, token: str = "", timeout: float = 10.0,
                 lake: str = ""):
        """`lake`: the shared lake's root (STORE_LAKE): a global `samples` reads there the history of a
        shard that does not answer (its manifest's files; its hot window stays missing)."""
        self.shard, self.peers, self.local, self.token, self.timeout = shard, dict(peers), local, token, timeout
        self.lake = lake

    def gather(self, method: str, path: str, params: dict, raw: bytes, accept: str) -> list[Reply]:
        """Every shard's reply, this one's first; a peer still silent at the deadline is 'no answer'."""
        def mine() -> Reply:
            try:
                return Reply(self.shard, *self.local(method, path, params, raw, accept))
            except Exception as e:   # the API worker died: this shard is missing like any other
                return Reply(self.shard, error=f"{type(e).__name__}: {e}")
        return ask_all(self.peers, method, path, params, raw, accept, self.token, self.shard, self.timeout, mine)

    def answer(self, method: str, path: str, params: dict, raw: bytes, accept: str) -> tuple[int, bytes, str, list]:
        """(code, body, content type, extra headers) for the whole cluster."""
        verb = verbs.find(method, path)[0]
        if verb is None or verb.merge.kind == "own" or _a_number(verb, params):
            # unknown routes answer as this shard's 404; a number needs no shard's rows
            return (*self.local(method, path, params, raw, accept), [])
        if verb.merge.kind == "local":
            mine = Reply(self.shard, *self.local(method, path, params, raw, accept))
            return merge(verb, params, [mine, *(Reply(p, error=verb.merge.reason) for p in self.peers)], accept)
        ask_accept = f"{verbs.ARROW}, application/json" if verb.merge.kind in ("tables", "partials") else accept
        replies = self.gather(method, path, asked(verb, params), raw, ask_accept)
        cold = {}
        if verb is verbs.SAMPLES and self.lake:
            for r in replies:
                if r.error or r.code != 200:
                    try:
                        table = store_lake.shard_samples(self.lake, r.shard, params.get("metric"),
                                                         (params.get("scope") or [None])[-1])
                    except Exception as e:   # a file a merge swept meanwhile, a bad manifest: only its history lost
                        log.warning("lake history of shard %s unreadable: %s", r.shard, e)
                        continue
                    if table is not None:
                        cold[r.shard] = table
        return merge(verb, params, replies, accept, cold)


def _a_number(verb, params: dict) -> bool:
    """An instant query of numbers alone (Grafana's test of a data source)."""
    return verb is verbs.PROMQL_QUERY and promql.scalar(_last(params, "query")) is not None


def asked(verb, params: dict) -> dict:
    """What each shard is asked for `params`: a verb merged from partials asks for them."""
    return {**params, "partial": ["1"]} if verb.merge.kind == "partials" else params


# ---- merging ---------------------------------------------------------------------------------------

def _json(code: int, obj) -> bytes:
    return json.dumps(obj, default=str).encode()


def _clean(value):
    """NaN as null, as the routes' JSON has it."""
    return None if isinstance(value, float) and math.isnan(value) else value


def merge(verb, params: dict, replies: list[Reply], accept: str,
          cold: dict | None = None) -> tuple[int, bytes, str, list]:
    """The merged answer of `verb` from each shard's reply. A reply that is not the verb's kind of answer
    makes its shard missing, named with why; this shard's own refusal (400: a bad parameter) answers.
    `cold` {shard: Arrow table}: the lake history of shards that did not answer (still missing)."""
    missing = {r.shard: r.error for r in replies if r.error}
    got = [r for r in replies if not r.error]
    for r in got:
        if r.code not in (200, 404) and r is replies[0] and r.code in (400, 403, 413):
            return r.code, r.data, r.ctype, headers([r.shard], missing)
        if r.code not in (200, 404):
            missing[r.shard] = f"HTTP {r.code}: {r.data[:200].decode(errors='replace')}"
    got = [r for r in got if r.shard not in missing]
    found = [r for r in got if r.code == 200]
    answered = [r.shard for r in got]
    if not found:   # nothing anywhere (404 from every shard that answered), or no shard answered at all
        if got:
            return got[0].code, got[0].data, got[0].ctype, headers(answered, missing)
        return 503, _json(503, {"error": "no shard answered", "cluster": info([], missing)}), "application/json", \
            headers([], missing)
    if verb.merge.kind == "tables":
        return _merged_tables(verb, params, found, answered, missing, accept, cold or {})
    if verb.merge.kind == "partials":
        return _merged_partials(verb, params, found, answered, missing, accept)
    parsed = []
    for r in found:
        if r.ctype != "application/json":
            parsed.append((r, None))
            continue
        try:
            parsed.append((r, json.loads(r.data)))
        except ValueError as e:
            missing[r.shard] = f"not JSON ({e})"
    parsed = [(r, obj) for r, obj in parsed if r.shard not in missing]
    try:
        code, body, ctype = _records(verb, params, parsed, missing)
    except _Bad as e:
        return 502, _json(502, {"error": str(e)}), "application/json", headers(answered, missing)
    answered = [s for s in answered if s not in missing]
    if ctype == "application/json":
        body = _with_info(body, info(answered, missing))
    return code, _json(code, body) if ctype == "application/json" else body, ctype, headers(answered, missing)


class _Bad(Exception):
    pass


def _with_info(body, about: dict):
    if isinstance(body, dict):
        return {**body, "cluster": about}
    return {"records": body, "cluster": about}


def _records(verb, params: dict, parsed: list, missing: dict) -> tuple[int, object, str]:
    """A JSON verb's answers joined by its merge kind; a shard whose answer is not that verb's kind is
    named in `missing`."""
    def kept(check) -> list:
        out = []
        for r, obj in parsed:
            problem = check(obj)
            if problem:
                missing[r.shard] = problem
            else:
                out.append((r, obj))
        return out

    return JOINS[verb.merge.kind](verb, params, parsed, kept)


def _joined_records(verb, params: dict, parsed: list, kept) -> tuple[int, object, str]:
    """Records concatenated with their shard, sorted, cut."""
    lists = kept(lambda o: None if isinstance(o, list) and all(isinstance(x, dict) for x in o)
                 else "expected a list of records")
    rows = _sorted([{**x, "shard": r.shard} for r, obj in lists for x in obj], verb.merge.order)
    cut = verb.merge.cut
    n = params.get(cut, [None])[-1] if cut else None
    if cut and n is None:
        n = verb.params[cut].default
    return 200, rows[:int(n)] if n not in (None, "") else rows, "application/json"


def _summed(verb, params: dict, parsed: list, kept) -> tuple[int, object, str]:
    """Stats: each table's and metric's counts summed."""
    dicts = kept(lambda o: None if isinstance(o, dict) and all(
        isinstance(o.get(k), dict) and all(isinstance(v, int) for v in o[k].values())
        for k in ("tables", "samples_per_metric")) else "expected {tables, samples_per_metric} of counts")
    out = {"tables": {}, "samples_per_metric": {}}
    for _, obj in dicts:
        for k in out:
            for name, n in obj[k].items():
                out[k][name] = out[k].get(name, 0) + n
    return 200, out, "application/json"


def _ranked(verb, params: dict, parsed: list, kept) -> tuple[int, object, str]:
    """A ranking's nodes from every shard, ranked again by their predicted task time; the failed probes of all."""
    ranks = kept(lambda o: None if isinstance(o, dict) and isinstance(o.get("nodes"), list) else
                 "expected {app, ratio, nodes}")
    rows = [{**x, "shard": r.shard} for r, obj in ranks for x in obj["nodes"] if isinstance(x, dict)]
    rows.sort(key=lambda x: (x.get("task_seconds") is None,
                             x.get("task_seconds") or x.get("run_task_seconds") or 0.0, str(x.get("node"))))
    first = ranks[0][1] if ranks else {}
    failed = [{**x, "shard": r.shard} for r, obj in ranks for x in obj.get("failed", []) if isinstance(x, dict)]
    return 200, {**first, "nodes": [{**x, "rank": i} for i, x in enumerate(rows, 1)],
                 "failed": sorted(failed, key=lambda x: str(x.get("node")))}, "application/json"


def _newest(verb, params: dict, parsed: list, kept) -> tuple[int, object, str]:
    """A model: the newest version among the shards' (a drawing, the first shard's)."""
    texts = [(r, obj) for r, obj in parsed if obj is None]
    if texts:
        return 200, texts[0][0].data, texts[0][0].ctype
    models = kept(lambda o: None if isinstance(o, dict) else "expected a model record")
    if not models:
        raise _Bad("no shard gave a model record")
    r, best = max(models, key=lambda m: (str(m[1].get("learned_at")), m[1].get("model_id") or 0))
    return 200, {**best, "shard": r.shard}, "application/json"


def _union(verb, params: dict, parsed: list, kept) -> tuple[int, object, str]:
    """Prometheus' lists of every shard (label names, values, series' label sets), each element once."""
    lists = kept(lambda o: None if isinstance(o, dict) and isinstance(o.get("data"), list)
                 else "expected Prometheus' {status, data: [...]}")
    seen = {json.dumps(x, sort_keys=True): x for _, obj in lists for x in obj["data"]}
    return 200, promjson.listed([seen[k] for k in sorted(seen)]), "application/json"


def _fanned(verb, params: dict, parsed: list, kept) -> tuple[int, object, str]:
    """A write sent to every shard: each shard's answer, the first one's fields on top."""
    done = {r.shard: obj for r, obj in parsed}
    first = next(iter(done.values()))
    return 200, {**(first if isinstance(first, dict) else {}), "shards": done}, "application/json"


def _alone(verb, params: dict, parsed: list, kept) -> tuple[int, object, str]:
    """One shard's answer (the asking shard's: the others were named missing with the verb's reason)."""
    r, obj = parsed[0]
    return 200, obj if obj is not None else r.data, r.ctype


# the joiner of each JSON merge kind (verbs.MERGE_KINDS: "tables" is `_merged_tables`; "own" never merges)
JOINS = {"records": _joined_records, "summed": _summed, "ranked": _ranked, "newest": _newest, "fanned": _fanned,
         "local": _alone, "union": _union}


def _sorted(rows: list[dict], order) -> list[dict]:
    """Stable sorts, least significant key first; a missing value last either way."""
    for col, desc in reversed(order):
        present = [x for x in rows if x.get(col) is not None]
        absent = [x for x in rows if x.get(col) is None]
        try:
            present.sort(key=lambda x, c=col: x[c], reverse=desc)
        except TypeError:      # values of several types: sorted by their text
            present.sort(key=lambda x, c=col: str(x[c]), reverse=desc)
        rows = present + absent
    return rows


def _table(r: Reply) -> tuple[pa.Table, dict]:
    """A reply's Arrow stream and its attrs; raises _Bad naming what was wrong."""
    if r.ctype != verbs.ARROW:
        raise _Bad(f"expected an Arrow stream, got {r.ctype or 'no content type'}")
    try:
        table = pa.ipc.open_stream(r.data).read_all()
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as e:
        raise _Bad(f"not a whole Arrow stream ({str(e)[:160]})") from None
    try:
        attrs = json.loads((table.schema.metadata or {}).get(b"causewatch", b"{}"))
    except ValueError:
        raise _Bad("its Arrow metadata is not JSON") from None
    return table.replace_schema_metadata(None), attrs if isinstance(attrs, dict) else {}


def _task_names(table: pa.Table, attrs: dict) -> pa.Table:
    """A tasks table's positional p0../c0.. columns named by their keys (they differ between shards)."""
    names = {**{k: f"param:{v}" for k, v in attrs.get("params", {}).items()},
             **{k: f"counter:{v}" for k, v in attrs.get("counters", {}).items()}}
    return table.rename_columns([names.get(c, c) for c in table.column_names])


def _positional(table: pa.Table) -> tuple[pa.Table, dict]:
    params, counters, names = {}, {}, []
    for c in table.column_names:
        kind, _, key = c.partition(":")
        if kind == "param" and key:
            params[f"p{len(params)}"] = key
            names.append(f"p{len(params) - 1}")
        elif kind == "counter" and key:
            counters[f"c{len(counters)}"] = key
            names.append(f"c{len(counters) - 1}")
        else:
            names.append(c)
    return table.rename_columns(names), {"params": params, "counters": counters}


def _merged_tables(verb, params: dict, found: list[Reply], answered: list, missing: dict, accept: str, cold: dict):
    tables, attrs = [], {}
    for r in found:
        try:
            table, a = _table(r)
        except _Bad as e:
            missing[r.shard] = str(e)
            continue
        if verb is verbs.TASKS:
            table = _task_names(table, a)
        tables.append((r.shard, table))
    for shard, table in cold.items():
        if shard in missing:
            missing[shard] += "; its lake history read, not its hot window"
            tables.append((shard, table))
    # the schema every shard's table must have: the first with rows (an empty DataFrame's columns may be untyped)
    ref = next((t for _, t in tables if t.num_rows), tables[0][1] if tables else None)
    fitted = []
    for shard, table in tables:
        base = [c for c in ref.column_names if ":" not in c]
        if [c for c in table.column_names if ":" not in c] != base:
            missing[shard] = f"schema differs: columns {table.column_names[:12]}, expected {ref.column_names[:12]}"
            continue
        try:
            if verb is not verbs.TASKS:
                table = table.cast(ref.schema) if table.schema != ref.schema else table
            fitted.append(table)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as e:
            missing[shard] = f"schema differs ({str(e)[:160]})"
    answered = [s for s in answered if s not in missing]
    if not fitted:
        return 502, _json(502, {"error": "no shard gave a usable answer", "cluster": info(answered, missing)}), \
            "application/json", headers(answered, missing)
    merged = pa.concat_tables(fitted, promote_options="permissive") if len(fitted) > 1 else fitted[0]
    keys = [(c, "descending" if d else "ascending") for c, d in verb.merge.order if c in merged.column_names]
    if keys:
        merged = merged.sort_by(keys)
    if verb is verbs.TASKS:
        merged, attrs = _positional(merged)
    limit = params.get("limit", [None])[-1]
    if limit not in (None, ""):
        merged = merged.slice(0, int(limit))
    about = info(answered, missing)
    if verbs.ARROW in accept:
        merged = merged.replace_schema_metadata({b"causewatch": json.dumps(attrs).encode(),
                                                 META: json.dumps(about).encode()})
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, merged.schema) as writer:
            writer.write_table(merged)
        return 200, sink.getvalue().to_pybytes(), verbs.ARROW, headers(answered, missing)
    rows = [{k: _clean(v) for k, v in row.items()} for row in merged.to_pylist()]
    body = {"attrs": attrs, "records": rows, "cluster": about} if attrs else {"records": rows, "cluster": about}
    return 200, _json(200, body), "application/json", headers(answered, missing)


def _last(params: dict, name: str):
    """A parameter's value, given as a query string's list or as one value (the CLI's sources)."""
    value = params.get(name)
    return value[-1] if isinstance(value, list) and value else value


def _finishing(verb, params: dict) -> tuple[tuple[str, ...], str]:
    """The labels and the final function of a partials verb's answer, read off its parameters."""
    if verb in (verbs.PROMQL_RANGE, verbs.PROMQL_QUERY):
        parsed = promql.parse(_last(params, "query"))
        agg, by, fn = parsed.agg, parsed.by, parsed.fn
    else:
        agg, fn = _last(params, "agg") or None, _last(params, "fn") or verb.params["fn"].default
        by = params.get("by") or ()
        by = [by] if isinstance(by, str) else by
    return (rangeq.LABELS if agg is None else tuple(dict.fromkeys(by))), agg or fn


def _merged_partials(verb, params: dict, found: list[Reply], answered: list, missing: dict, accept: str):
    """Shards' partial aggregates joined into one answer: Prometheus' matrix (the shards missing as its
    warnings) or the range verb's rows."""
    tables = []
    for r in found:
        try:
            tables.append(_table(r)[0])
        except _Bad as e:
            missing[r.shard] = str(e)
    answered = [s for s in answered if s not in missing]
    about = info(answered, missing)
    if not tables:
        return 502, _json(502, {"error": "no shard gave a usable answer", "cluster": about}), "application/json", \
            headers(answered, missing)
    labels, final = _finishing(verb, params)
    joined = rangeq.join_partials(tables, labels, final)
    if verb.errors == "prometheus":
        warnings = {"warnings": [f"shard {k} missing: {v}" for k, v in sorted(missing.items())]} if missing else {}
        shape = promjson.vector if verb is verbs.PROMQL_QUERY else promjson.matrix
        body = shape(joined, labels, **warnings, cluster=about)
        return 200, body.encode(), "application/json", headers(answered, missing)
    if verbs.ARROW in accept:
        joined = joined.replace_schema_metadata({META: json.dumps(about).encode()})
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, joined.schema) as writer:
            writer.write_table(joined)
        return 200, sink.getvalue().to_pybytes(), verbs.ARROW, headers(answered, missing)
    rows = [{k: _clean(v) for k, v in row.items()} for row in joined.to_pylist()]
    return 200, _json(200, {"records": rows, "cluster": about}), "application/json", headers(answered, missing)


def info(answered: list[str], missing: dict[str, str]) -> dict:
    return {"shards": sorted(answered), "missing": dict(sorted(missing.items())), "partial": bool(missing)}


def headers(answered: list[str], missing: dict[str, str]) -> list[tuple[str, str]]:
    out = [(ANSWERED, ",".join(sorted(answered)))]
    if missing:
        # a header value is one line of Latin-1: the reasons are shortened and cleaned
        why = "; ".join(f"{k}: {v}" for k, v in sorted(missing.items()))
        out.append((PARTIAL, why.encode("latin-1", "replace").decode("latin-1").replace("\n", " ")[:1000]))
    return out
