"""tierzero under mpirun: one Python process per rank (mpi_two_ranks.py)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.skipif(shutil.which("mpiexec") is None, reason="no mpiexec on this machine")
def test_two_ranks_train_and_agree():
    results_dir = tempfile.mkdtemp()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", TZ_RESULT_DIR=results_dir)
    cmd = ["mpiexec", "-n", "2", "--oversubscribe", sys.executable,
           os.path.join(HERE, "mpi_two_ranks.py")]
    done = subprocess.run(cmd, cwd=HERE, env=env, capture_output=True, text=True, timeout=600)
    print(done.stdout[-4000:], done.stderr[-4000:])
    assert done.returncode == 0
    results = []
    for name in sorted(os.listdir(results_dir)):  # rank0.json, rank1.json
        with open(os.path.join(results_dir, name)) as f:
            results.append(json.load(f))
    shutil.rmtree(results_dir)
    assert sorted(r["rank"] for r in results) == [0, 1]
    assert results[0]["losses"] == results[1]["losses"]  # the global mean, on every rank
    for r in results:
        assert r["offload_steps"] in (1, None)
