//! The amorphous background at the speed of the Bragg render: the same sum as
//! [`super::Background::pixel`], written once over [`Num`] so that it runs one
//! pixel per SIMD lane.
//!
//! Two things make the C-bit form slow: the table search with its four-point
//! Lagrange interpolation, once per sample and source, and the polarization's
//! arctangent and cosine. Here:
//! - the sources are grouped by incident direction. Within a group every
//!   source sees the same `u = |d − i| / 2` (sin θ of the pixel), so the sum
//!   over the group's sources is one function of `u`,
//!   `G(u) = Σ w · sign(F) F²(u / λ)`, and one polarization factor;
//! - each `G` is tabulated once, on a uniform grid of `u` covering the whole
//!   detector, as a cubic per cell (through the cell's ends and thirds).
//!   A table's interpolant has a kink at every row; where the group has one
//!   wavelength and the table's rows are evenly spaced, the cells' edges are
//!   put on the kinks (the water table of the tests then takes about one
//!   cell per row, not 32,768 cells). The grid is refined until the cubic
//!   agrees with `G` computed exactly to 1e-7 relative at three points
//!   inside every cell; a lane's lookup is then a floor, four gathers and a
//!   Horner step;
//! - the polarization is the algebraic Kahn factor of
//!   [`Polarization`] (no trigonometry).
//!
//! The detector must be flat and the image must hold photons (not `-fmap`'s
//! F); otherwise, or when no grid of at most [`MAX_CELL_LOOKUPS`] table
//! lookups passes the check, there is no fast form and the render uses the
//! C-bit one.

use super::{AmorphousDetector, Background};
use crate::physics::polarization::Polarization;
use crate::real::{fast, Mask, Num};
use crate::vec3::{dot, unitize, V3};

/// Relative agreement of a tabulated cell with the exact sum (checked at a
/// quarter, half and three quarters of every cell).
const CELL_TOLERANCE: f64 = 1e-7;

/// The most table lookups spent on building and checking a group's grids
/// (6 per cell and source): beyond it the C-bit form is cheaper than the
/// tables.
pub const MAX_CELL_LOOKUPS: usize = 1 << 26;

/// `G(u)` on a uniform grid of `cells` cells from 0 to `hi`: four power-form
/// coefficients per cell, in the cell's fraction `t` ∈ [0, 1).
#[derive(Debug, Clone)]
struct UniformCubic {
    per_cell: f64,
    hi: f64,
    cells: usize,
    coefficients: Vec<f64>,
}

impl UniformCubic {
    /// The cubic through `y[0..4]` at t = 0, 1/3, 2/3 and 1, in powers of t.
    fn through_thirds(y: &[f64]) -> [f64; 4] {
        let [a, b, c, d] = [y[0], y[1], y[2], y[3]];
        // in s = 3t the nodes are 0, 1, 2, 3; a power of s is 3^k one of t
        [
            a,
            3.0 * (-11.0 / 6.0 * a + 3.0 * b - 1.5 * c + d / 3.0),
            9.0 * (a - 2.5 * b + 2.0 * c - 0.5 * d),
            27.0 * (-a / 6.0 + b / 2.0 - c / 2.0 + d / 6.0),
        ]
    }

    /// The grid of `exact` over [0, cells · h], when every cell passes the
    /// check. Each cell's cubic is fitted inside the cell (through its ends
    /// and thirds), so a kink of `G` on a cell edge costs no accuracy: see
    /// [`aligned_cell`].
    fn build(exact: &(impl Fn(f64) -> f64 + Sync), h: f64, cells: usize) -> Option<Self> {
        use rayon::prelude::*;
        let third = h / 3.0;
        let nodes: Vec<f64> =
            (0..3 * cells + 1).into_par_iter().map(|k| exact(k as f64 * third)).collect();
        let coefficients: Vec<f64> =
            (0..cells).flat_map(|c| Self::through_thirds(&nodes[3 * c..3 * c + 4])).collect();
        let hi = cells as f64 * h;
        let table = UniformCubic { per_cell: 1.0 / h, hi, cells, coefficients };
        let scale = nodes.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let passes = (0..cells).into_par_iter().all(|c| {
            [0.25, 0.5, 0.75].iter().all(|t| {
                let u = (c as f64 + t) * h;
                let (want, got) = (exact(u), table.at(u));
                (got - want).abs() <= CELL_TOLERANCE * (want.abs() + 1e-6 * scale)
            })
        });
        passes.then_some(table)
    }

    /// The scalar value at `u` (for the check).
    fn at(&self, u: f64) -> f64 {
        let x = u * self.per_cell;
        let c = (x.floor().max(0.0) as usize).min(self.cells - 1);
        let t = x - c as f64;
        let k = &self.coefficients[4 * c..4 * c + 4];
        ((k[3] * t + k[2]) * t + k[1]) * t + k[0]
    }

    /// The lanes' values at `u`, and which lanes lie beyond the grid.
    #[inline(always)]
    fn lanes<V: Num<Scalar = f64>>(&self, u: V) -> (V, V::Mask) {
        let beyond = u.cmp_gt(V::c(self.hi));
        let x = u * V::c(self.per_cell);
        let last = V::c((self.cells - 1) as f64);
        let c = V::select(x.cmp_gt(last), last, x.floor());
        let c = V::select(c.cmp_lt(V::zero()), V::zero(), c);
        let t = x - c;
        let at = c * V::c(4.0);
        // (a function, not a closure: it must inline into the SIMD callers)
        #[inline(always)]
        fn k<V: Num<Scalar = f64>>(table: &[f64], at: V, j: f64) -> V {
            let all = V::Mask::splat(true);
            V::gather(table, [V::zero(), V::zero(), at + V::c(j)], [1, 1], all, V::zero())
        }
        let c = &self.coefficients;
        let g = ((k(c, at, 3.0) * t + k(c, at, 2.0)) * t + k(c, at, 1.0)) * t + k(c, at, 0.0);
        (g, beyond)
    }
}

/// A source's weight and wavelength (m).
type WeightAndLambda = (f64, f64);

/// The sources of one incident direction.
#[derive(Debug, Clone)]
struct Group {
    incident: V3<f64>,
    /// `None`: `-nopolar` (factor 1).
    polarization: Option<Polarization<f64>>,
    table: UniformCubic,
}

/// A [`Background`] prepared for lanes of pixels (see the module's text).
#[derive(Debug, Clone)]
pub struct FastBackground {
    pix0: V3<f64>,
    fdet: V3<f64>,
    sdet: V3<f64>,
    sub: f64,
    oversample: usize,
    /// pixel² × the detector plane's distance (the obliquity's numerator).
    omega_numerator: f64,
    point_pixel: bool,
    /// Thickness × attenuation, and the sensor normal.
    sensor: Option<(f64, V3<f64>)>,
    groups: Vec<Group>,
    scale: f64,
}

/// A cell width of `u` whose multiples are the table's rows for the group's
/// one wavelength, when its members share one and the rows (`stols`, guard
/// rows included) are evenly spaced from a multiple of their step.
///
/// A table's interpolant has a kink at every row, and a kink inside a cell
/// limits the cubic's error to first order in the cell width (the 10,000-row
/// water table then takes 32,768 cells for 1e-7); on the cells' edges the
/// kinks cost nothing, and one cell per row is about enough.
fn aligned_cell(stols: &[f64], members: &[WeightAndLambda]) -> Option<f64> {
    let lambda = members.first()?.1;
    if members.iter().any(|m| m.1.to_bits() != lambda.to_bits()) {
        return None;
    }
    let rows = stols.get(2..stols.len().checked_sub(2)?)?;
    let (&first, &last) = (rows.first()?, rows.last()?);
    if rows.len() < 2 || first < 0.0 {
        return None;
    }
    let step = (last - first) / (rows.len() - 1) as f64;
    // a text table's rows are rounded to a few digits (water's 0.494999 is
    // 1 % of a step from 0.4949995): a kink that near an edge costs little,
    // and the check below the grid decides
    let near = |x: f64| (x - x.round()).abs() <= 0.05;
    let even = rows.iter().enumerate().all(|(j, &x)| near((x - first) / step - j as f64));
    (step > 0.0 && even && near(first / step)).then_some(lambda * step)
}

/// The largest `u = sin θ` any point of the flat detector `det` sees from
/// `incident` (unit): the largest at its four corners while those scatter by
/// less than 90° (the points within an angle below 90° of a direction form a
/// convex cone, so they hold the rectangle when they hold its corners), else
/// 1, the largest there is.
fn largest_u(det: &AmorphousDetector, incident: V3<f64>) -> f64 {
    let size = [det.fpixels as f64 * det.pixel_size, det.spixels as f64 * det.pixel_size];
    let mut hi = 0.0f64;
    for [a, b] in [[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]] {
        let p: V3<f64> = std::array::from_fn(|k| {
            det.pix0[k] + a * size[0] * det.fdet[k] + b * size[1] * det.sdet[k]
        });
        let d = unitize(p).0;
        if dot(d, incident) <= 0.0 {
            return 1.0;
        }
        let diff: V3<f64> = std::array::from_fn(|k| d[k] - incident[k]);
        hi = hi.max(0.5 * dot(diff, diff).sqrt());
    }
    // rounding of the corners' positions: the lanes check the bound anyway
    (hi * (1.0 + 1e-6) + 1e-12).min(1.0)
}

impl FastBackground {
    /// The fast form of `bg`, or `None` where it has none (a curved detector,
    /// `-fmap`, or a table no grid within [`MAX_CELL_LOOKUPS`] follows).
    pub fn new(bg: &Background) -> Option<Self> {
        let det = &bg.det;
        if det.curved || bg.sample.fmap || det.fpixels == 0 || det.spixels == 0 {
            return None;
        }
        let mut by_direction: Vec<(V3<f64>, Vec<WeightAndLambda>)> = Vec::new();
        for (src, &incident) in bg.sources.iter().zip(&bg.incident) {
            let bits = incident.map(f64::to_bits);
            match by_direction.iter_mut().find(|(i, _)| i.map(f64::to_bits) == bits) {
                Some((_, members)) => members.push((src.weight, src.lambda)),
                None => by_direction.push((incident, vec![(src.weight, src.lambda)])),
            }
        }
        let mut budget = MAX_CELL_LOOKUPS;
        let mut groups = Vec::with_capacity(by_direction.len());
        for (incident, members) in by_direction {
            let exact = |u: f64| {
                members.iter().fold(0.0, |sum, &(weight, lambda)| {
                    let f = bg.table.lookup_at(u / lambda);
                    let sign = if f < 0.0 { -1.0 } else { 1.0 };
                    sum + sign * f * f * weight
                })
            };
            let hi = largest_u(det, incident);
            let mut h = aligned_cell(bg.table.stols(), &members).unwrap_or(hi / 256.0);
            let table = loop {
                let cells = (hi / h).ceil().max(1.0);
                // 3 nodes and 3 checks per cell and source
                let cost = 6.0 * cells * members.len() as f64;
                budget = budget.checked_sub(cost.min(usize::MAX as f64) as usize)?;
                if let Some(t) = UniformCubic::build(&exact, h, cells as usize) {
                    break t;
                }
                h /= 2.0;
            };
            let polarization = (!bg.sample.nopolar)
                .then(|| Polarization::new(bg.sample.kahn, incident, bg.sample.polar_vector));
            groups.push(Group { incident, polarization, table });
        }
        let os = det.oversample.max(1);
        Some(FastBackground {
            pix0: det.pix0,
            fdet: det.fdet,
            sdet: det.sdet,
            sub: det.pixel_size / os as f64,
            oversample: os,
            omega_numerator: det.pixel_size * det.pixel_size * det.close_distance,
            point_pixel: det.point_pixel,
            sensor: det.sensor.map(|s| (s.thickness_m * s.mu_per_m, s.odet)),
            groups,
            scale: bg.scale,
        })
    }

    /// Photons in pixels `f0 .. f0 + V::LANES` of row `s`, their solid
    /// angles (summed over sub-pixels, absorption included, as nonBragg's
    /// total), and the lanes whose direction fell outside a group's grid
    /// (never for pixels of the detector; such a lane's value is not to be
    /// used).
    #[inline(always)]
    pub fn lanes<V: Num<Scalar = f64>>(&self, f0: usize, s: usize) -> (V, V, V::Mask) {
        let os = self.oversample;
        let fpixel = V::from_fn(|i| (f0 + i) as f64);
        let mut sum = V::zero();
        let mut omega_sum = V::zero();
        let mut beyond = V::Mask::splat(false);
        for sub_s in 0..os {
            let sdet = self.sub * ((s * os + sub_s) as f64 + 0.5);
            let row: V3<f64> = std::array::from_fn(|k| sdet * self.sdet[k] + self.pix0[k]);
            for sub_f in 0..os {
                let fdet = (fpixel * V::c(os as f64) + V::c(sub_f as f64 + 0.5)) * V::c(self.sub);
                let pos: V3<V> = std::array::from_fn(|k| fdet * V::c(self.fdet[k]) + V::c(row[k]));
                let (_, inv) = dot(pos, pos).sqrt_recip();
                let d = pos.map(|p| p * inv);
                let mut omega = if self.point_pixel {
                    inv * inv
                } else {
                    V::c(self.omega_numerator) * inv * inv * inv
                };
                if let Some((thick_mu, odet)) = self.sensor {
                    let x = V::c(thick_mu) / dot(d, odet.map(V::c));
                    omega *= absorbed(x);
                }
                omega_sum += omega;
                for g in &self.groups {
                    let diff: V3<V> = std::array::from_fn(|k| d[k] - V::c(g.incident[k]));
                    // on the FMA ports (the divider's square root is slow in
                    // lanes), but that takes √0 as 0 · ∞: the direct beam's 0
                    let u2 = dot(diff, diff);
                    let root = V::select(u2.cmp_gt(V::zero()), u2.sqrt_recip().0, V::zero());
                    let u = V::c(0.5) * root;
                    let (value, out) = g.table.lanes(u);
                    beyond = beyond | out;
                    let polar = match &g.polarization {
                        Some(p) => p.factor(d),
                        None => V::one(),
                    };
                    sum += value * polar * omega;
                }
            }
        }
        (sum * V::c(self.scale), omega_sum, beyond)
    }
}

/// `1 − e^{−x}` to about 1e-13 relative for x ≥ 0 (a series below 0.01,
/// where the difference would lose its digits).
#[inline(always)]
fn absorbed<V: Num<Scalar = f64>>(x: V) -> V {
    let one = V::one();
    let series = x
        * (one
            - x * V::c(1.0 / 2.0)
                * (one
                    - x * V::c(1.0 / 3.0)
                        * (one
                            - x * V::c(1.0 / 4.0)
                                * (one - x * V::c(1.0 / 5.0) * (one - x * V::c(1.0 / 6.0))))));
    V::select(x.cmp_lt(V::c(0.01)), series, one - fast::exp(-x))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::amorphous::{AmorphousSample, AmorphousSensor, AmorphousSource, StolTable};

    /// A water-like table: smooth, rising to a peak near 0.23 Å⁻¹ and
    /// falling, with 300 rows.
    fn table() -> StolTable {
        let rows: Vec<[f64; 2]> = (0..300)
            .map(|i| {
                let x = i as f64 * 0.005;
                [x, 2.0 + 6.0 * (-(x - 0.23).powi(2) / 0.01).exp() + 1.5 * (-x * 2.0).exp()]
            })
            .collect();
        StolTable::new(&rows, 1e10).unwrap()
    }

    fn background(
        os: usize,
        sources: Vec<AmorphousSource>,
        sensor: bool,
        nopolar: bool,
    ) -> Background {
        let det = AmorphousDetector {
            fpixels: 61,
            spixels: 47,
            pixel_size: 2e-3,
            oversample: os,
            pix0: [0.08, -0.05, -0.04],
            fdet: unitize([0.05, 0.0, 1.0]).0,
            sdet: [0.0, 1.0, 0.0],
            beam: [1.0, 0.0, 0.0],
            distance: 0.08,
            close_distance: 0.08,
            curved: false,
            point_pixel: false,
            roi: [0, 60, 0, 46],
            sensor: sensor.then_some(AmorphousSensor {
                thickness_m: 3e-4,
                mu_per_m: 2000.0,
                odet: [1.0, 0.0, 0.0],
            }),
        };
        let sample = AmorphousSample {
            kahn: 0.9,
            nopolar,
            polar_vector: [0.0, 0.0, 1.0],
            fluence: 1e24,
            molecules: 1e12,
            fmap: false,
        };
        Background::new(det, sources, sample, table()).unwrap()
    }

    fn source(position: V3<f64>, weight: f64, lambda_a: f64) -> AmorphousSource {
        AmorphousSource { position, weight, lambda: lambda_a * 1e-10 }
    }

    /// Every pixel of the fast form within 1e-7 relative of the C-bit sum,
    /// and its solid angle within 1e-12:
    /// one source; a spectrum of 7 wavelengths with a second direction
    /// (two groups); sub-pixels with a sensor; no polarization.
    #[test]
    fn lanes_follow_the_exact_sum() {
        let spectrum: Vec<_> = (0..7)
            .flat_map(|k| {
                let l = 1.0 + 0.02 * k as f64;
                [source([-10.0, 0.0, 0.0], 1.0 + k as f64, l), source([-10.0, 0.05, 0.0], 0.5, l)]
            })
            .collect();
        let cases = [
            background(1, vec![source([-10.0, 0.0, 0.0], 1.0, 1.0)], false, false),
            background(1, spectrum, false, false),
            background(2, vec![source([-10.0, 0.0, 0.0], 1.0, 0.9)], true, false),
            background(1, vec![source([-10.0, 0.0, 0.0], 1.0, 1.2)], false, true),
        ];
        for (n, bg) in cases.iter().enumerate() {
            let fast = FastBackground::new(bg).expect("a fast form");
            let (mut worst, mut worst_omega) = (0.0f64, 0.0f64);
            for s in 0..47 {
                for f0 in (0..61).step_by(4) {
                    let (v, omega, beyond) =
                        fast.lanes::<crate::real::X2<crate::real::X2<f64>>>(f0, s);
                    for i in 0..4 {
                        if f0 + i < 61 {
                            assert_eq!(beyond.bits() >> i & 1, 0, "case {n}: pixel {} {s}", f0 + i);
                            let mut want_omega = 0.0;
                            let want = bg.pixel(f0 + i, s, &mut want_omega);
                            worst = worst.max((v.lane(i) - want).abs() / want.abs());
                            let omega_error = (omega.lane(i) - want_omega).abs() / want_omega;
                            worst_omega = worst_omega.max(omega_error);
                        }
                    }
                }
            }
            assert!(worst < 1e-7, "case {n}: worst relative difference {worst:e}");
            assert!(worst_omega < 1e-12, "case {n}: solid angle off by {worst_omega:e}");
        }
    }

    /// With one wavelength and evenly spaced rows the cells' edges sit on
    /// the table's rows, so the grid passes with the first cell width tried
    /// (one cell per row, λ · step) instead of being halved; with a spectrum
    /// it is not aligned.
    #[test]
    fn one_wavelength_puts_the_cells_on_the_rows() {
        let lambda_a = 1.0;
        let bg = background(1, vec![source([-10.0, 0.0, 0.0], 1.0, lambda_a)], false, false);
        let step = aligned_cell(bg.table.stols(), &[(1.0, lambda_a * 1e-10)]).expect("aligned");
        // 0.005 Å⁻¹ per row, in m⁻¹, times λ in m
        assert!((step - 0.005 * lambda_a).abs() < 1e-12, "{step}");
        let fast = FastBackground::new(&bg).unwrap();
        let table = &fast.groups[0].table;
        assert!((1.0 / table.per_cell - step).abs() < 1e-12, "cell {}", 1.0 / table.per_cell);
        let two = [(1.0, 1e-10), (1.0, 1.02e-10)];
        assert_eq!(aligned_cell(bg.table.stols(), &two), None);
    }

    /// The series and the exponential meet at 0.01 to 1e-13 (the
    /// exponential's 3e-16 over 1 − e^{−0.01}).
    #[test]
    fn absorption_is_one_minus_the_transmission() {
        for x in [1e-9, 1e-4, 0.00999999, 0.01, 0.3, 5.0] {
            let want = -f64::exp_m1(-x);
            assert!((absorbed(x) - want).abs() <= 1e-13 * want, "{x}");
        }
    }
}
