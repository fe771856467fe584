//! Diffuse scattering of an amorphous sample (water, air, ice, oil): the
//! physics of nonBragg.c.
//!
//! A thin sample of `n` molecules, each scattering with the structure factor
//! F(sin θ/λ) of a [`StolTable`], puts `r_e² · F² · P · Ω · fluence · n`
//! photons into a pixel of solid angle Ω with polarization factor P (F here
//! is the amplitude relative to one electron, so F² times the Thomson cross
//! section r_e² is the cross section per molecule per steradian). The detector
//! is sampled on a sub-pixel grid for every source; the result is the mean over
//! sub-pixels and sources. The sample is thin compared with the detector
//! distance (far field), so every molecule sees the same pixel direction.

pub mod fast;

use crate::physics::polarization::polarization_factor;
use crate::vec3::{cross, dot, rotate, rotate_axis, unitize, V3};

/// r_e², the Thomson cross section per steradian of one electron (m²).
pub const R_E_SQR: f64 = 7.94079248018965e-30;
/// Avogadro's number as nonBragg.c has it (1/mol).
pub const AVOGADRO: f64 = 6.02214179e23;

/// A `.stol` table prepared for interpolation: x converted to sin θ/λ in
/// m⁻¹ and two guard rows added at each end, plus the search position that
/// carries over from one lookup to the next (the reference's `nearest`).
#[derive(Debug, Clone)]
pub struct StolTable {
    x: Vec<f64>,
    f: Vec<f64>,
    nearest: usize,
    guide: Guide,
}

/// A search guide for [`StolTable::lookup_at`] over the table's own rows (the
/// guard rows left out): the rows at or below each of `starts.len()` equal
/// steps of sin θ/λ from `lo`, so that a lookup starts a row or two from
/// its answer instead of searching the whole table (a binary search of a
/// 10,000-row table was most of a background pixel's time).
#[derive(Debug, Clone, Default)]
struct Guide {
    lo: f64,
    hi: f64,
    per_step: f64,
    starts: Vec<u32>,
}

impl Guide {
    /// The guide of increasing `x` (empty otherwise, or with fewer than two
    /// distinct rows to span).
    fn new(x: &[f64]) -> Guide {
        let rows = &x[2.min(x.len())..x.len().saturating_sub(2)];
        let (Some(&lo), Some(&hi)) = (rows.first(), rows.last()) else {
            return Guide::default();
        };
        let increasing = x.windows(2).all(|w| w[0] < w[1]);
        if !increasing || rows.len() < 2 || x.len() > u32::MAX as usize {
            return Guide::default();
        }
        let steps = rows.len();
        let per_step = steps as f64 / (hi - lo);
        let starts = (0..steps)
            .map(|b| x.partition_point(|&v| v <= lo + b as f64 / per_step) as u32)
            .collect();
        Guide { lo, hi, per_step, starts }
    }

    /// The number of rows of `x` at or below `stol` (`x.partition_point`),
    /// where the guide covers `stol`.
    #[inline]
    fn rows_at_or_below(&self, x: &[f64], stol: f64) -> Option<usize> {
        if self.starts.is_empty() || !(stol >= self.lo && stol <= self.hi) {
            return None;
        }
        let b = (((stol - self.lo) * self.per_step) as usize).min(self.starts.len() - 1);
        // the guide's step edges are rounded: walk to the exact boundary
        let mut i = self.starts[b] as usize;
        while i > 0 && x[i - 1] > stol {
            i -= 1;
        }
        while i < x.len() && x[i] <= stol {
            i += 1;
        }
        Some(i)
    }
}

impl StolTable {
    /// Builds the table from file rows `[x, F]` (F NaN where missing),
    /// `to_stol` converting x to sin θ/λ in m⁻¹ (1e10 for Å⁻¹).
    ///
    /// Missing F values become 0 but are not used for the guard rows, which
    /// repeat the first and last present F at ±1e98 and ±1e99. Returns `None`
    /// when no row has an F.
    pub fn new(rows: &[[f64; 2]], to_stol: f64) -> Option<Self> {
        let first = rows.iter().map(|r| r[1]).find(|f| !f.is_nan())?;
        let last = rows.iter().rev().map(|r| r[1]).find(|f| !f.is_nan())?;
        let mut x = vec![-1e99, -1e98];
        let mut f = vec![first, first];
        for r in rows {
            x.push(r[0] * to_stol);
            f.push(if r[1].is_nan() { 0.0 } else { r[1] });
        }
        x.extend([1e98, 1e99]);
        f.extend([last, last]);
        let guide = Guide::new(&x);
        Some(StolTable { x, f, nearest: 0, guide })
    }

    /// Number of rows including the four guard rows (the count nonBragg
    /// prints as "initialized F points").
    pub fn len(&self) -> usize {
        self.x.len()
    }

    /// Whether the table has no rows (never: there are always guard rows).
    pub fn is_empty(&self) -> bool {
        self.x.is_empty()
    }

    /// sin θ/λ (m⁻¹) of every row, guard rows included.
    pub fn stols(&self) -> &[f64] {
        &self.x
    }

    /// The row the last lookup settled on.
    pub fn nearest(&self) -> usize {
        self.nearest
    }

    /// Whether sin θ/λ increases strictly from row to row (guard rows
    /// included): then [`Self::lookup_at`] gives what [`Self::lookup`]
    /// gives, whatever lookups came before.
    pub fn is_increasing(&self) -> bool {
        self.x.windows(2).all(|w| w[0] < w[1])
    }

    /// F at `stol` (m⁻¹) without a search position: the row [`Self::lookup`]
    /// settles on in an increasing table is the last one at or below `stol`.
    pub fn lookup_at(&self, stol: f64) -> f64 {
        let top = self.x.len() - 1;
        let below = (self.guide.rows_at_or_below(&self.x, stol))
            .unwrap_or_else(|| self.x.partition_point(|&x| x <= stol));
        let nearest = below.saturating_sub(1).clamp(1, top);
        let i = nearest.clamp(1, self.x.len() - 3) - 1;
        lagrange4(&self.x[i..i + 4], &self.f[i..i + 4], stol)
    }

    /// F at `stol` (m⁻¹): the cubic through rows `nearest-1 ..= nearest+2`.
    ///
    /// The search starts where the previous lookup ended (moving up while
    /// `stol` lies above the current row, then down while it lies below), as
    /// the reference's does; for a table whose x is not increasing the answer
    /// therefore depends on the lookups before. The index stays where four
    /// rows exist around it (the reference reads outside its table for a NaN
    /// or astronomically large `stol`).
    pub fn lookup(&mut self, stol: f64) -> f64 {
        let top = self.x.len() - 1;
        while self.nearest < top && stol > self.x[self.nearest] {
            self.nearest += 1;
        }
        while self.nearest >= 2 && stol < self.x[self.nearest] {
            self.nearest -= 1;
        }
        let i = self.nearest.clamp(1, self.x.len() - 3) - 1;
        lagrange4(&self.x[i..i + 4], &self.f[i..i + 4], stol)
    }
}

/// The Lagrange polynomial through four points evaluated at `x`, each term
/// formed as numerator product times y over denominator product (this
/// order gives the reference's rounding).
fn lagrange4(xa: &[f64], ya: &[f64], x: f64) -> f64 {
    let term = |k: usize, [a, b, c]: [usize; 3]| {
        (x - xa[a]) * (x - xa[b]) * (x - xa[c]) * ya[k]
            / ((xa[k] - xa[a]) * (xa[k] - xa[b]) * (xa[k] - xa[c]))
    };
    term(0, [1, 2, 3]) + term(1, [0, 2, 3]) + term(2, [0, 1, 3]) + term(3, [0, 1, 2])
}

/// The reference's choice of a sampling grid (divergence, dispersion) from
/// a range, a step and a count, each negative when not given: returns
/// `(range, step, count)`, with "one step, no range" whenever one of them
/// ends up not positive.
pub fn step_grid(mut range: f64, mut step: f64, mut steps: i32) -> (f64, f64, i32) {
    if steps <= 0 {
        if range < 0.0 {
            if step <= 0.0 {
                (steps, range, step) = (1, 0.0, 0.0);
            } else {
                (range, steps) = (step, 2);
            }
        } else if step <= 0.0 {
            (step, steps) = (range, 2);
        } else {
            steps = (range / step).ceil() as i32;
        }
    } else if range < 0.0 {
        if step <= 0.0 {
            range = 1.0;
            step = range / steps as f64;
        } else {
            (range, steps) = (step, 2);
        }
    } else if step <= 0.0 {
        if steps <= 1 {
            steps = 2;
        }
        step = range / (steps - 1) as f64;
    }
    if range <= 0.0 || step <= 0.0 || steps <= 0 {
        (range, step, steps) = (0.0, 0.0, 1);
    }
    (range, step, steps)
}

/// Where the detector goes, as the command line gives it (m, radians;
/// direction vectors unit length).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DetectorPlacement {
    /// Beam direction.
    pub beam: V3<f64>,
    /// Fast axis before rotation.
    pub fdet: V3<f64>,
    /// Slow axis before rotation.
    pub sdet: V3<f64>,
    /// Rotations about the lab x, y, z axes, applied in that order.
    pub rot: V3<f64>,
    /// Axis of the two-theta swing.
    pub twotheta_axis: V3<f64>,
    /// Two-theta angle.
    pub twotheta: f64,
    /// Rotate about the sample (keeping `xclose`, `yclose`) rather than
    /// about the direct-beam spot (keeping `xbeam`, `ybeam`).
    pub pivot_sample: bool,
    /// Distance along the beam; used when `close_distance` is NaN.
    pub distance: f64,
    /// Distance of the detector plane from the sample, or NaN.
    pub close_distance: f64,
    /// Point of closest approach on the detector, fast coordinate.
    pub xclose: f64,
    /// Point of closest approach on the detector, slow coordinate.
    pub yclose: f64,
    /// Direct-beam spot on the detector, fast coordinate.
    pub xbeam: f64,
    /// Direct-beam spot on the detector, slow coordinate.
    pub ybeam: f64,
}

/// The detector after [`place_detector`], with the beam centre, closest
/// point and distances recomputed from the final vectors.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlacedDetector {
    /// Corner of pixel (0, 0).
    pub pix0: V3<f64>,
    /// Fast axis.
    pub fdet: V3<f64>,
    /// Slow axis.
    pub sdet: V3<f64>,
    /// Distance along the beam to the detector plane.
    pub distance: f64,
    /// Distance of the detector plane from the sample.
    pub close_distance: f64,
    /// Direct-beam spot, fast coordinate.
    pub xbeam: f64,
    /// Direct-beam spot, slow coordinate.
    pub ybeam: f64,
    /// Point of closest approach, fast coordinate.
    pub xclose: f64,
    /// Point of closest approach, slow coordinate.
    pub yclose: f64,
}

/// Places the detector as nonBragg.c does: the normal is f × s; the sample
/// pivot puts the closest point at (`xclose`, `yclose`) before rotating the
/// whole detector, the beam pivot puts the direct-beam spot at (`xbeam`,
/// `ybeam`) after rotating the axes.
pub fn place_detector(p: &DetectorPlacement) -> PlacedDetector {
    let [rx, ry, rz] = p.rot;
    let turn = |v: V3<f64>| rotate_axis(rotate(v, rx, ry, rz), p.twotheta_axis, p.twotheta);
    let normal = unitize(cross(p.fdet, p.sdet)).0;
    let ratio = dot(p.beam, rotate(normal, rx, ry, rz));
    // a detector parallel to the beam: the reference's smallest double
    let ratio = if ratio == 0.0 { f64::MIN_POSITIVE } else { ratio };
    let close = if p.close_distance.is_nan() { ratio * p.distance } else { p.close_distance };
    let distance = close / ratio;
    let (fdet, sdet, odet) = (turn(p.fdet), turn(p.sdet), turn(normal));
    let pix0: V3<f64> = if p.pivot_sample {
        turn(std::array::from_fn(|k| {
            -p.xclose * p.fdet[k] - p.yclose * p.sdet[k] + close * normal[k]
        }))
    } else {
        std::array::from_fn(|k| -p.xbeam * fdet[k] - p.ybeam * sdet[k] + distance * p.beam[k])
    };
    let close_distance = dot(pix0, odet);
    let to_beam: V3<f64> = std::array::from_fn(|k| close_distance / ratio * p.beam[k] - pix0[k]);
    PlacedDetector {
        pix0,
        fdet,
        sdet,
        distance: close_distance / ratio,
        close_distance,
        xbeam: dot(fdet, to_beam),
        ybeam: dot(sdet, to_beam),
        xclose: -dot(pix0, fdet),
        yclose: -dot(pix0, sdet),
    }
}

/// One source: a point whose direction from the sample gives the incident
/// beam, with a weight and a wavelength.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AmorphousSource {
    /// Position (m); only its direction is used.
    pub position: V3<f64>,
    /// Weight multiplying this source's contribution.
    pub weight: f64,
    /// Wavelength (m).
    pub lambda: f64,
}

/// The detector as the render needs it, after the geometry setup.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AmorphousDetector {
    /// Pixels along the fast axis.
    pub fpixels: usize,
    /// Pixels along the slow axis.
    pub spixels: usize,
    /// Pixel size (m).
    pub pixel_size: f64,
    /// Sub-pixels per pixel along each axis (at least 1).
    pub oversample: usize,
    /// Position of the corner of pixel (0, 0) (m).
    pub pix0: V3<f64>,
    /// Fast axis (unit).
    pub fdet: V3<f64>,
    /// Slow axis (unit).
    pub sdet: V3<f64>,
    /// Beam direction (unit); used by the curved detector.
    pub beam: V3<f64>,
    /// Sample-to-detector distance along the beam (m); the curved
    /// detector's radius.
    pub distance: f64,
    /// Distance of the detector plane from the sample (m), for the
    /// obliquity of the pixel.
    pub close_distance: f64,
    /// Every pixel at `distance` from the sample, its coordinates used as angles.
    pub curved: bool,
    /// Inverse-square law only (no obliquity, no pixel area).
    pub point_pixel: bool,
    /// Rendered pixels: fast min, fast max, slow min, slow max, inclusive.
    pub roi: [i64; 4],
    /// The sensor's absorption (`None`: every photon counts, as in
    /// nonBragg.c).
    pub sensor: Option<AmorphousSensor>,
}

/// The sample and the beam's polarization.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AmorphousSample {
    /// Kahn polarization factor (0: unpolarized).
    pub kahn: f64,
    /// Polarization factor 1 everywhere.
    pub nopolar: bool,
    /// E-vector direction of the beam (unit).
    pub polar_vector: V3<f64>,
    /// Integrated incident photons per m².
    pub fluence: f64,
    /// Molecules in the beam.
    pub molecules: f64,
    /// Store the interpolated F of the last sample instead of photons.
    pub fmap: bool,
}

/// What the last sample of a rendered pixel saw (for `-printout` and for
/// turning a measured pixel back into F).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PixelTrace {
    /// Fast pixel index.
    pub fpixel: usize,
    /// Slow pixel index.
    pub spixel: usize,
    /// sin θ/λ (m⁻¹).
    pub stol: f64,
    /// Interpolated F.
    pub f: f64,
    /// Polarization factor.
    pub polar: f64,
    /// Solid angle (sr) as the render uses it.
    pub omega: f64,
    /// Sample position on the detector (m).
    pub position: V3<f64>,
    /// The table row the lookup settled on.
    pub nearest: usize,
    /// The pixel's value as stored.
    pub value: f32,
}

/// A rendered image and the solid angle it sampled.
#[derive(Debug, Clone, PartialEq)]
pub struct AmorphousImage {
    /// Photons per pixel (or F with `fmap`), raster order, 0 outside the ROI.
    pub pixels: Vec<f32>,
    /// Sum of the solid angles of all samples (sr).
    pub omega_sum: f64,
}

/// Renders the amorphous background: for every pixel in the ROI (slow
/// outer, fast inner), every sub-pixel and every source, sums
/// `sign(F) F² P Ω w` and scales the sum by `r_e² · fluence · molecules /
/// (sources · oversample²)`. A negative F (extrapolated or tabulated) gives
/// negative intensity. `visit` sees each rendered pixel after it is stored.
///
/// One pixel after the other, the table's search position carrying over as
/// in the reference; [`Background`] renders rows independently (same values
/// for a table whose sin θ/λ increases).
pub fn render_amorphous(
    det: &AmorphousDetector,
    sources: &[AmorphousSource],
    sample: &AmorphousSample,
    table: &mut StolTable,
    mut visit: impl FnMut(&PixelTrace),
) -> AmorphousImage {
    let (nf, ns) = (det.fpixels, det.spixels);
    let scale = pixel_scale(det, sources, sample);
    let incident = incident_directions(sources);
    let [xmin, xmax, ymin, ymax] = det.roi;
    let mut pixels = vec![0.0f32; nf * ns];
    let mut omega_sum = 0.0;
    let mut trace = PixelTrace {
        fpixel: 0,
        spixel: 0,
        stol: 0.0,
        f: 0.0,
        polar: 1.0,
        omega: 0.0,
        position: [0.0; 3],
        nearest: 0,
        value: 0.0,
    };
    for spixel in 0..ns {
        for fpixel in 0..nf {
            let (fi, si) = (fpixel as i64, spixel as i64);
            if fi < xmin || fi > xmax || si < ymin || si > ymax {
                continue;
            }
            let sum = pixel_sum(
                det,
                sources,
                &incident,
                sample,
                |stol| table.lookup(stol),
                [fpixel, spixel],
                &mut omega_sum,
                Some(&mut trace),
            );
            let j = spixel * nf + fpixel;
            pixels[j] = if sample.fmap { trace.f as f32 } else { (sum * scale) as f32 };
            trace.fpixel = fpixel;
            trace.spixel = spixel;
            trace.nearest = table.nearest();
            trace.value = pixels[j];
            visit(&trace);
        }
    }
    AmorphousImage { pixels, omega_sum }
}

/// `r_e² · fluence · molecules / (sources · oversample²)`: what turns a
/// pixel's sum into photons.
fn pixel_scale(det: &AmorphousDetector, sources: &[AmorphousSource], s: &AmorphousSample) -> f64 {
    let os = det.oversample.max(1);
    let steps = (sources.len() * os * os) as f64;
    R_E_SQR * s.fluence * s.molecules / steps
}

/// The unit vector along each source's beam (from the source towards the
/// sample).
fn incident_directions(sources: &[AmorphousSource]) -> Vec<V3<f64>> {
    sources.iter().map(|s| unitize(s.position.map(|c| -c)).0).collect()
}

/// The sum `Σ sign(F) F² P Ω w` over the sub-pixels and sources of pixel
/// `[fpixel, spixel]`, its sub-pixels' solid angles added to `omega_sum`
/// one by one. `lookup` gives F at sin θ/λ; `trace`, when given, is left
/// with the last sample.
#[inline]
#[allow(clippy::too_many_arguments)]
fn pixel_sum(
    det: &AmorphousDetector,
    sources: &[AmorphousSource],
    incident: &[V3<f64>],
    sample: &AmorphousSample,
    mut lookup: impl FnMut(f64) -> f64,
    [fpixel, spixel]: [usize; 2],
    omega_sum: &mut f64,
    mut trace: Option<&mut PixelTrace>,
) -> f64 {
    let os = det.oversample.max(1);
    let sub = det.pixel_size / os as f64;
    let mut sum = 0.0f64;
    for sub_s in 0..os {
        for sub_f in 0..os {
            let fdet = sub * (fpixel * os + sub_f) as f64 + sub / 2.0;
            let sdet = sub * (spixel * os + sub_s) as f64 + sub / 2.0;
            let mut pos: V3<f64> =
                std::array::from_fn(|k| fdet * det.fdet[k] + sdet * det.sdet[k] + det.pix0[k]);
            if det.curved {
                let radial = det.beam.map(|b| det.distance * b);
                let turned = rotate_axis(radial, det.sdet, pos[1] / det.distance);
                pos = rotate_axis(turned, det.fdet, pos[2] / det.distance);
            }
            let (mut diffracted, airpath) = unitize(pos);
            let mut omega =
                det.pixel_size * det.pixel_size / airpath / airpath * det.close_distance / airpath;
            if det.point_pixel {
                omega = 1.0 / airpath / airpath;
            }
            if let Some(sensor) = &det.sensor {
                // every layer together: what the whole thickness absorbs
                let parallax = dot(diffracted, sensor.odet);
                omega *= 1.0 - (-sensor.thickness_m * sensor.mu_per_m / parallax).exp();
            }
            *omega_sum += omega;
            for (src, &incident) in sources.iter().zip(incident) {
                let q: V3<f64> =
                    std::array::from_fn(|k| (diffracted[k] - incident[k]) / src.lambda);
                let stol = 0.5 * (q[0] * q[0] + q[1] * q[1] + q[2] * q[2]).sqrt();
                let f = lookup(stol);
                let sign = if f < 0.0 { -1.0 } else { 1.0 };
                let polar = if sample.nopolar {
                    1.0
                } else {
                    let p =
                        polarization_factor(sample.kahn, incident, diffracted, sample.polar_vector);
                    // the reference normalises the diffracted direction
                    // in place here, and the next source sees that copy
                    diffracted = unitize(diffracted).0;
                    p
                };
                sum += sign * f * f * polar * omega * src.weight * 1.0;
                if let Some(t) = trace.as_deref_mut() {
                    t.stol = stol;
                    t.f = f;
                    t.polar = polar;
                }
            }
            if let Some(t) = trace.as_deref_mut() {
                t.omega = omega;
                t.position = pos;
            }
        }
    }
    sum
}

/// The sensor's absorption applied to the background: the fraction of the
/// scattered photons that a sensor of this thickness stops, per sub-pixel.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AmorphousSensor {
    /// Sensor thickness (m).
    pub thickness_m: f64,
    /// Attenuation coefficient (1/m).
    pub mu_per_m: f64,
    /// Sensor normal (unit), pointing away from the sample.
    pub odet: V3<f64>,
}

/// An amorphous background ready to render row by row, in any order and on
/// any thread: the table's lookup is stateless, which needs its sin θ/λ
/// to increase from row to row (then the values are those of
/// [`render_amorphous`]).
#[derive(Debug, Clone)]
pub struct Background {
    det: AmorphousDetector,
    sources: Vec<AmorphousSource>,
    incident: Vec<V3<f64>>,
    sample: AmorphousSample,
    table: StolTable,
    scale: f64,
    /// The fast form, made on first use.
    fast: std::sync::OnceLock<Option<fast::FastBackground>>,
}

impl Background {
    /// The background of `sample` seen by `det` under `sources`; `None`
    /// when the table's sin θ/λ does not increase from row to row (or
    /// there are no sources).
    pub fn new(
        det: AmorphousDetector,
        sources: Vec<AmorphousSource>,
        sample: AmorphousSample,
        table: StolTable,
    ) -> Option<Background> {
        if !table.is_increasing() || sources.is_empty() {
            return None;
        }
        let scale = pixel_scale(&det, &sources, &sample);
        let incident = incident_directions(&sources);
        let fast = std::sync::OnceLock::new();
        Some(Background { det, sources, incident, sample, table, scale, fast })
    }

    /// The form of this background that runs one pixel per SIMD lane, within
    /// 1e-7 relative of [`Self::pixel`] (see [`fast`]), made on the first
    /// call; `None` where there is none.
    pub fn fast(&self) -> Option<&fast::FastBackground> {
        // not `get_or_init`: the tables are built on rayon's pool, whose
        // waiting thread may run another task that asks for them (a
        // re-entrant initialisation); two builds make the same tables
        if self.fast.get().is_none() {
            let _ = self.fast.set(fast::FastBackground::new(self));
        }
        self.fast.get().and_then(Option::as_ref)
    }

    /// The detector it is rendered on.
    pub fn detector(&self) -> &AmorphousDetector {
        &self.det
    }

    /// The sample.
    pub fn sample(&self) -> &AmorphousSample {
        &self.sample
    }

    /// The table.
    pub fn table(&self) -> &StolTable {
        &self.table
    }

    /// Photons in pixel `[fpixel, spixel]` (F with `fmap`), its
    /// sub-pixels' solid angles added to `omega_sum`. Pixels outside the
    /// ROI are not special here: the caller skips them.
    #[inline]
    pub fn pixel(&self, fpixel: usize, spixel: usize, omega_sum: &mut f64) -> f64 {
        let mut last_f = 0.0;
        let sum = pixel_sum(
            &self.det,
            &self.sources,
            &self.incident,
            &self.sample,
            |stol| {
                last_f = self.table.lookup_at(stol);
                last_f
            },
            [fpixel, spixel],
            omega_sum,
            None,
        );
        if self.sample.fmap {
            last_f
        } else {
            sum * self.scale
        }
    }

    /// Whether pixel `[fpixel, spixel]` lies in the ROI.
    #[inline]
    pub fn in_roi(&self, fpixel: usize, spixel: usize) -> bool {
        let [xmin, xmax, ymin, ymax] = self.det.roi;
        let (f, s) = (fpixel as i64, spixel as i64);
        f >= xmin && f <= xmax && s >= ymin && s <= ymax
    }

    /// The whole image as [`render_amorphous`] gives it, rows in parallel
    /// (rayon's current pool).
    pub fn render(&self) -> AmorphousImage {
        use rayon::prelude::*;
        let nf = self.det.fpixels;
        let mut pixels = vec![0.0f32; nf * self.det.spixels];
        if nf == 0 {
            return AmorphousImage { pixels, omega_sum: 0.0 };
        }
        let omega: Vec<f64> = pixels
            .par_chunks_mut(nf)
            .enumerate()
            .map(|(s, row)| {
                let mut omega_sum = 0.0;
                for (f, v) in row.iter_mut().enumerate() {
                    if self.in_roi(f, s) {
                        *v = self.pixel(f, s, &mut omega_sum) as f32;
                    }
                }
                omega_sum
            })
            .collect();
        // the serial render's order of additions
        let omega_sum = omega.iter().fold(0.0, |a, b| a + b);
        AmorphousImage { pixels, omega_sum }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flat_table(f: f64) -> StolTable {
        StolTable::new(&[[0.0, f], [0.5, f], [1.0, f], [2.0, f]], 1e10).unwrap()
    }

    #[test]
    fn interpolation_reproduces_cubics_and_extrapolates_linearly() {
        // a cubic through the table is reproduced wherever two real rows lie
        // on either side (nearer the ends the guard rows take part)
        let cubic = |x: f64| 1.0 + 2.0 * x - 3.0 * x * x + 0.5 * x * x * x;
        let rows: Vec<[f64; 2]> = (0..8).map(|i| i as f64 * 0.1).map(|x| [x, cubic(x)]).collect();
        let mut t = StolTable::new(&rows, 1.0).unwrap();
        for x in [0.15, 0.33, 0.47, 0.55] {
            assert!((t.lookup(x) - cubic(x)).abs() < 1e-12, "{x}");
        }
        // beyond the last row: the straight line through the last two rows
        // (the guard rows at 1e98 have negligible weight)
        let lin = StolTable::new(&[[0.0, 5.0], [1.0, 4.0], [2.0, 2.0]], 1.0).unwrap().lookup(3.0);
        assert!((lin - 0.0).abs() < 1e-9, "{lin}");
        assert_eq!(t.len(), 12);
    }

    /// The guided search finds the row a whole-table search finds, on an
    /// unevenly spaced table, at its rows, between them and beyond its ends.
    #[test]
    fn guided_lookup_is_the_whole_table_search() {
        let rows: Vec<[f64; 2]> = (0..500)
            .map(|i| i as f64)
            .map(|i| [0.01 * i + 1e-4 * (i * 0.7).sin().powi(2) + 1e-6 * i * i, (i * 0.3).cos()])
            .collect();
        let t = StolTable::new(&rows, 1e10).unwrap();
        assert!(!t.guide.starts.is_empty());
        let searched = |stol: f64| {
            let nearest = t.x.partition_point(|&x| x <= stol).saturating_sub(1);
            let i = nearest.clamp(1, t.len() - 1).clamp(1, t.len() - 3) - 1;
            lagrange4(&t.x[i..i + 4], &t.f[i..i + 4], stol)
        };
        let mut probes: Vec<f64> = t.x.clone();
        probes.extend(t.x.windows(2).map(|w| 0.5 * (w[0] + w[1])));
        probes.extend(t.x.iter().map(|x| x * (1.0 + 1e-16)));
        probes.extend((0..20_000).map(|k| (k as f64 * 3.7e-4 - 0.5) * 1e10));
        probes.extend([f64::INFINITY, f64::NEG_INFINITY, -1e300, 1e300]);
        for stol in probes {
            assert_eq!(t.lookup_at(stol).to_bits(), searched(stol).to_bits(), "{stol}");
        }
        assert!(t.lookup_at(f64::NAN).to_bits() == searched(f64::NAN).to_bits());
    }

    #[test]
    fn step_grid_choices() {
        assert_eq!(step_grid(-1.0, -1.0, -1), (0.0, 0.0, 1));
        assert_eq!(step_grid(0.03, 0.01, -1).2, 3);
        assert_eq!(step_grid(-1.0, -1.0, 4), (1.0, 0.25, 4));
        assert_eq!(step_grid(0.02, -1.0, 3), (0.02, 0.01, 3));
        assert_eq!(step_grid(0.0, -1.0, -1), (0.0, 0.0, 1));
    }

    /// Both pivots agree for an unrotated detector; a two-theta swing about
    /// the sample keeps the closest point and distance.
    #[test]
    fn detector_pivots() {
        let mut p = DetectorPlacement {
            beam: [1.0, 0.0, 0.0],
            fdet: [0.0, 0.0, 1.0],
            sdet: [0.0, -1.0, 0.0],
            rot: [0.0; 3],
            twotheta_axis: [0.0, 1.0, 0.0],
            twotheta: 0.0,
            pivot_sample: false,
            distance: 0.1,
            close_distance: f64::NAN,
            xclose: 0.02,
            yclose: 0.03,
            xbeam: 0.02,
            ybeam: 0.03,
        };
        let beam = place_detector(&p);
        p.pivot_sample = true;
        let sample = place_detector(&p);
        assert_eq!(beam.pix0, [0.1, 0.03, -0.02]);
        assert_eq!(beam, sample);
        p.twotheta = 0.3;
        let swung = place_detector(&p);
        assert!((swung.close_distance - 0.1).abs() < 1e-15);
        assert!((swung.xclose - 0.02).abs() < 1e-15 && (swung.yclose - 0.03).abs() < 1e-15);
        assert!(swung.xbeam.abs() > 0.02);
    }

    #[test]
    fn search_position_carries_over() {
        // x not increasing: 0.2 then 0.18; a lookup coming from above stops
        // at a different row than one coming from below
        let rows = [[0.0, 1.0], [0.1, 2.0], [0.2, 6.75], [0.18, 7.32], [0.3, 5.0], [0.4, 4.0]];
        let mut a = StolTable::new(&rows, 1.0).unwrap();
        let from_below = a.lookup(0.19);
        a.lookup(0.35);
        let from_above = a.lookup(0.19);
        assert_ne!(from_below, from_above);
    }

    /// In an increasing table the stateless lookup lands where the
    /// searching one does, from any earlier position: exactly on rows,
    /// between them, beyond both ends.
    #[test]
    fn stateless_lookup_equals_search_in_increasing_tables() {
        let rows: Vec<[f64; 2]> =
            (0..30).map(|i| [i as f64 * 0.05, 3.0 + (i as f64 * 0.7).sin()]).collect();
        let mut t = StolTable::new(&rows, 1e10).unwrap();
        assert!(t.is_increasing());
        let probes: Vec<f64> = (0..400)
            .map(|i| (i as f64 * 0.37).sin().abs() * 1.8e10)
            .chain(rows.iter().map(|r| r[0] * 1e10).chain([0.0, 2.5e10, 1e12]))
            .collect();
        for &x in &probes {
            assert_eq!(t.lookup(x).to_bits(), t.lookup_at(x).to_bits(), "{x}");
        }
        let down = StolTable::new(&[[0.0, 1.0], [0.2, 2.0], [0.1, 3.0]], 1.0).unwrap();
        assert!(!down.is_increasing());
    }

    /// The row-parallel render gives the serial one's pixels bit for bit.
    #[test]
    fn background_rows_equal_the_serial_render() {
        let det = AmorphousDetector {
            fpixels: 23,
            spixels: 17,
            pixel_size: 2e-3,
            oversample: 2,
            pix0: [0.08, 0.02, -0.03],
            fdet: [0.0, 0.0, 1.0],
            sdet: [0.0, -1.0, 0.0],
            beam: [1.0, 0.0, 0.0],
            distance: 0.08,
            close_distance: 0.08,
            curved: false,
            point_pixel: false,
            roi: [2, 20, 1, 15],
            sensor: None,
        };
        let sample = AmorphousSample {
            kahn: 0.6,
            nopolar: false,
            polar_vector: [0.0, 0.0, 1.0],
            fluence: 1e22,
            molecules: 1e17,
            fmap: false,
        };
        let sources = [
            AmorphousSource { position: [-10.0, 0.0, 0.0], weight: 1.0, lambda: 1e-10 },
            AmorphousSource { position: [-10.0, 0.01, 0.0], weight: 0.5, lambda: 1.1e-10 },
        ];
        let rows: Vec<[f64; 2]> =
            (0..20).map(|i| [i as f64 * 0.1, 5.0 / (1.0 + i as f64)]).collect();
        let mut table = StolTable::new(&rows, 1e10).unwrap();
        let bg = Background::new(det, sources.to_vec(), sample, table.clone()).unwrap();
        let serial = render_amorphous(&det, &sources, &sample, &mut table, |_| {});
        let rows = bg.render();
        assert!(serial.pixels.iter().filter(|&&v| v > 0.0).count() == 19 * 15);
        assert_eq!(serial.pixels, rows.pixels);
        assert!((serial.omega_sum - rows.omega_sum).abs() <= 1e-14 * serial.omega_sum);
    }

    /// With a sensor, each sub-pixel's share is what the whole thickness
    /// stops: 1 − exp(−μ t / cos), against the sensor-less render.
    #[test]
    fn sensor_absorbs_the_closed_form_fraction() {
        let mut det = AmorphousDetector {
            fpixels: 8,
            spixels: 8,
            pixel_size: 5e-3,
            oversample: 1,
            pix0: [0.05, 0.02, -0.02],
            fdet: [0.0, 0.0, 1.0],
            sdet: [0.0, -1.0, 0.0],
            beam: [1.0, 0.0, 0.0],
            distance: 0.05,
            close_distance: 0.05,
            curved: false,
            point_pixel: false,
            roi: [0, 7, 0, 7],
            sensor: None,
        };
        let sample = AmorphousSample {
            kahn: 0.0,
            nopolar: true,
            polar_vector: [0.0, 0.0, 1.0],
            fluence: 1e22,
            molecules: 1e17,
            fmap: false,
        };
        let src = vec![AmorphousSource { position: [-10.0, 0.0, 0.0], weight: 1.0, lambda: 1e-10 }];
        let bare = Background::new(det, src.clone(), sample, flat_table(2.0)).unwrap().render();
        let (t, mu) = (450e-6, 2.3e3);
        det.sensor = Some(AmorphousSensor { thickness_m: t, mu_per_m: mu, odet: [1.0, 0.0, 0.0] });
        let thick = Background::new(det, src, sample, flat_table(2.0)).unwrap().render();
        for s in 0..8 {
            for f in 0..8 {
                let y = 0.02 - (s as f64 + 0.5) * 5e-3;
                let z = -0.02 + (f as f64 + 0.5) * 5e-3;
                let cos = 0.05 / (0.05f64 * 0.05 + y * y + z * z).sqrt();
                let want = 1.0 - (-mu * t / cos).exp();
                let got = thick.pixels[s * 8 + f] as f64 / bare.pixels[s * 8 + f] as f64;
                assert!((got - want).abs() < 1e-6 * want, "{f},{s}: {got} vs {want}");
            }
        }
    }

    /// A flat table (F constant) on an unpolarized beam: every pixel holds
    /// the thin-sample closed form
    /// `I = r_e² F² · fluence · n · Ω · (1 + cos² 2θ)/2`, with
    /// `Ω = pixel² · close_distance / R³` and `cos 2θ = close_distance / R`
    /// for a detector normal to the beam at pixel distance R.
    #[test]
    fn flat_table_matches_thin_sample_closed_form() {
        let (n, pixel, dist) = (16usize, 1e-3, 0.05);
        let (f, fluence, molecules) = (2.5, 1e20, 3.3e16);
        let det = AmorphousDetector {
            fpixels: n,
            spixels: n,
            pixel_size: pixel,
            oversample: 1,
            pix0: [dist, 0.004, -0.006],
            fdet: [0.0, 0.0, 1.0],
            sdet: [0.0, -1.0, 0.0],
            beam: [1.0, 0.0, 0.0],
            distance: dist,
            close_distance: dist,
            curved: false,
            point_pixel: false,
            roi: [0, n as i64, 0, n as i64],
            sensor: None,
        };
        let sample = AmorphousSample {
            kahn: 0.0,
            nopolar: false,
            polar_vector: [0.0, 0.0, 1.0],
            fluence,
            molecules,
            fmap: false,
        };
        let src = [AmorphousSource { position: [-10.0, 0.0, 0.0], weight: 1.0, lambda: 1e-10 }];
        let mut visited = 0;
        let img = render_amorphous(&det, &src, &sample, &mut flat_table(f), |_| visited += 1);
        assert_eq!(visited, n * n);
        for s in 0..n {
            for fp in 0..n {
                let y = 0.004 - (s as f64 + 0.5) * pixel;
                let z = -0.006 + (fp as f64 + 0.5) * pixel;
                let r = (dist * dist + y * y + z * z).sqrt();
                let omega = pixel * pixel * dist / r.powi(3);
                let cos2t = dist / r;
                let want =
                    R_E_SQR * f * f * fluence * molecules * omega * 0.5 * (1.0 + cos2t * cos2t);
                let got = img.pixels[s * n + fp] as f64;
                assert!((got - want).abs() <= 1e-6 * want, "{fp},{s}: {got} vs {want}");
            }
        }
        // the summed solid angle is that of the detector seen from the sample
        let omega_sum: f64 = (0..n * n)
            .map(|i| {
                let y = 0.004 - ((i / n) as f64 + 0.5) * pixel;
                let z = -0.006 + ((i % n) as f64 + 0.5) * pixel;
                let r = (dist * dist + y * y + z * z).sqrt();
                pixel * pixel * dist / r.powi(3)
            })
            .sum();
        assert!((img.omega_sum - omega_sum).abs() < 1e-12 * omega_sum);
    }

    /// A negative F gives negative intensity; the ROI bounds are inclusive
    /// and pixels outside stay 0; `fmap` stores F itself.
    #[test]
    fn negative_f_roi_and_fmap() {
        let det = AmorphousDetector {
            fpixels: 4,
            spixels: 3,
            pixel_size: 1e-3,
            oversample: 2,
            pix0: [0.1, 0.002, -0.002],
            fdet: [0.0, 0.0, 1.0],
            sdet: [0.0, -1.0, 0.0],
            beam: [1.0, 0.0, 0.0],
            distance: 0.1,
            close_distance: 0.1,
            curved: false,
            point_pixel: true,
            roi: [1, 2, 1, 1],
            sensor: None,
        };
        let mut sample = AmorphousSample {
            kahn: 0.0,
            nopolar: true,
            polar_vector: [0.0, 0.0, 1.0],
            fluence: 1e20,
            molecules: 1e16,
            fmap: false,
        };
        let src = [AmorphousSource { position: [-10.0, 0.0, 0.0], weight: 1.0, lambda: 1e-10 }];
        let img = render_amorphous(&det, &src, &sample, &mut flat_table(-3.0), |_| {});
        let lit: Vec<usize> = (0..12).filter(|&i| img.pixels[i] != 0.0).collect();
        assert_eq!(lit, [5, 6]);
        assert!(img.pixels[5] < 0.0);
        sample.fmap = true;
        let img = render_amorphous(&det, &src, &sample, &mut flat_table(-3.0), |_| {});
        assert!((img.pixels[5] + 3.0).abs() < 1e-6);
    }
}
