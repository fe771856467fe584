//! What the crystallography image formats ([`crate::cbf`], and NXmx in
//! `nxmx` with the `hdf5` feature) are written from: int32 panels with their
//! geometry in nanoBragg's laboratory frame, and the experiment's values.
//!
//! The formats take plain data, so that a detector of several panels
//! (modules) needs nothing new here: [`MxImage::panels`] is a list.

/// One detector panel (module): its pixels and where they are.
///
/// Vectors are in nanoBragg's laboratory frame (metres, sample at the
/// origin). Pixel `(f, s)` covers the parallelogram from
/// `origin_m + f·pixel·fast + s·pixel·slow` one pixel along each axis: its
/// centre is at `origin_m + (f + ½)·pixel·fast + (s + ½)·pixel·slow`.
#[derive(Debug, Clone, Copy)]
pub struct Panel<'a> {
    /// Outer corner of the first pixel (nanoBragg's `pix0`), metres.
    pub origin_m: [f64; 3],
    /// Unit vector of increasing fast index.
    pub fast: [f64; 3],
    /// Unit vector of increasing slow index.
    pub slow: [f64; 3],
    /// Pixel size (square pixels), metres.
    pub pixel_size_m: f64,
    /// Pixels along the fast axis.
    pub fpixels: usize,
    /// Pixels along the slow axis.
    pub spixels: usize,
    /// `spixels` rows of `fpixels` counts, fast index fastest.
    pub pixels: &'a [i32],
}

/// One image of a (possibly multi-panel) detector and the experiment's values.
#[derive(Debug, Clone)]
pub struct MxImage<'a> {
    /// The panels; the CBF writer takes exactly one.
    pub panels: Vec<Panel<'a>>,
    /// Direction the X-rays travel (laboratory frame, unit).
    pub beam: [f64; 3],
    /// E-vector of the incident beam (laboratory frame, unit).
    pub polar: [f64; 3],
    /// Right-handed phi rotation axis (laboratory frame, unit).
    pub spindle: [f64; 3],
    /// The central wavelength, Å (CBF's `Wavelength`).
    pub wavelength_a: f64,
    /// The spectrum: (wavelength Å, relative weight), one entry per
    /// distinct wavelength (NXmx writes the weights when there are several).
    pub spectrum_a: Vec<(f64, f64)>,
    /// Fraction of linear polarization along `polar` (nanoBragg's Kahn
    /// factor); see [`McStas::stokes`].
    pub kahn_factor: f64,
    /// Incident photons per second.
    pub total_flux: f64,
    /// Sample to where the direct beam meets panel 0's plane, metres.
    pub distance_m: f64,
    /// Where the direct beam meets panel 0, in pixels from the outer corner
    /// of its first pixel: (fast, slow).
    pub beam_centre_px: [f64; 2],
    /// Exposure time, seconds.
    pub exposure_s: f64,
    /// Phi at the start of the exposure, degrees.
    pub phi_start_deg: f64,
    /// Phi rotation during the exposure, degrees.
    pub phi_range_deg: f64,
    /// Pixel value at and above which a pixel is saturated.
    pub saturation_value: i32,
    /// Pixel value at and below which a pixel is not to be trusted.
    pub underload_value: i32,
    /// Sensor material (chemical formula, e.g. `Si`).
    pub sensor_material: String,
    /// Sensor thickness, metres (0: a sensor of no thickness was simulated).
    pub sensor_thickness_m: f64,
    /// Start of the exposure, ISO 8601 in UTC (`2026-01-02T03:04:05Z`).
    pub start_time: String,
    /// End of the exposure, ISO 8601 in UTC.
    pub end_time: String,
    /// Per panel, whether each of its pixels (as `pixels`) is left out of
    /// the image (`-mask`, outside the `-roi`); an empty list: none is.
    pub masked: Vec<Vec<bool>>,
    /// The crystal's real-space a, b, c (Å, laboratory frame) at phi = 0,
    /// where the image has one crystal orientation.
    pub crystal_a: Option<[[f64; 3]; 3]>,
    /// The random stream the pixels' noise was drawn from and its version
    /// (`/entry/simulation/noise_rng`), where they hold noise.
    pub noise_rng: Option<&'static str>,
}

/// A crystal as NXsample holds it, in the NeXus frame at phi = 0 (Busing &
/// Levy's convention): the reciprocal-lattice vector of (h, k, l) is
/// `ub · (h, k, l)` (1/Å, no factor 2π), with `ub = u · b` and `b` the
/// upper-triangular matrix of the reciprocal cell.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Orientation {
    /// a, b, c (Å), α, β, γ (degrees).
    pub unit_cell: [f64; 6],
    /// The rotation U (row-major).
    pub u: [[f64; 3]; 3],
    /// UB (row-major, 1/Å).
    pub ub: [[f64; 3]; 3],
}

impl MxImage<'_> {
    /// The rotation of this image's laboratory frame to NeXus's.
    pub fn frame(&self) -> McStas {
        McStas::new(self.beam, LAB_UP)
    }

    /// The beam's Stokes vector in the NeXus frame.
    pub fn stokes(&self) -> [f64; 4] {
        self.frame().stokes(self.polar, self.kahn_factor)
    }

    /// The crystal's cell and orientation in the NeXus frame, where the
    /// image has one.
    pub fn orientation(&self) -> Option<Orientation> {
        self.crystal_a.map(|abc| self.frame().orientation(abc))
    }
}

/// The vertical of nanoBragg's laboratory frame: +y, whatever the
/// convention. It is the DIALS frame's (`-expt`, and `-geom`, placed in it)
/// and CrystFEL's vertical, and the up of the MOSFLM, DENZO and ADXV
/// conventions' images (their slow axis points along -y). XDS and
/// nanoBragg's DIALS convention name no vertical: +y is taken for them too.
pub const LAB_UP: [f64; 3] = [0.0, 1.0, 0.0];

/// The rotation from nanoBragg's laboratory frame to the NeXus (McStas)
/// frame: z along the beam, y the vertical ([`LAB_UP`]) made
/// perpendicular to the beam, x = y × z.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct McStas {
    /// The rows: the laboratory vectors that become x, y and z.
    rows: [[f64; 3]; 3],
}

impl McStas {
    /// The rotation of a beam along `beam` with `up` the vertical (neither
    /// need be unit; an `up` along the beam falls back to any axis across
    /// it).
    pub fn new(beam: [f64; 3], up: [f64; 3]) -> McStas {
        let z = unit(beam);
        let across = |v: [f64; 3]| {
            let d = dot(v, z);
            [v[0] - d * z[0], v[1] - d * z[1], v[2] - d * z[2]]
        };
        let mut y = across(up);
        if norm(y) < 1e-9 {
            // the least aligned lab axis gives a well-conditioned normal
            let i = (0..3).min_by(|&a, &b| z[a].abs().total_cmp(&z[b].abs())).unwrap_or(0);
            let mut e = [0.0; 3];
            e[i] = 1.0;
            y = across(e);
        }
        let y = unit(y);
        let x = cross(y, z);
        McStas { rows: [x, y, z] }
    }

    /// `v` (laboratory frame) in the NeXus frame.
    pub fn apply(&self, v: [f64; 3]) -> [f64; 3] {
        self.rows.map(|r| dot(r, v))
    }

    /// The crystal of real-space vectors `abc` (Å, laboratory frame) in
    /// this frame.
    pub fn orientation(&self, abc: [[f64; 3]; 3]) -> Orientation {
        let [a, b, c] = abc.map(|v| self.apply(v));
        let volume = dot(a, cross(b, c));
        let star = [cross(b, c), cross(c, a), cross(a, b)].map(|v| v.map(|x| x / volume));
        let angle = |u: [f64; 3], v: [f64; 3]| (dot(u, v) / (norm(u) * norm(v))).acos();
        let unit_cell = [
            norm(a),
            norm(b),
            norm(c),
            angle(b, c).to_degrees(),
            angle(a, c).to_degrees(),
            angle(a, b).to_degrees(),
        ];
        let ub: [[f64; 3]; 3] = std::array::from_fn(|i| std::array::from_fn(|j| star[j][i]));
        // B from the reciprocal cell; U = UB·B⁻¹ (B upper triangular)
        let [sa, sb, sc] = star.map(norm);
        let (alpha, beta_s, gamma_s) =
            (angle(b, c), angle(star[0], star[2]), angle(star[0], star[1]));
        let bm = [
            [sa, sb * gamma_s.cos(), sc * beta_s.cos()],
            [0.0, sb * gamma_s.sin(), -sc * beta_s.sin() * alpha.cos()],
            [0.0, 0.0, 1.0 / norm(c)],
        ];
        let inv = {
            let [[p, q, r], [_, s, t], [_, _, w]] = bm;
            [
                [1.0 / p, -q / (p * s), (q * t - r * s) / (p * s * w)],
                [0.0, 1.0 / s, -t / (s * w)],
                [0.0, 0.0, 1.0 / w],
            ]
        };
        let u = std::array::from_fn(|i| {
            std::array::from_fn(|j| (0..3).map(|k| ub[i][k] * inv[k][j]).sum())
        });
        Orientation { unit_cell, u, ub }
    }

    /// The Stokes vector (I, Q, U, V) in this frame of a beam linearly
    /// polarized to the fraction `kahn` along the E-vector `polar`
    /// (laboratory frame): Q = kahn·cos 2ψ, U = kahn·sin 2ψ, with ψ the
    /// E-vector's angle from x about z.
    pub fn stokes(&self, polar: [f64; 3], kahn: f64) -> [f64; 4] {
        let [x, y, _] = self.apply(polar);
        // cos 2ψ and sin 2ψ from the components (exact zeros along x or y);
        // an E-vector along the beam counts as along x
        let r2 = x * x + y * y;
        let (c, s) = if r2 > 0.0 { ((x * x - y * y) / r2, 2.0 * x * y / r2) } else { (1.0, 0.0) };
        [1.0, kahn * c, kahn * s, 0.0]
    }
}

/// The current time as ISO 8601 in UTC, to the second (`…Z`).
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    utc_iso8601(secs)
}

/// `secs` since 1970-01-01T00:00:00Z as ISO 8601 in UTC.
pub fn utc_iso8601(secs: u64) -> String {
    let (days, rem) = ((secs / 86400) as i64, secs % 86400);
    // days to a civil date in the proleptic Gregorian calendar (eras of 400 years)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

pub(crate) fn dot(a: [f64; 3], b: [f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

pub(crate) fn cross(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]
}

fn norm(a: [f64; 3]) -> f64 {
    dot(a, a).sqrt()
}

fn unit(a: [f64; 3]) -> [f64; 3] {
    let n = norm(a);
    a.map(|c| c / n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: [f64; 3], b: [f64; 3]) -> bool {
        (0..3).all(|i| (a[i] - b[i]).abs() < 1e-15)
    }

    #[test]
    fn laboratory_axes_to_mcstas() {
        // MOSFLM: beam +x, up +y: x = y × z is -z of the laboratory
        let r = McStas::new([1.0, 0.0, 0.0], LAB_UP);
        assert!(close(r.apply([1.0, 0.0, 0.0]), [0.0, 0.0, 1.0]));
        assert!(close(r.apply([0.0, 0.0, 1.0]), [-1.0, 0.0, 0.0]));
        assert!(close(r.apply([0.0, 1.0, 0.0]), [0.0, 1.0, 0.0]));
        // XDS/ADXV (beam +z, up +y) are already in the NeXus frame
        let r = McStas::new([0.0, 0.0, 1.0], LAB_UP);
        for e in [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]] {
            assert!(close(r.apply(e), e));
        }
        // the DIALS frame (beam -z): CrystFEL's (x, y, z) is DIALS's (-x, y, -z)
        let r = McStas::new([0.0, 0.0, -1.0], LAB_UP);
        assert!(close(r.apply([-7.0, 4.0, -100.0]), [7.0, 4.0, 100.0]));
    }

    #[test]
    fn stokes_of_the_e_vector_in_the_frame() {
        // MOSFLM's E-vector (+z) is horizontal: along -x, Q = +K
        let r = McStas::new([1.0, 0.0, 0.0], LAB_UP);
        assert_eq!(r.stokes([0.0, 0.0, 1.0], 0.9), [1.0, 0.9, 0.0, 0.0]);
        // nanoBragg's DIALS convention (E along y): vertical, Q = -K
        let r = McStas::new([0.0, 0.0, 1.0], LAB_UP);
        assert_eq!(r.stokes([0.0, 1.0, 0.0], 0.9), [1.0, -0.9, 0.0, 0.0]);
        // at 45°: U
        let s = r.stokes([1.0, 1.0, 0.0], 0.5);
        assert!((s[1]).abs() < 1e-15 && (s[2] - 0.5).abs() < 1e-15, "{s:?}");
    }

    #[test]
    fn rotation_is_proper_and_keeps_lengths() {
        let r = McStas::new([0.3, -0.2, 0.9], [1.0, 2.0, 0.1]);
        let v = [0.11, -0.7, 2.5];
        assert!((norm(r.apply(v)) - norm(v)).abs() < 1e-14);
        let [x, y, z] = r.rows;
        assert!((dot(cross(x, y), z) - 1.0).abs() < 1e-14);
        // up along the beam: still a rotation
        let r = McStas::new([0.0, 1.0, 0.0], [0.0, 2.0, 0.0]);
        assert!(close(r.apply([0.0, 1.0, 0.0]), [0.0, 0.0, 1.0]));
        assert!((norm(r.apply([1.0, 0.0, 0.0])) - 1.0).abs() < 1e-15);
    }

    #[test]
    fn orientation_is_busing_levy() {
        // a triclinic cell 70, 80, 90 Å, 75°, 85°, 95°, turned off the axes
        let (al, be, ga) = (75f64.to_radians(), 85f64.to_radians(), 95f64.to_radians());
        let cz = (al.cos() - be.cos() * ga.cos()) / ga.sin();
        let cell = [
            [70.0, 0.0, 0.0],
            [80.0 * ga.cos(), 80.0 * ga.sin(), 0.0],
            [90.0 * be.cos(), 90.0 * cz, 90.0 * (1.0 - be.cos().powi(2) - cz * cz).sqrt()],
        ];
        let r = McStas::new([0.3, -0.2, 0.9], [1.0, 2.0, 0.1]);
        let o = r.orientation(cell);
        for (got, want) in o.unit_cell.iter().zip([70.0, 80.0, 90.0, 75.0, 85.0, 95.0]) {
            assert!((got - want).abs() < 1e-9, "{:?}", o.unit_cell);
        }
        // U is a rotation
        for i in 0..3 {
            for j in 0..3 {
                let uut: f64 = (0..3).map(|k| o.u[i][k] * o.u[j][k]).sum();
                assert!((uut - f64::from(u8::from(i == j))).abs() < 1e-12, "U·Uᵀ {i}{j}: {uut}");
            }
        }
        let det = dot(o.u[0], cross(o.u[1], o.u[2]));
        assert!((det - 1.0).abs() < 1e-12, "{det}");
        // UB·h is h's reciprocal-lattice vector: h·(UB·h') reads off a·b* = 0 etc.
        let [a, b, c] = cell.map(|v| r.apply(v));
        for (h, axis) in [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]].iter().zip(0..3) {
            let g: [f64; 3] = std::array::from_fn(|i| (0..3).map(|k| o.ub[i][k] * h[k]).sum());
            let reads = [dot(a, g), dot(b, g), dot(c, g)];
            for (k, x) in reads.iter().enumerate() {
                let want = f64::from(u8::from(k == axis));
                assert!((x - want).abs() < 1e-12, "a_{k}·UB·e_{axis} = {x}");
            }
        }
        // B is upper triangular: U's first column is a* along
        let a_star = [o.ub[0][0], o.ub[1][0], o.ub[2][0]];
        let u0 = [o.u[0][0], o.u[1][0], o.u[2][0]];
        let along = unit(a_star);
        assert!((0..3).all(|i| (along[i] - u0[i]).abs() < 1e-12), "{a_star:?} {u0:?}");
    }

    #[test]
    fn iso_dates() {
        assert_eq!(utc_iso8601(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_iso8601(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_iso8601(1_764_072_245), "2025-11-25T12:04:05Z");
        assert_eq!(utc_iso8601(4_107_542_399), "2100-02-28T23:59:59Z");
    }
}
