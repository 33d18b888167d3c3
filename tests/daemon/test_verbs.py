"""The API's verbs, declared once (daemon/verbs.py): each has a handler whose parameters are the declared
ones, query strings convert or are refused by name, and the declarations load no pandas (the CLI's
daemon source builds its requests from them alone)."""

import inspect
import subprocess
import sys

import pytest

from causewatch.daemon import routes, verbs
from causewatch.errors import InputError


@pytest.mark.parametrize("verb", list(verbs.VERBS.values()), ids=lambda v: f"{v.method} {v.path}")
def test_every_verb_has_a_handler_taking_its_declared_parameters(verb):
    assert verb.handler is not None and verb.handler.__module__ == routes.__name__
    leading = ["con"] if verb.method == "GET" else ["con", "write", "body"]
    assert list(inspect.signature(verb.handler).parameters) == leading + list(verb.params)


def test_query_strings_convert_or_are_refused_by_name():
    assert verbs.QUERY.parse({"q": ["(cpi is high)"], "node": ["n1", "n2"], "top": ["1", "5"]}) == \
        {"q": "(cpi is high)", "node": ["n1", "n2"], "top": 5}
    with pytest.raises(InputError, match="open: expected a int, got 'x'"):
        verbs.ANOMALIES.parse({"open": ["x"]})
    assert verbs.TASKS.parse({"limit": ["0"]}) == {"limit": 0}
    for bad in ("x", "-1", "1.5"):
        with pytest.raises(InputError, match=f"limit: expected a count, got '{bad}'"):
            verbs.TASKS.parse({"limit": [bad]})
    with pytest.raises(InputError, match=r"lmit: /api/tasks takes no such parameter \(takes app, limit\)"):
        verbs.TASKS.parse({"lmit": ["2"]})
    assert verbs.REGIONS.query(last=60.0, node=None, metric=["cpi"]) == {"last": 60.0, "metric": ["cpi"]}
    with pytest.raises(TypeError, match="regions: no parameter nodes"):
        verbs.REGIONS.query(nodes=["n1"])


def test_the_declarations_and_the_daemon_source_load_no_pandas():
    code = "import sys, causewatch.daemon.verbs, causewatch.commands.source; print('pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_every_merge_kind_has_its_joiner_in_the_cluster_and_a_rule_names_real_parameters():
    from causewatch.daemon import cluster
    assert set(cluster.JOINS) | {"tables", "own", "partials"} == set(verbs.MERGE_KINDS)
    with pytest.raises(ValueError, match="merge kind 'pooled': expected one of tables, records"):
        verbs.Merge("pooled")
    with pytest.raises(ValueError, match="x: merge cut 'top' is not one of its parameters"):
        verbs.Verb("x", verbs.LIMIT, merge=verbs.records(("a", False), cut="top"))
