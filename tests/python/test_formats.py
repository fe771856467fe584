"""NXmx and miniCBF output read by the readers crystallography uses.

h5py and `nxmx` (the NXmx reader of dxtbx/DIALS) open -nxmxfile; fabio and
pycbf (CBFlib) open -cbffile. Pixel positions are evaluated from the file's own
NXtransformations chain and compared with positions computed here from the
command line's numbers (the formulas of docs/formats.md), in the NeXus frame.

The nanobragg executable: $NANOBRAGG_EXE, else target/{release,debug}/nanobragg
(the newer of the two).
"""

import os
import pathlib
import subprocess

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")
nxmx = pytest.importorskip("nxmx")
fabio = pytest.importorskip("fabio")
pycbf = pytest.importorskip("pycbf")

ROOT = pathlib.Path(__file__).resolve().parents[2]


def exe():
    if os.environ.get("NANOBRAGG_EXE"):
        return os.environ["NANOBRAGG_EXE"]
    built = [ROOT / "target" / p / "nanobragg" for p in ("release", "debug")]
    built = [p for p in built if p.exists()]
    if not built:
        pytest.skip("no nanobragg executable built (cargo build)")
    return str(max(built, key=lambda p: p.stat().st_mtime))


PIXELS = 48
PIXEL_MM = 0.1
COMMON = ["-cell", "40", "40", "40", "90", "90", "90", "-default_F", "100", "-N", "4",
          "-detpixels", str(PIXELS), "-pixel", str(PIXEL_MM), "-lambda", "1.3",
          "-mosaic", "0", "-oversample", "1", "-seed", "5", "-nopgm"]


def run(tmp_path, *args, cbf=True):
    """Renders with `args`; `cbf=False` for a geometry miniCBF cannot hold (refused)."""
    files = {
        "float": tmp_path / "f.bin", "int": tmp_path / "i.img", "noise": tmp_path / "n.img",
        "nxmx": tmp_path / "o.nxs", "cbf": tmp_path / "o.cbf",
    }
    cmd = [exe(), *COMMON, *args, "-floatfile", files["float"], "-intfile", files["int"],
           "-nxmxfile", files["nxmx"]]
    if cbf:
        cmd += ["-cbffile", files["cbf"]]
    if "-nonoise" not in args:
        cmd += ["-noisefile", files["noise"]]
    subprocess.run([str(c) for c in cmd], check=True, cwd=tmp_path, capture_output=True)
    return files


def smv(path):
    raw = path.read_bytes()
    header = raw[:512].decode("ascii", "replace")
    size = int(header.split("HEADER_BYTES=")[1].split(";")[0])
    return np.frombuffer(raw[size:], dtype="<u2").reshape(PIXELS, PIXELS)


def unit(v):
    v = np.asarray(v, dtype=float)
    return v / np.linalg.norm(v)


def to_nexus(beam):
    """Rows: the lab vectors that become NeXus x, y (the lab's +y, the vertical, across the
    beam) and z (the beam): McStas, y up."""
    z = unit(beam)
    up = np.array([0.0, 1.0, 0.0])
    y = unit(up - np.dot(up, z) * z)
    return np.array([np.cross(y, z), y, z])


def positions_from_file(path):
    """(module, slow, fast, 3) pixel centres in metres, from the file's chain alone."""
    with h5py.File(path, "r") as f:
        entry = nxmx.NXmx(f).entries[0]
        detector = entry.instruments[0].detectors[0]
        out = []
        for module in detector.modules:
            fast_axis, slow_axis = module.fast_pixel_direction, module.slow_pixel_direction
            chain = nxmx.get_dependency_chain(fast_axis.depends_on)
            A = nxmx.get_cumulative_transformation(chain)[0]
            origin = A[:3, 3] / 1000.0  # mm
            fast = A[:3, :3] @ fast_axis.vector
            slow = A[:3, :3] @ slow_axis.vector
            fpx = fast_axis[()].to("m").magnitude[0]
            spx = slow_axis[()].to("m").magnitude[0]
            ns, nf = module.data_size[-2:]
            i = np.arange(nf) + 0.5
            j = np.arange(ns) + 0.5
            out.append(origin + j[:, None, None] * spx * slow + i[None, :, None] * fpx * fast)
        # (a list where the modules differ in size)
        return np.array(out) if len({o.shape for o in out}) == 1 else out


def ours(pix0, fdet, sdet, beam):
    R = to_nexus(beam)
    px = PIXEL_MM / 1000.0
    i = np.arange(PIXELS) + 0.5
    lab = (np.asarray(pix0)
           + i[:, None, None] * px * unit(sdet)
           + i[None, :, None] * px * unit(fdet))
    return lab @ R.T


def test_mosflm_noise_image(tmp_path):
    xbeam_mm, ybeam_mm, distance_mm = 2.3, 2.6, 90.0
    files = run(tmp_path, "-Xbeam", str(xbeam_mm), "-Ybeam", str(ybeam_mm),
                "-distance", str(distance_mm), "-exposure", "2.5", "-phi", "10", "-osc", "0.5",
                "-detector_thick", "320")
    with h5py.File(files["nxmx"], "r") as f:
        assert f["/entry/definition"][()].decode() == "NXmx"
        data = f["/entry/data/data"]
        assert data.dtype == np.int32 and data.shape == (1, PIXELS, PIXELS)
        noise = smv(files["noise"])
        image = data[0]
        below = noise < 65535
        assert below.sum() > PIXELS * PIXELS // 2
        np.testing.assert_array_equal(image[below], noise[below].astype(np.int32))
        assert np.all(image[~below] >= 65535)
        det = f["/entry/instrument/detector"]
        assert det["sensor_material"][()].decode() == "Si"
        assert det["sensor_thickness"][()] == pytest.approx(320e-6, rel=1e-12)
        # clipped pixels hold 2**31 - 1, which NXmx must count as above saturation
        assert det["saturation_value"][()] == 2**31 - 2
        assert det["distance"][()] == pytest.approx(distance_mm / 1000, rel=1e-12)
        beam_x = det["beam_center_x"][()]
        beam_y = det["beam_center_y"][()]
        # MOSFLM: Xbeam along slow, Ybeam along fast, half a pixel from the corner
        assert beam_x == pytest.approx(ybeam_mm / PIXEL_MM + 0.5, rel=1e-12)
        assert beam_y == pytest.approx(xbeam_mm / PIXEL_MM + 0.5, rel=1e-12)
        assert f["/entry/instrument/beam/incident_wavelength"][()] == pytest.approx(1.3)
        # MOSFLM's E-vector (+z) is horizontal: McStas -x, Q = +K (here unpolarized)
        stokes = f["/entry/instrument/beam/incident_polarisation_stokes"][()]
        np.testing.assert_array_equal(stokes, [[1.0, 0.0, 0.0, 0.0]])
        assert f["/entry/instrument/beam/total_flux"][()] > 0

    entry = nxmx.NXmx(h5py.File(files["nxmx"], "r")).entries[0]
    det = entry.instruments[0].detectors[0]
    assert det.count_time.to("s").magnitude == pytest.approx(2.5)
    assert entry.instruments[0].beams[0].incident_wavelength.to("angstrom").magnitude == (
        pytest.approx(1.3))
    phi = entry.samples[0].depends_on
    assert phi[()].to("deg").magnitude[0] == pytest.approx(10.0)

    # MOSFLM axes: beam +x, E-vector +z, fast +z, slow -y; beam pivot
    px = PIXEL_MM / 1000
    fbeam, sbeam = ybeam_mm / 1000 + px / 2, xbeam_mm / 1000 + px / 2
    fdet, sdet, beam = np.array([0, 0, 1.0]), np.array([0, -1.0, 0]), np.array([1.0, 0, 0])
    pix0 = -fbeam * fdet - sbeam * sdet + distance_mm / 1000 * beam
    want = ours(pix0, fdet, sdet, beam)
    got = positions_from_file(files["nxmx"])
    assert got.shape == (1, PIXELS, PIXELS, 3)
    assert np.abs(got[0] - want).max() < 1e-9
    # the direct beam (NeXus +z) meets the detector where beam_center_x/y say
    hit = got[0][int(beam_y), int(beam_x)]
    assert np.hypot(hit[0], hit[1]) < px

    # CBF: the same pixels; the header values
    cbf = fabio.open(str(files["cbf"]))
    np.testing.assert_array_equal(cbf.data, image)
    head = cbf.header["_array_data.header_contents"]

    def value(key, unit):
        line = next(l for l in head.splitlines() if l.startswith(f"# {key} "))
        rest = line[len(key) + 3:]
        assert rest.endswith(unit), line
        return rest[: -len(unit)].strip()

    assert value("Pixel_size", "m") == f"{px} m x {px}"
    assert float(value("Wavelength", "A")) == pytest.approx(1.3, rel=1e-14)
    assert float(value("Detector_distance", "m")) == pytest.approx(distance_mm / 1000, rel=1e-14)
    assert value("Beam_xy", "pixels") == f"({float(beam_x)!r}, {float(beam_y)!r})"
    assert float(value("Exposure_time", "s")) == 2.5
    assert float(value("Start_angle", "deg.")) == pytest.approx(10.0, rel=1e-14)
    assert float(value("Angle_increment", "deg.")) == pytest.approx(0.5, rel=1e-14)
    assert float(value("Silicon sensor, thickness", "m")) == pytest.approx(320e-6, rel=1e-14)

    h = pycbf.cbf_handle_struct()
    h.read_file(str(files["cbf"]).encode(), pycbf.MSG_DIGEST)
    h.find_category(b"array_data")
    h.find_column(b"data")
    raw = h.get_integerarray_as_string()
    np.testing.assert_array_equal(
        np.frombuffer(raw, dtype="<i4").reshape(PIXELS, PIXELS), image)


def test_custom_axes_nonoise(tmp_path):
    # an orthonormal detector frame tilted away from every lab axis, and a
    # beam and E-vector off the axes too
    c, s = np.cos(0.3), np.sin(0.3)
    fdet = np.array([0.1, c, s])
    sdet = np.array([0.2, -s, c])
    beam = np.array([0.97, -0.1, 0.2])
    polar = np.array([0.05, 0.8, 0.6])
    fmt = lambda v: [repr(float(x)) for x in v]
    xbeam_mm, ybeam_mm, distance_mm = 2.2, 2.9, 80.0
    files = run(tmp_path, "-fdet_vector", *fmt(fdet), "-sdet_vector", *fmt(sdet),
                "-beam_vector", *fmt(beam), "-polar_vector", *fmt(polar),
                "-Xbeam", str(xbeam_mm), "-Ybeam", str(ybeam_mm),
                "-distance", str(distance_mm), "-nonoise", "-scale", "3", "-adc", "10", cbf=False)
    # custom convention, beam pivot: pix0 = -Xbeam fdet - Ybeam sdet + distance beam
    pix0 = (-xbeam_mm / 1000 * unit(fdet) - ybeam_mm / 1000 * unit(sdet)
            + distance_mm / 1000 * unit(beam))
    got = positions_from_file(files["nxmx"])
    want = ours(pix0, fdet, sdet, beam)
    assert np.abs(got[0] - want).max() < 1e-9

    # -nonoise: the -intfile image, unclipped
    with h5py.File(files["nxmx"], "r") as f:
        image = f["/entry/data/data"][0]
        assert f["/entry/instrument/detector/underload_value"][()] == -1
    intimage = smv(files["int"])
    below = intimage < 65535
    np.testing.assert_array_equal(image[below], intimage[below].astype(np.int32))
    floats = np.fromfile(files["float"], dtype="<f4").reshape(PIXELS, PIXELS)
    np.testing.assert_array_equal(image, np.floor(floats.astype(np.float64) * 3 + 10 + 0.5)
                                  .astype(np.float32).astype(np.int32))


def test_spectrum_weights(tmp_path):
    files = run(tmp_path, "-distance", "100", "-dispersion", "2", "-dispsteps", "3", "-nonoise")
    with h5py.File(files["nxmx"], "r") as f:
        beam = f["/entry/instrument/beam"]
        lambdas = beam["incident_wavelength"][()]
        weights = beam["incident_wavelength_weights"][()]
    assert lambdas.shape == (3,) and weights.shape == (3,)
    np.testing.assert_allclose(sorted(lambdas), [1.3 * 0.99, 1.3, 1.3 * 1.01], rtol=1e-12)
    np.testing.assert_array_equal(weights, [1, 1, 1])
    # a weighted -spectrum: its weights
    (tmp_path / "s.lam").write_text("# wavelength, weight\n1.29,0.1\n1.31,0.9\n")
    files = run(tmp_path, "-distance", "100", "-spectrum", str(tmp_path / "s.lam"), "-nonoise")
    with h5py.File(files["nxmx"], "r") as f:
        beam = f["/entry/instrument/beam"]
        lambdas = beam["incident_wavelength"][()]
        weights = beam["incident_wavelength_weights"][()]
    order = np.argsort(lambdas)
    np.testing.assert_allclose(lambdas[order], [1.29, 1.31], rtol=1e-12)
    assert weights[order][1] == pytest.approx(9 * weights[order][0], rel=1e-12)
    # the SMV and CBF headers give the wavelength rendered: the spectrum's weighted mean
    # (not -lambda's 1.3), -lambda_scale's moved one
    assert header_wavelengths(files) == pytest.approx([1.308, 1.308], rel=1e-6)
    files = run(tmp_path, "-distance", "100", "-lambda_scale", "1.01", "-nonoise")
    assert header_wavelengths(files) == pytest.approx([1.313, 1.313], rel=1e-6)


def header_wavelengths(files):
    """WAVELENGTH of the SMV header and the CBF header's Wavelength (Å)."""
    smv_text = files["int"].read_bytes()[:512].decode("ascii", "replace")
    cbf_text = files["cbf"].read_bytes()[:8192].decode("ascii", "replace")
    return [float(smv_text.split("WAVELENGTH=")[1].split(";")[0]),
            float(cbf_text.split("# Wavelength ")[1].split()[0])]


def test_multi_panel_geom(tmp_path):
    # eight tilted 40 x 24 modules of 0.1 mm with gaps, as a CrystFEL file
    fp, sp, pixel_mm, clen_m = 40, 24, 0.1, 0.09
    lines = [f"clen = {clen_m}", f"res = {1000 / pixel_mm}", "photon_energy = 9500 eV"]
    want_lab = []
    for k in range(8):
        row, col = divmod(k, 2)
        a, b = 0.03 * (k - 3.5), 0.02 * abs(k - 4)
        fs = np.array([np.cos(a), 0.0, np.sin(a)])
        ss = np.array([0.0, np.cos(b), np.sin(b)])
        ss = unit(ss - np.dot(ss, fs) * fs)
        corner_px = np.array([-45.0 + 46.0 * col, -50.0 + 26.0 * row])
        coffset_m = 0.0004 * k
        lines += [f"m{k}/min_fs = 0", f"m{k}/max_fs = {fp - 1}", f"m{k}/min_ss = 0",
                  f"m{k}/max_ss = {sp - 1}", f"m{k}/corner_x = {float(corner_px[0])!r}",
                  f"m{k}/corner_y = {float(corner_px[1])!r}", f"m{k}/coffset = {coffset_m!r}",
                  f"m{k}/fs = {fs[0]:+.17g}x {fs[1]:+.17g}y {fs[2]:+.17g}z",
                  f"m{k}/ss = {ss[0]:+.17g}x {ss[1]:+.17g}y {ss[2]:+.17g}z"]
        # pixel centres in CrystFEL's frame (metres)
        px = pixel_mm / 1000
        corner = np.array([corner_px[0] * px, corner_px[1] * px, clen_m + coffset_m])
        i, j = np.arange(fp) + 0.5, np.arange(sp) + 0.5
        cf = corner + j[:, None, None] * px * ss + i[None, :, None] * px * fs
        want_lab.append(cf)
    (tmp_path / "d.geom").write_text("\n".join(lines) + "\n")
    cmd = [exe(), "-geom", "d.geom", "-cell", "40", "40", "40", "90", "90", "90",
           "-default_F", "100", "-N", "4", "-oversample", "1", "-nonoise", "-nopgm",
           "-floatfile", "f.bin", "-nxmxfile", "o.nxs", "-scale", "2"]
    subprocess.run(cmd, check=True, cwd=tmp_path, capture_output=True)
    # NXmx's frame is CrystFEL's (McStas: beam +z, y up): the file's own numbers
    want = np.array(want_lab)
    got = positions_from_file(tmp_path / "o.nxs")
    assert got.shape == (8, sp, fp, 3)
    assert np.abs(got - want).max() < 1e-9
    floats = np.fromfile(tmp_path / "f.bin", dtype="<f4").reshape(8, sp, fp)
    assert floats.max() > 0
    with h5py.File(tmp_path / "o.nxs", "r") as f:
        data = f["/entry/data/data"]
        assert data.dtype == np.int32 and data.shape == (1, 8, sp, fp)
        np.testing.assert_array_equal(
            data[0], np.floor(floats.astype(np.float64) * 2 + 40 + 0.5).astype(np.int32))
        for k in range(8):
            name = "module" if k == 0 else f"module_{k}"
            module = f[f"/entry/instrument/detector/{name}"]
            np.testing.assert_array_equal(module["data_origin"][()], [k, 0, 0])
            np.testing.assert_array_equal(module["data_size"][()], [1, sp, fp])
        assert f["/entry/instrument/beam/incident_wavelength"][()] == pytest.approx(
            12398.42 / 9500, rel=1e-12)


def test_geom_data_layout_modules(tmp_path):
    # three panels of two sizes in a 50 x 30 data array (a gap below panel 1)
    layout = [("a", 0, 0, 20, 18), ("b", 20, 0, 30, 12), ("c", 0, 18, 50, 12)]
    lines = ["clen = 0.08", "res = 10000", "photon_energy = 9500 eV"]
    for k, (n, x, y, f, s) in enumerate(layout):
        lines += [f"{n}/min_fs = {x}", f"{n}/max_fs = {x + f - 1}", f"{n}/min_ss = {y}",
                  f"{n}/max_ss = {y + s - 1}", f"{n}/corner_x = {-25.0 + x + 2 * k}",
                  f"{n}/corner_y = {-15.0 + y + k}", f"{n}/fs = +1x +0y +0z",
                  f"{n}/ss = +0x +1y +0z"]
    (tmp_path / "l.geom").write_text("\n".join(lines) + "\n")
    cmd = [exe(), "-geom", "l.geom", "-cell", "40", "40", "40", "90", "90", "90",
           "-default_F", "100", "-N", "4", "-oversample", "1", "-nonoise", "-nopgm",
           "-floatfile", "f.bin", "-nxmxfile", "o.nxs"]
    subprocess.run(cmd, check=True, cwd=tmp_path, capture_output=True)
    floats = np.fromfile(tmp_path / "f.bin", dtype="<f4").reshape(30, 50)
    assert floats.max() > 0
    assert np.all(floats[12:18, 20:] == 0)  # the gap
    with h5py.File(tmp_path / "o.nxs", "r") as f:
        data = f["/entry/data/data"]
        assert data.shape == (1, 3, 18, 50)  # each module in a slot of the largest size
        scale = 55000 / floats.max()
        for k, (n, x, y, fp, sp) in enumerate(layout):
            want = np.floor(floats[y:y + sp, x:x + fp].astype(np.float64) * scale + 40 + 0.5)
            np.testing.assert_allclose(data[0, k, :sp, :fp], want, atol=1)
            assert np.all(data[0, k, sp:, :] == 0) and np.all(data[0, k, :, fp:] == 0)
    got = positions_from_file(tmp_path / "o.nxs")
    for k, (n, x, y, fp, sp) in enumerate(layout):
        assert got[k].shape == (sp, fp, 3)
        i, j = np.arange(fp) + 0.5, np.arange(sp) + 0.5
        corner = np.array([(-25.0 + x + 2 * k) * 1e-4, (-15.0 + y + k) * 1e-4, 0.08])
        cf = corner + j[:, None, None] * 1e-4 * np.array([0, 1.0, 0]) + (
            i[None, :, None] * 1e-4 * np.array([1.0, 0, 0]))
        # in CrystFEL's own frame, which is McStas
        assert np.abs(got[k] - cf).max() < 1e-9


@pytest.mark.parametrize("compression", ["none", "deflate", "bslz4"])
def test_compressed_frames_and_h5dump(tmp_path, compression):
    """Every -nxmx_compression gives h5py (bitshuffle-LZ4 through hdf5plugin)
    the -intfile pixels, one frame a chunk, under HDF5's gzip filter or
    filter 32008; h5dump (the HDF5 C library's tool) reads the structure and
    the pixels."""
    import shutil

    files = run(tmp_path, "-nonoise", "-nxmx_compression", compression)
    if compression == "bslz4":
        pytest.importorskip("hdf5plugin")
        import hdf5plugin  # noqa: F401  (registers filter 32008 with h5py)
    with h5py.File(files["nxmx"], "r") as f:
        data = f["/entry/data/data"]
        assert data.shape == (1, PIXELS, PIXELS)
        assert data.chunks == (1, PIXELS, PIXELS)
        frame = data[0]
        filters = data._filters
        if compression == "none":
            assert not filters
        elif compression == "deflate":
            assert data.compression == "gzip"
        else:
            assert "32008" in filters
    # the -intfile pixels, unclipped (-nonoise): the same conversion
    ints = smv(files["int"])
    assert np.array_equal(np.minimum(frame, 65535), ints)
    assert frame.max() > 0
    h5dump = shutil.which("h5dump")
    if h5dump is None:
        pytest.skip("no h5dump (Debian's hdf5-tools; .ci/run installs it)")
    out = subprocess.run([h5dump, "-H", str(files["nxmx"])], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    for name in ["definition", "module_offset", "fast_pixel_direction", "incident_wavelength",
                 "saturation_value", "phi"]:
        assert f'DATASET "{name}"' in out.stdout
    assert "H5T_STD_I32LE" in out.stdout
    # the data itself through the C library, where it has the filter
    if compression != "bslz4":
        out = subprocess.run([h5dump, "-d", "/entry/data/data", "-y", "-w", "0",
                              str(files["nxmx"])], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        body = out.stdout.split("DATA {", 1)[1].split("}", 1)[0]
        values = np.array([int(v) for v in body.replace(",", " ").split()])
        assert np.array_equal(values, frame.ravel())


@pytest.mark.parametrize("twotheta", [5.0, 10.0, 20.0, 30.0])
def test_the_beam_centre_and_distance_are_where_the_beam_meets_the_swung_detector(tmp_path,
                                                                                  twotheta):
    # MOSFLM pivots about the beam spot: it stays where -Xbeam/-Ybeam put it,
    # 100 mm along the beam, however far the detector swings
    files = run(tmp_path, "-mosflm", "-Xbeam", "2.3", "-Ybeam", "2.6", "-distance", "100",
                "-twotheta", str(twotheta), "-nonoise", cbf=False)
    with h5py.File(files["nxmx"], "r") as f:
        det = f["/entry/instrument/detector"]
        bx, by, dist = (det[k][()] for k in ("beam_center_x", "beam_center_y", "distance"))
    # the point (bx, by) pixels from the corner, through the file's own chain
    got = positions_from_file(files["nxmx"])[0]
    corner = got[0, 0] - 0.5 * (got[0, 1] - got[0, 0]) - 0.5 * (got[1, 0] - got[0, 0])
    hit = corner + bx * (got[0, 1] - got[0, 0]) + by * (got[1, 0] - got[0, 0])
    px = PIXEL_MM / 1000
    # on the beam (NeXus +z) to 0.01 px, and `distance` from the sample
    assert np.hypot(hit[0], hit[1]) < 0.01 * px and hit[2] > 0, (twotheta, hit)
    assert dist == pytest.approx(np.linalg.norm(hit), rel=1e-9)
    assert dist == pytest.approx(0.1, rel=1e-12)
    assert (bx, by) == (pytest.approx(2.6 / PIXEL_MM + 0.5), pytest.approx(2.3 / PIXEL_MM + 0.5))
    # miniCBF cannot hold the swing: refused, pointing to NXmx
    out = subprocess.run([exe(), *COMMON, "-mosflm", "-twotheta", str(twotheta), "-nonoise",
                          "-cbffile", "t.cbf"], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode != 0 and "-nxmxfile" in out.stderr, out.stderr
    assert not (tmp_path / "t.cbf").exists()


def test_crystfel_and_dials_files_give_the_mcstas_frame(tmp_path):
    # one CrystFEL panel: fs = -x, ss = -y, corner (70, 40) px of 0.1 mm, 100 mm away
    (tmp_path / "one.geom").write_text(
        "clen = 0.1\nres = 10000\nphoton_energy = 12398.42 eV\n"
        "p/min_fs = 0\np/max_fs = 47\np/min_ss = 0\np/max_ss = 47\n"
        "p/corner_x = 70\np/corner_y = 40\np/fs = -1x +0y +0z\np/ss = +0x -1y +0z\n")
    # the same panel as a DIALS experiment list: CrystFEL's (x, y, z) is DIALS's (-x, y, -z)
    panel = ('{"name": "p", "origin": [-7.0, 4.0, -100.0], "fast_axis": [1, 0, 0], '
             '"slow_axis": [0, -1, 0], "pixel_size": [0.1, 0.1], "image_size": [48, 48], '
             '"thickness": 0.0, "mu": 0.0}')
    (tmp_path / "one.expt").write_text(
        '{"__id__": "ExperimentList", "experiment": [{"__id__": "Experiment", "beam": 0, '
        '"detector": 0}], "beam": [{"direction": [0, 0, 1], "wavelength": 1.0, '
        '"polarization_normal": [0, 1, 0], "polarization_fraction": 0.999}], '
        f'"detector": [{{"panels": [{panel}]}}]}}')
    got = {}
    for flag, name in [("-geom", "one.geom"), ("-expt", "one.expt")]:
        cmd = [exe(), flag, name, "-cell", "40", "40", "40", "90", "90", "90", "-default_F",
               "100", "-N", "2", "-lambda", "1", "-nonoise", "-nopgm", "-floatfile", "f.bin",
               "-nxmxfile", f"{name}.nxs"]
        subprocess.run(cmd, check=True, cwd=tmp_path, capture_output=True)
        with h5py.File(tmp_path / f"{name}.nxs", "r") as f:
            module = f["/entry/instrument/detector/module"]
            fast = module["fast_pixel_direction"].attrs["vector"]
            offset = module["module_offset"]
            corner = offset[()] * offset.attrs["vector"] * 1000  # mm
        np.testing.assert_allclose(fast, [-1.0, 0.0, 0.0], atol=1e-12)
        np.testing.assert_allclose(corner, [7.0, 4.0, 100.0], atol=1e-9)
        got[flag] = positions_from_file(tmp_path / f"{name}.nxs")
    # one detector, one frame, whichever file gave it
    assert np.abs(got["-geom"] - got["-expt"]).max() < 1e-12


def test_the_noise_stream_is_recorded(tmp_path):
    # the parallel stream and its version in /entry/simulation; the c stream's files say c
    for rng, label in [("parallel", b"parallel philox4x32-10 v3"), ("c", b"c ran1")]:
        cmd = [exe(), *COMMON, "-noise_rng", rng, "-floatfile", "f.bin", "-nxmxfile", f"{rng}.nxs"]
        subprocess.run(cmd, check=True, cwd=tmp_path, capture_output=True)
        with h5py.File(tmp_path / f"{rng}.nxs", "r") as f:
            assert f["/entry/simulation/noise_rng"][()] == label
    # without noise nothing is drawn: no stream
    subprocess.run([exe(), *COMMON, "-nonoise", "-floatfile", "f.bin", "-nxmxfile", "q.nxs"],
                   check=True, cwd=tmp_path, capture_output=True)
    with h5py.File(tmp_path / "q.nxs", "r") as f:
        assert "simulation" not in f["/entry"]
