"""`make demo` runs end to end and says what ran where."""

from __future__ import annotations

import os
import subprocess
import sys


def test_demo_runs(tmp_path):
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-m", "infer.tools.demo"], cwd=tmp_path, capture_output=True, text=True,
                       env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "check against onnxruntime" in out and "(OK)" in out
    assert "ran on the instruction-set simulator" in out
    assert "check against the reference interpreter" in out and "SQNR" in out and "MISMATCH" not in out
    assert "performance (edge" in out
    # the demo names what did not compile instead of hiding it
    assert ("compiled for 'edge'" in out) and ("cannot lower" in out or "demo_resnet.npu" in out)
