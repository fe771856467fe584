"""The geometry of -nxmxfile read back as a crystallographer's program reads it.

Each module's pixels are placed twice from the file alone: by the `nxmx`
package (dxtbx's reader) and by `walk`, a chain walker written here from the
NeXus rules (T = T_root ... T_2 T_1 for an axis T_1 that depends on T_2, ...).
Both are compared with the detector the simulator renders: for the flag
conventions, computed here from nanoBragg's rules for that convention; for
experiment lists, the panels of the input file. Then the beam centre and
distance (as NXmx defines them), the wavelength, the rotation axis and each
frame's angles; the crystal's orientation (Busing-Levy UB against the input
cell vectors) and the pixel mask (padding, -roi, -mask).

The nanobragg executable: $NANOBRAGG_EXE, else target/{release,debug}/nanobragg.
"""

import json
import subprocess

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")
nxmx = pytest.importorskip("nxmx")

from test_formats import exe  # noqa: E402

PX_MM = 0.1
NPIX = 40


MODEL = ["-cell", "40", "50", "60", "80", "95", "100", "-default_F", "100", "-N", "2",
         "-lambda", "1.3", "-nonoise", "-nopgm", "-oversample", "1"]


def render(tmp_path, *args, name="o.nxs"):
    cmd = [exe(), *MODEL, *args, "-floatfile", "f.bin", "-nxmxfile", name]
    out = subprocess.run([str(c) for c in cmd], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return tmp_path / name


def unit(v):
    v = np.asarray(v, dtype=float)
    return v / np.linalg.norm(v)


def rot_axis(v, axis, deg):
    """v turned right-handedly about `axis` by `deg` (Rodrigues)."""
    k, t = unit(axis), np.radians(deg)
    v = np.asarray(v, dtype=float)
    return v * np.cos(t) + np.cross(k, v) * np.sin(t) + k * np.dot(k, v) * (1 - np.cos(t))


def rot_xyz(v, rx, ry, rz):
    """nanoBragg's rotate(): about x, then y, then z (degrees)."""
    for axis, deg in zip(np.eye(3), (rx, ry, rz)):
        v = rot_axis(v, axis, deg)
    return v


def lab_to_nexus(beam):
    """Rows: the lab vectors that become NeXus x, y (lab +y, the vertical, made
    perpendicular to the beam) and z (the beam's direction of travel)."""
    z = unit(beam)
    up = np.array([0.0, 1.0, 0.0])
    y = unit(up - np.dot(up, z) * z)
    return np.array([np.cross(y, z), y, z])


# nanoBragg's conventions: beam, fast, slow, normal, two-theta axis, pivot, and the
# beam centre (Fbeam, Sbeam) or closest point (Fclose, Sclose) in m from -Xbeam/-Ybeam (m)
CONVENTIONS = {
    "-mosflm": ((1, 0, 0), (0, 0, 1), (0, -1, 0), (1, 0, 0), (0, 0, -1), "beam",
                lambda xb, yb, px, n: (yb + 0.5 * px, xb + 0.5 * px)),
    "-denzo": ((1, 0, 0), (0, 0, 1), (0, -1, 0), (1, 0, 0), (0, 0, -1), "beam",
               lambda xb, yb, px, n: (yb, xb)),
    "-adxv": ((0, 0, 1), (1, 0, 0), (0, -1, 0), (0, 0, 1), (-1, 0, 0), "beam",
              lambda xb, yb, px, n: (xb, n * px - yb)),
    # (sample pivot: the closest point, the detector's centre by default)
    "-xds": ((0, 0, 1), (1, 0, 0), (0, 1, 0), (0, 0, 1), (1, 0, 0), "sample",
             lambda xb, yb, px, n: (n * px / 2, n * px / 2)),
    "-dials": ((0, 0, 1), (1, 0, 0), (0, 1, 0), (0, 0, 1), (0, 1, 0), "sample",
               lambda xb, yb, px, n: (n * px / 2, n * px / 2)),
}


def expected_panel(convention, distance_mm, xbeam_mm, ybeam_mm, twotheta, rot):
    """(pix0, fast, slow, beam) in the lab frame, metres, as nanoBragg places them."""
    beam, f, s, o, tt_axis, pivot, centre = CONVENTIONS[convention]
    beam, f, s, o = (np.array(v, dtype=float) for v in (beam, f, s, o))
    px, d = PX_MM / 1000, distance_mm / 1000
    a, b = centre(xbeam_mm / 1000, ybeam_mm / 1000, px, NPIX)
    ratio = np.dot(beam, rot_xyz(o, *rot))
    close = abs(ratio * d)
    d = close / ratio
    if pivot == "sample":
        pix0 = -a * f - b * s + close * o
        pix0 = rot_axis(rot_xyz(pix0, *rot), tt_axis, twotheta)
    f, s = (rot_axis(rot_xyz(v, *rot), tt_axis, twotheta) for v in (f, s))
    if pivot == "beam":
        pix0 = -a * f - b * s + d * beam
    return pix0, f, s, beam


def text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def resolve(ds, target):
    """A depends_on value as an absolute path (relative ones name a sibling)."""
    target = text(target)
    if target in (".", "") or target.startswith("/"):
        return target
    return ds.parent.name + "/" + target


def walk(f, path):
    """The 4x4 transformation (metres) of the axis at `path` with its value, composed
    down its depends_on chain: T = T_n ... T_1, T_1 the axis itself."""
    total = np.eye(4)
    while path not in (".", ""):
        ds = f[path]
        value = float(np.atleast_1d(ds[()])[0])
        units = text(ds.attrs["units"])
        vector = unit(ds.attrs["vector"])
        t = np.eye(4)
        if text(ds.attrs["transformation_type"]) == "rotation":
            assert units in ("deg", "degree", "degrees"), units
            t[:3, :3] = np.column_stack([rot_axis(e, vector, value) for e in np.eye(3)])
        else:
            t[:3, 3] = vector * value * {"m": 1.0, "mm": 1e-3}[units]
        if "offset" in ds.attrs:
            offset_units = text(ds.attrs.get("offset_units", units))
            t[:3, 3] += np.asarray(ds.attrs["offset"]) * {"m": 1.0, "mm": 1e-3}[offset_units]
        total = t @ total
        path = resolve(ds, ds.attrs["depends_on"])
    return total


def modules_by_walker(path):
    """[(corner, fast, slow)] (NeXus frame, metres, unit vectors) of each module."""
    out = []
    with h5py.File(path, "r") as f:
        det = f["/entry/instrument/detector"]
        names = sorted((k for k in det if k.startswith("module")),
                       key=lambda k: int(k.split("_")[1]) if "_" in k else 0)
        for name in names:
            fast_axis, slow_axis = det[name]["fast_pixel_direction"], det[name]["slow_pixel_direction"]
            # the first pixel's corner: the chain below the pixel axes, at their zero
            corner = walk(f, resolve(fast_axis, fast_axis.attrs["depends_on"]))
            assert resolve(slow_axis, slow_axis.attrs["depends_on"]) == \
                resolve(fast_axis, fast_axis.attrs["depends_on"])
            rot = corner[:3, :3]
            out.append((corner[:3, 3], rot @ unit(fast_axis.attrs["vector"]),
                        rot @ unit(slow_axis.attrs["vector"])))
    return out


def modules_by_nxmx(path):
    out = []
    with h5py.File(path, "r") as f:
        detector = nxmx.NXmx(f).entries[0].instruments[0].detectors[0]
        for module in detector.modules:
            fa, sa = module.fast_pixel_direction, module.slow_pixel_direction
            A = nxmx.get_cumulative_transformation(nxmx.get_dependency_chain(fa.depends_on))[0]
            out.append((A[:3, 3] / 1000.0, A[:3, :3] @ unit(fa.vector),
                        A[:3, :3] @ unit(sa.vector)))
    return out


def assert_modules(path, want):
    """Both readers give the modules `want` [(corner, fast, slow)] to 1e-9 m."""
    for reader in (modules_by_walker, modules_by_nxmx):
        got = reader(path)
        assert len(got) == len(want)
        for (c, f, s), (wc, wf, ws) in zip(got, want):
            np.testing.assert_allclose(c, wc, atol=1e-9, err_msg=reader.__name__)
            # a unit vector off by 1e-9 moves the far edge of a panel by < 1e-10 m
            np.testing.assert_allclose(f, wf, atol=1e-9, err_msg=reader.__name__)
            np.testing.assert_allclose(s, ws, atol=1e-9, err_msg=reader.__name__)


def assert_beam_centre_and_distance(path):
    """beam_center_x/y (pixels from the first pixel's corner, along fast and slow)
    is where the beam (NeXus +z) meets module 0, `distance` from the sample."""
    (corner, fast, slow), = modules_by_walker(path)[:1]
    with h5py.File(path, "r") as f:
        det = f["/entry/instrument/detector"]
        bx, by, dist = (float(det[k][()]) for k in ("beam_center_x", "beam_center_y", "distance"))
        px = float(det["x_pixel_size"][()])
    hit = corner + bx * px * fast + by * px * slow
    assert np.hypot(hit[0], hit[1]) < 0.01 * px, hit
    assert hit[2] > 0
    assert dist == pytest.approx(np.linalg.norm(hit), rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("convention", sorted(CONVENTIONS))
@pytest.mark.parametrize("twotheta,rot", [(0.0, (0, 0, 0)), (12.0, (0, 0, 0)),
                                          (0.0, (3.0, -2.0, 7.0)), (-20.0, (1.0, 2.0, 0.5))])
def test_conventions_twotheta_and_tilts(tmp_path, convention, twotheta, rot):
    args = [convention, "-distance", "100", "-detpixels", str(NPIX), "-pixel", str(PX_MM),
            "-twotheta", str(twotheta), "-detector_rotx", str(rot[0]),
            "-detector_roty", str(rot[1]), "-detector_rotz", str(rot[2])]
    xb, yb = 1.7, 2.3
    if CONVENTIONS[convention][5] == "beam":
        args += ["-Xbeam", str(xb), "-Ybeam", str(yb)]
    path = render(tmp_path, *args)
    pix0, fast, slow, beam = expected_panel(convention, 100.0, xb, yb, twotheta, rot)
    r = lab_to_nexus(beam)
    assert_modules(path, [(r @ pix0, r @ fast, r @ slow)])
    assert_beam_centre_and_distance(path)
    with h5py.File(path, "r") as f:
        assert f["/entry/instrument/beam/incident_wavelength"][()] == pytest.approx(1.3)
        # the spindle of the convention (flags' default), in the NeXus frame
        spindle = {"-mosflm": (0, 0, 1), "-denzo": (0, 0, 1), "-adxv": (1, 0, 0),
                   "-xds": (1, 0, 0), "-dials": (0, 1, 0)}[convention]
        np.testing.assert_allclose(f["/entry/sample/transformations/phi"].attrs["vector"],
                                   r @ np.array(spindle, float), atol=1e-12)


def test_custom_vectors(tmp_path):
    c, s = np.cos(0.3), np.sin(0.3)
    fdet, sdet = np.array([0.1, c, s]), np.array([0.2, -s, c])
    beam = np.array([0.97, -0.1, 0.2])
    fmt = lambda v: [repr(float(x)) for x in v]
    path = render(tmp_path, "-fdet_vector", *fmt(fdet), "-sdet_vector", *fmt(sdet),
                  "-beam_vector", *fmt(beam), "-Xbeam", "2.2", "-Ybeam", "2.9",
                  "-distance", "80", "-detpixels", str(NPIX), "-pixel", str(PX_MM))
    # custom, beam pivot: pix0 = -Xbeam fdet - Ybeam sdet + distance beam
    pix0 = -0.0022 * unit(fdet) - 0.0029 * unit(sdet) + 0.08 * unit(beam)
    r = lab_to_nexus(beam)
    assert_modules(path, [(r @ pix0, r @ unit(fdet), r @ unit(sdet))])
    assert_beam_centre_and_distance(path)


DIALS_TO_NEXUS = np.diag([-1.0, 1.0, -1.0])  # DIALS (beam -z, y up) to McStas (beam +z, y up)


def panel(name, origin, fast, slow, size):
    return {"name": name, "origin": list(origin), "fast_axis": list(fast),
            "slow_axis": list(slow), "pixel_size": [PX_MM, PX_MM], "image_size": list(size),
            "thickness": 0.0, "mu": 0.0}


def rotated_panels():
    """Two panels of different heights (DIALS stacks them along slow): one square to
    the beam, one turned 30 deg in its plane and tilted 10 deg."""
    f = rot_axis(rot_axis([1, 0, 0], [0, 0, 1], 30), [1, 0, 0], 10)
    s = rot_axis(rot_axis([0, -1, 0], [0, 0, 1], 30), [1, 0, 0], 10)
    return [panel("a", (-2.4, 2.0, -100.0), (1, 0, 0), (0, -1, 0), (48, 40)),
            panel("b", (3.0, -6.5, -98.0), f, s, (48, 24))]


def experiment_list(panels, real_space=None, scan=None):
    expt = {"__id__": "Experiment", "beam": 0, "detector": 0}
    doc = {"__id__": "ExperimentList", "experiment": [expt],
           "beam": [{"direction": [0, 0, 1], "wavelength": 1.3,
                     "polarization_normal": [0, 1, 0], "polarization_fraction": 0.999}],
           "detector": [{"panels": panels}]}
    if real_space is not None:
        expt["crystal"] = 0
        doc["crystal"] = [dict(zip(("real_space_a", "real_space_b", "real_space_c"),
                                   map(list, real_space)))]
    if scan is not None:
        expt["goniometer"], expt["scan"] = 0, 0
        doc["goniometer"] = [{"rotation_axis": [1, 0, 0]}]
        doc["scan"] = [scan]
    return json.dumps(doc)


def test_an_experiment_list_round_trips_to_its_panels(tmp_path):
    panels = rotated_panels()
    (tmp_path / "p.expt").write_text(experiment_list(panels))
    path = render(tmp_path, "-expt", "p.expt")
    want = [(DIALS_TO_NEXUS @ np.array(p["origin"]) / 1000, DIALS_TO_NEXUS @ unit(p["fast_axis"]),
             DIALS_TO_NEXUS @ unit(p["slow_axis"])) for p in panels]
    assert_modules(path, want)
    # and back to DIALS's panel vectors (mm): the input's
    for p, (corner, fast, slow) in zip(panels, modules_by_nxmx(path)):
        np.testing.assert_allclose(DIALS_TO_NEXUS @ corner * 1000, p["origin"], atol=1e-6)
        np.testing.assert_allclose(DIALS_TO_NEXUS @ fast, unit(p["fast_axis"]), atol=1e-12)
        np.testing.assert_allclose(DIALS_TO_NEXUS @ slow, unit(p["slow_axis"]), atol=1e-12)
    assert_beam_centre_and_distance(path)


def test_a_crystfel_geometry_round_trips(tmp_path):
    # two panels; CrystFEL's frame is McStas: corner (px) and fs/ss are NeXus's
    (tmp_path / "two.geom").write_text(
        "clen = 0.1\nres = 10000\nphoton_energy = 9537.25 eV\n"
        "a/min_fs = 0\na/max_fs = 39\na/min_ss = 0\na/max_ss = 29\n"
        "a/corner_x = -45\na/corner_y = 20\na/fs = +1x +0y\na/ss = +0x -1y\n"
        "b/min_fs = 0\nb/max_fs = 39\nb/min_ss = 30\nb/max_ss = 59\n"
        "b/corner_x = 5\nb/corner_y = -3\nb/fs = +0.866025x +0.5y\nb/ss = +0.5x -0.866025y\n")
    path = render(tmp_path, "-geom", "two.geom")
    px = PX_MM / 1000
    want = [(np.array([-45 * px, 20 * px, 0.1]), unit([1, 0, 0]), unit([0, -1, 0])),
            (np.array([5 * px, -3 * px, 0.1]), unit([0.866025, 0.5, 0]),
             unit([0.5, -0.866025, 0]))]
    assert_modules(path, want)


def test_orientation_matrix_is_the_simulated_crystal(tmp_path):
    # a triclinic cell turned off the axes (DIALS frame, Å)
    turn = lambda v: rot_axis(rot_axis(v, [1, 0, 0], 23), [0, 1, 1], -41)
    real = np.array([turn(v) for v in ([41.0, 0, 0], [-6.0, 49.0, 0], [9.0, 7.0, 58.0])])
    (tmp_path / "x.expt").write_text(
        experiment_list([panel("a", (-2.0, 2.0, -100.0), (1, 0, 0), (0, -1, 0), (NPIX, NPIX))],
                        real_space=real))
    path = render(tmp_path, "-expt", "x.expt")
    with h5py.File(path, "r") as f:
        sample = f["/entry/sample"]
        ub = sample["ub_matrix"][0]
        u = sample["orientation_matrix"][0]
        cell = sample["unit_cell"][0]
    # UB's columns are a*, b*, c*: in DIALS's frame, the inverse of the rows a, b, c
    np.testing.assert_allclose(DIALS_TO_NEXUS @ ub, np.linalg.inv(real), atol=1e-12)
    np.testing.assert_allclose(u @ u.T, np.eye(3), atol=1e-12)
    lengths = np.linalg.norm(real, axis=1)
    angle = lambda p, q: np.degrees(np.arccos(np.dot(p, q) / np.linalg.norm(p) / np.linalg.norm(q)))
    np.testing.assert_allclose(cell, [*lengths, angle(real[1], real[2]), angle(real[0], real[2]),
                                      angle(real[0], real[1])], atol=1e-9)
    # Busing-Levy: B = U^-1 UB is upper triangular with a*, b* sin γ*, 1/c on its diagonal
    b = u.T @ ub
    assert abs(b[1, 0]) < 1e-12 and abs(b[2, 0]) < 1e-12 and abs(b[2, 1]) < 1e-12
    assert b[2, 2] == pytest.approx(1 / lengths[2], rel=1e-12)


def test_pixel_mask_covers_padding_roi_and_mask(tmp_path):
    panels = rotated_panels()
    (tmp_path / "p.expt").write_text(experiment_list(panels))
    # the written image stacks the panels along slow: 48 x (40 + 24)
    width, height = 48, 64
    mask = np.ones((height, width), np.uint16)
    mask[20, 10] = 0          # panel a (10, 20)
    mask[45, 3] = 0           # panel b (3, 5)
    header = (f"{{\nHEADER_BYTES=512;\nDIM=2;\nBYTE_ORDER=little_endian;\nTYPE=unsigned_short;\n"
              f"SIZE1={width};\nSIZE2={height};\n}}\n").encode().ljust(512, b" ")
    (tmp_path / "m.img").write_bytes(header + mask.astype("<u2").tobytes())
    path = render(tmp_path, "-mask", "m.img", "-expt", "p.expt", "-roi", "0", "47", "5", "60")
    with h5py.File(path, "r") as f:
        got = f["/entry/instrument/detector/pixel_mask"][()]
        data = f["/entry/data/data"][0]
    want = np.zeros((2, 40, 48), np.uint32)
    want[1, 24:, :] = 1       # padding of the shorter panel
    want[0, :5, :] = 256      # outside the ROI: stacked rows 0-4 and 61-63
    want[1, 21:24, :] = 256
    want[0, 20, 10] = 256
    want[1, 5, 3] = 256
    np.testing.assert_array_equal(got, want)
    assert np.all(data[want == 1] == 0)


def test_a_rotation_series_gives_each_frame_its_angles(tmp_path):
    scan = {"image_range": [1, 10],
            "properties": {"oscillation": [30 + 0.5 * k for k in range(10)],
                           "exposure_time": [0.2] * 10}}
    (tmp_path / "s.expt").write_text(experiment_list(
        [panel("a", (-2.0, 2.0, -100.0), (1, 0, 0), (0, -1, 0), (16, 16))], scan=scan))
    path = render(tmp_path, "-expt", "s.expt", name="s.nxs")
    starts = 30 + 0.5 * np.arange(10)
    with h5py.File(path, "r") as f:
        np.testing.assert_allclose(f["/entry/sample/transformations/phi"][()], starts)
        np.testing.assert_allclose(f["/entry/sample/transformations/phi_end"][()], starts + 0.5)
        assert f["/entry/data/data"].shape == (10, 16, 16)
        assert f["/entry/instrument/detector/frame_time"][()] == pytest.approx(0.2)
        sample = nxmx.NXmx(f).entries[0].samples[0]
        axis = sample.depends_on
        np.testing.assert_allclose(axis[()].to("deg").magnitude, starts)
        np.testing.assert_allclose(axis.end[()].to("deg").magnitude, starts + 0.5)
        np.testing.assert_allclose(axis.increment_set.to("deg").magnitude, [0.5] * 10)
        # the goniometer's axis (DIALS +x) in the NeXus frame
        np.testing.assert_allclose(axis.vector, [-1, 0, 0], atol=1e-12)
