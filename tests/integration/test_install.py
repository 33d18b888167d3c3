"""A plain (non-editable) install maps agent/ daemon/ probe/ analytics/ into causewatch.*."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_install_imports_every_part(tmp_path):
    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                        str(ROOT)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    code = ("import causewatch, causewatch.agent.sender, causewatch.daemon.server, causewatch.probe, "
            "causewatch.analytics; print(causewatch.__file__, causewatch.agent.sender.__file__)")
    out = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(target)!r}); "
                          f"sys.path += {[p for p in sys.path if 'site-packages' in p]!r}; {code}"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert all(p.startswith(str(target)) for p in out.stdout.split())
    assert (target / "causewatch" / "analytics").is_dir()
