"""How the daemon's processes keep their memory small (daemon/memory.py), each in a fresh interpreter:
pyarrow kept from importing pandas, and a process's hold on its libraries' code dropped without
harm to the code run afterwards."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow   # each test loads its libraries in a fresh interpreter


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_pyarrow_builds_arrays_without_loading_pandas_after_arrow_without_pandas():
    assert _run("import sys, pyarrow as pa; pa.array([1]); print('pandas' in sys.modules)") == "True"
    assert _run("import sys, numpy as np, pyarrow as pa\n"
                "from causewatch.daemon import memory\n"
                "memory.arrow_without_pandas()\n"
                "pa.table({'a': pa.array(np.arange(3.0), mask=np.zeros(3, bool)), 'b': pa.array(['x'] * 3)})\n"
                "print('pandas' in sys.modules)") == "False"


def test_dropping_code_pages_lowers_the_rss_and_the_code_still_runs():
    said = _run("import psutil, pandas as pd\n"
                "from causewatch.daemon import memory\n"
                "before = psutil.Process().memory_info().rss\n"
                "memory.drop_code_pages()\n"
                "after = psutil.Process().memory_info().rss\n"
                "print(int(before - after > 10 * 2**20), pd.DataFrame({'a': [1, 2]})['a'].sum())")
    assert said == "1 3"
