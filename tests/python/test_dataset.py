"""`nanobragg dataset`: every shot the same however the dataset is split (one
process, -shard job-array tasks, MPI ranks, a run killed and resumed), and
every file read by h5py and by nxmx (the NXmx reader of dxtbx/DIALS).

The nanobragg executable: $NANOBRAGG_EXE, else target/{release,debug}/nanobragg.
The MPI tests need `mpirun` and a build with the `mpi` feature; in CI
(CI=true) they fail rather than skip without them.
"""

import os
import pathlib
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")
nxmx = pytest.importorskip("nxmx")

from test_formats import exe  # noqa: E402

SPEC = """
args = "-default_F 100 -cell 50 50 50 90 90 90 -lambda 1.3 -distance 80 -detpixels {pixels} -pixel 0.2 -mosaic_domains 3 -oversample {oversample} -readout_noise 2 -psf gauss"
shots = 16
seed = 11
output = "out"
name = "set"
shots_per_file = {per_file}
noiseless = true
[crystal]
n_cells = [4, 8]
mosaic_deg = [0.02, 0.1]
[fluence]
jitter = 0.1
[spectrum]
model = "sase"
channels = 8
[background]
water_um = [0, 20]
"""

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe"]

# the tests' own environment: no job array or MPI launcher of a surrounding job
ENV = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "PMI"))}


def spec(tmp_path, pixels=64, per_file=0, oversample=1):
    path = tmp_path / "set.toml"
    path.write_text(SPEC.format(pixels=pixels, per_file=per_file, oversample=oversample))
    return path


# shots slow enough (about 0.2 s each) to kill a run part way
SLOW = {"pixels": 192, "oversample": 8}


def render(spec_path, where, *flags, launcher=(), check=True):
    """Runs the dataset in folder `where` (its output: where/out)."""
    where.mkdir(exist_ok=True)
    cmd = [*launcher, exe(), "dataset", str(spec_path), "-threads", "1", *flags]
    return subprocess.run(cmd, cwd=where, capture_output=True, text=True, check=check, env=ENV)


def gather(folder):
    """shot -> (int32 image, float image, misset) from every file; no shot twice."""
    shots = {}
    for path in sorted((folder / "out").glob("*.nxs")):
        with h5py.File(path, "r") as f:
            sim = f["entry/simulation"]
            for k, i in enumerate(sim["shot"][()]):
                assert int(i) not in shots, f"shot {i} twice"
                shots[int(i)] = (f["entry/data/data"][k], sim["noiseless"][k], sim["misset_deg"][k])
    return shots


def assert_same(a, b):
    assert sorted(a) == sorted(b) == list(range(16))
    for i in a:
        for x, y in zip(a[i], b[i]):
            np.testing.assert_array_equal(x, y)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The dataset rendered by one process."""
    tmp = tmp_path_factory.mktemp("reference")
    render(spec(tmp), tmp / "one")
    return gather(tmp / "one")


@pytest.fixture(scope="module")
def slow_reference(tmp_path_factory):
    """The slow shots' dataset rendered by one process."""
    tmp = tmp_path_factory.mktemp("slow")
    render(spec(tmp, **SLOW), tmp / "one")
    return gather(tmp / "one")


def test_one_process_writes_a_whole_dataset(reference):
    images = np.array([reference[i][0] for i in range(16)])
    # shots differ (orientation, size, spectrum...), every one has photons
    assert len({images[i].tobytes() for i in range(16)}) == 16
    assert (np.array([reference[i][1].sum() for i in range(16)]) > 0).all()


def test_shards_give_the_same_shots(tmp_path, reference):
    path = spec(tmp_path)
    for i in range(2):
        render(path, tmp_path / "shards", "-shard", f"{i}/3")
    # the third as a Slurm job array's task 9 of tasks 1, 5, 9 (--array=1-9:4)
    env = {**ENV, "SLURM_ARRAY_TASK_ID": "9", "SLURM_ARRAY_TASK_MIN": "1",
           "SLURM_ARRAY_TASK_STEP": "4", "SLURM_ARRAY_TASK_COUNT": "3"}
    subprocess.run([exe(), "dataset", str(path), "-threads", "1"], cwd=tmp_path / "shards",
                   env=env, check=True, capture_output=True)
    assert len(list((tmp_path / "shards" / "out").glob("*.nxs"))) == 3
    assert_same(gather(tmp_path / "shards"), reference)


def test_files_are_nxmx(tmp_path):
    render(spec(tmp_path, per_file=5), tmp_path / "w")
    files = sorted((tmp_path / "w" / "out").glob("*.nxs"))
    assert [len(h5py.File(p, "r")["entry/simulation/shot"]) for p in files] == [5, 5, 5, 1]
    for path in files:
        with h5py.File(path, "r") as f:
            entry = nxmx.NXmx(f).entries[0]
            assert entry.definition == "NXmx"
            det = entry.instruments[0].detectors[0]
            assert det.modules[0].data_size.tolist() == [64, 64]
            data = entry.data[0]
            n = len(f["entry/simulation/shot"])
            assert f["entry/data/data"].shape == (n, 64, 64)
            beam = entry.instruments[0].beams[0]
            lam = beam.incident_wavelength.to("angstrom").magnitude
            weights = np.asarray(f["entry/instrument/beam/incident_wavelength_weights"])
            assert lam.shape == weights.shape == (n, 8)
            assert np.allclose(weights.sum(axis=1), 1) and abs(lam.mean() - 1.3) < 0.01
            assert data is not None


def test_a_bad_spec_is_refused(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('args = "-default_F 1 -cell 50 50 50 90 90 90 -floatfile x.bin"\nshots = 2\n')
    r = render(bad, tmp_path / "w", check=False)
    assert r.returncode != 0 and "-floatfile is not a dataset's flag" in r.stderr
    bad.write_text('args = "-default_F 1"\nshots = 2\ncolour = "red"\n')
    r = render(bad, tmp_path / "w", check=False)
    assert r.returncode != 0 and "colour" in r.stderr
    assert not (tmp_path / "w" / "out").exists() or not list((tmp_path / "w" / "out").iterdir())


def kill_when(proc, folder, files, pattern):
    """SIGKILLs the processes of `pattern` once `files` files are in `folder`."""
    deadline = time.time() + 120
    while len(list(folder.glob("*.nxs"))) < files:
        assert proc.poll() is None, "the run ended before it could be killed"
        assert time.time() < deadline
        time.sleep(0.005)
    pids = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
    assert pids
    os.kill(int(pids[-1]), signal.SIGKILL)
    proc.wait(timeout=120)


def test_resume_after_a_kill(tmp_path, slow_reference):
    path = spec(tmp_path, per_file=1, **SLOW)
    where = tmp_path / "killed"
    where.mkdir()
    proc = subprocess.Popen([exe(), "dataset", str(path), "-threads", "1"], cwd=where, env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kill_when(proc, where / "out", 3, f"{exe()} dataset {path}")
    done = len(list((where / "out").glob("*.nxs")))
    assert 3 <= done < 16
    # without -resume the earlier files are this run's own: refused only when foreign
    r = render(path, where, "-resume")
    assert f"{16 - done} missing before this run" in r.stdout
    assert_same(gather(where), slow_reference)
    # a second -resume finds nothing to do
    assert "0 missing before this run" in render(path, where, "-resume").stdout
    # without -resume, the resumed run's files are not this run's: refused
    r = render(path, where, check=False)
    assert r.returncode != 0 and "from another run of this dataset" in r.stderr


def mpi_ready(tmp):
    """Why the MPI tests cannot run here (None: they can)."""
    if shutil.which("mpirun") is None:
        return "no mpirun"
    path = spec(tmp)
    r = subprocess.run([*MPIRUN, "-np", "2", exe(), "dataset", str(path)], cwd=tmp,
                       capture_output=True, text=True, env=ENV)
    if "rendered by 2 ranks" not in r.stdout:
        return f"nanobragg dataset does not run under mpirun: {r.stderr.strip()[-300:]}"
    return None


@pytest.fixture(scope="module")
def mpi(tmp_path_factory):
    why = mpi_ready(tmp_path_factory.mktemp("probe"))
    if why and os.environ.get("CI") == "true":
        pytest.fail(f"CI runs the MPI tests: {why}")
    if why:
        pytest.skip(why)


def test_mpi_ranks_give_the_same_shots(tmp_path, reference, mpi):
    r = render(spec(tmp_path), tmp_path / "mpi", launcher=[*MPIRUN, "-np", "4"])
    assert "rendered by 4 ranks" in r.stdout
    assert len(list((tmp_path / "mpi" / "out").glob("*.nxs"))) == 4
    assert_same(gather(tmp_path / "mpi"), reference)


def test_mpi_resume_after_killing_a_rank(tmp_path, slow_reference, mpi):
    path = spec(tmp_path, per_file=1, **SLOW)
    where = tmp_path / "mpikill"
    where.mkdir()
    proc = subprocess.Popen([*MPIRUN, "-np", "4", exe(), "dataset", str(path), "-threads", "1"],
                            cwd=where, env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    kill_when(proc, where / "out", 2, f"^{exe()} dataset {path}")
    assert proc.returncode != 0
    done = len(list((where / "out").glob("*.nxs")))
    assert done < 16
    r = render(path, where, "-resume", launcher=[*MPIRUN, "-np", "4"])
    assert f"{16 - done} missing before this run" in r.stdout
    assert_same(gather(where), slow_reference)


def python_package():
    try:
        import nanobragg.dataset  # noqa: F401
    except ImportError as e:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI runs the Python dataset tests: {e}")
        pytest.skip(f"the nanobragg package is not installed: {e}")
    return nanobragg.dataset


def test_python_shards_give_the_same_shots(tmp_path, reference, monkeypatch):
    dataset = python_package()
    path = spec(tmp_path)
    (tmp_path / "py").mkdir()
    monkeypatch.chdir(tmp_path / "py")
    accounts = [dataset.run(path, shard=(i, 2), threads=1)[0] for i in range(2)]
    assert [a["written"] for a in accounts] == [list(range(0, 16, 2)), list(range(1, 16, 2))]
    assert_same(gather(tmp_path / "py"), reference)
    # nothing missing: a resumed run renders nothing
    assert dataset.run(path, resume=True)[0]["todo"] == 0
    import nanobragg
    with pytest.raises(nanobragg.Error, match="shard 2/2"):
        dataset.run(path, shard=(2, 2))


def test_mpi4py_ranks_give_the_same_shots(tmp_path, reference, mpi):
    python_package()
    try:
        import mpi4py  # noqa: F401
    except ImportError as e:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI runs the mpi4py test: {e}")
        pytest.skip("no mpi4py")
    import sys
    path = spec(tmp_path)
    where = tmp_path / "mpi4py"
    where.mkdir()
    script = ("from mpi4py import MPI; import nanobragg.dataset as d; "
              f"a = d.run({str(path)!r}, comm=MPI.COMM_WORLD, threads=1); "
              "r = MPI.COMM_WORLD.Get_rank(); "
              "r == 0 and print(len(a), sum(len(x['written']) for x in a)); "
              "assert sorted(s for x in a for s in x['written']) == list(range(16))")
    r = subprocess.run([*MPIRUN, "-np", "4", sys.executable, "-c", script], cwd=where,
                       capture_output=True, text=True, check=True, env=ENV)
    # (rank 0 alone prints: the ranks' lines could interleave)
    assert r.stdout.split() == ["4", "16"]
    assert len(list((where / "out").glob("*.nxs"))) == 4
    assert_same(gather(where), reference)


GEOM = """clen = 0.07
res = 10000
photon_energy = 9500 eV
a/min_fs = 0
a/max_fs = 39
a/min_ss = 0
a/max_ss = 15
a/corner_x = -45
a/corner_y = -30
a/fs = +1x +0y +0z
a/ss = +0x +1y +0z
b/min_fs = 0
b/max_fs = 29
b/min_ss = 16
b/max_ss = 25
b/corner_x = -20
b/corner_y = 15
b/fs = +1x +0y +0z
b/ss = +0x +1y +0z
"""


def test_multi_panel_detectors(tmp_path):
    """A CrystFEL detector of two panels: a module each, frames (N, panels, slow, fast)."""
    (tmp_path / "det.geom").write_text(GEOM)
    path = tmp_path / "panels.toml"
    path.write_text('args = "-default_F 100 -cell 50 50 50 90 90 90 -geom ../det.geom '
                    '-mosaic_domains 2 -oversample 1"\nshots = 4\noutput = "out"\n'
                    'noiseless = true\n[crystal]\nn_cells = [4, 8]\n')
    render(path, tmp_path / "one")
    render(path, tmp_path / "two", "-shard", "0/2")
    render(path, tmp_path / "two", "-shard", "1/2")
    one, two = gather(tmp_path / "one"), gather(tmp_path / "two")
    assert sorted(one) == sorted(two) == [0, 1, 2, 3]
    for i in one:
        for x, y in zip(one[i], two[i]):
            np.testing.assert_array_equal(x, y)
    with h5py.File(tmp_path / "one" / "out" / "panels_00000.nxs", "r") as f:
        assert f["entry/data/data"].shape == (4, 2, 16, 40)
        modules = nxmx.NXmx(f).entries[0].instruments[0].detectors[0].modules
        assert [m.data_size.tolist() for m in modules] == [[1, 16, 40], [1, 10, 30]]
        noiseless = f["entry/simulation/noiseless"][()]
        # both panels have photons; panel b's padding (beyond 10 x 30) has none
        assert noiseless[:, 0].sum() > 0 and noiseless[:, 1, :10, :30].sum() > 0
        assert noiseless[:, 1, 10:].sum() == 0 and noiseless[:, 1, :, 30:].sum() == 0
