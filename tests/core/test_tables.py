"""Tables fit 100 columns (long names shortened with …) unless --wide."""

import pandas as pd

from causewatch.commands.query import WIDTH, print_table


def _frame():
    name = "std::_Rb_tree<int, int, std::_Identity<int>, std::less<int>, std::allocator<int> >::_M_erase"
    return pd.DataFrame({"node": ["n1", "n2"], "region": [name, "main"], "metric": ["time_share"] * 2,
                         "value": [0.5, 0.25], "bottleneck": ["Medium (degree=0.502)/High (degree=0.495)/"] * 2})


def test_tables_fit_100_columns(capsys):
    print_table(_frame())
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= WIDTH and "…" in lines[1] and "main" in lines[2]


def test_wide_keeps_every_character(capsys):
    print_table(_frame(), wide=True)
    out = capsys.readouterr().out
    assert "_M_erase" in out and "…" not in out and max(map(len, out.splitlines())) > WIDTH
