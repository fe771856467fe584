//! One pixel, re-evaluated with its intermediate values kept: the data behind
//! `-printout` / `-printout_pixel`.
//!
//! This is a debugging aid, not a render path. [`trace_pixel`] is a plain
//! scalar f64 copy of the loop structure of [`super::kernel::Kernel::pixel`]
//! (sensor layers, sub-pixels, sources, phi × mosaic cells, in the same order
//! and with the same arithmetic), so that the kernel itself stays free of
//! tracing branches and can be optimised independently. The values reported
//! are those nanoBragg.c leaves in its variables after the pixel: the ones of
//! the last sub-pixel, source and cell evaluated.

use crate::config::CrystalShape;
use crate::physics::lattice::{
    grating_index, sinc3, sincg, GAUSS_XTAL_WIDTH, ROUND_XTAL_SCALE, TOPHAT_RADIUS_SQR,
};
use crate::physics::polarization_factor;
use crate::setup::{Interpolation, Plan};
use crate::sf::polin3;
use crate::units::R_E_SQR;
use crate::vec3::{dot, magnitude, rotate_axis, unitize, V3};
use rayon::prelude::*;
use std::f64::consts::PI;

/// The intermediate values of one pixel, as nanoBragg.c prints them with
/// `-printout`. Quantities that depend on the sub-pixel, source or cell are
/// those of the last one evaluated; a quantity never evaluated in this pixel
/// (every source cut by `-dmin`, or every lattice factor zero) is 0.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PixelTrace {
    /// Fast pixel index.
    pub fpixel: usize,
    /// Slow pixel index.
    pub spixel: usize,
    /// sin(θ)/λ of the last scattering vector (1/m).
    pub stol: f64,
    /// sin(θ)/λ from the last sub-pixel position and the central wavelength (1/Å).
    pub stol_geometric: f64,
    /// Position of the last sub-pixel evaluated (m).
    pub position: V3<f64>,
    /// Fractional Miller indices of the last cell evaluated.
    pub hkl: V3<f64>,
    /// Nearest whole Miller indices.
    pub hkl0: [i64; 3],
    /// Structure factor of the last point that reached the structure factor lookup.
    pub f_cell: f64,
    /// Lattice factor of the last cell evaluated.
    pub f_latt: f64,
    /// Accumulated intensity (photons/sr per unit fluence, background included).
    pub i: f64,
    /// Number of samples the intensity is averaged over.
    pub steps: f64,
    /// Polarization factor.
    pub polar: f64,
    /// Solid angle of the pixel (sr).
    pub omega: f64,
    /// Fraction of photons captured by the sensor.
    pub capture_fraction: f64,
    /// Photons in the pixel, computed here in f64 (the image holds the
    /// rendered value, which the CLI prints).
    pub value: f64,
    /// Real-space a, b, c of the last cell evaluated (m).
    pub cell_m: [V3<f64>; 3],
    /// Set when tricubic interpolation left the grid in this pixel: (h, k, l)
    /// and (h0, k0, l0) of that point.
    pub out_of_range: Option<([f64; 3], [i64; 3])>,
}

fn rendered(plan: &Plan, f: usize, s: usize) -> bool {
    let d = &plan.detector;
    if f >= d.fpixels || s >= d.spixels {
        return false;
    }
    let roi = d.roi;
    let (fi, si) = (f as i64, s as i64);
    if fi < roi[0] || fi > roi[1] || si < roi[2] || si > roi[3] {
        return false;
    }
    plan.mask.as_ref().is_none_or(|m| m[s * d.fpixels + f] != 0)
}

fn lattice(plan: &Plan, h: f64, k: f64, l: f64, h0: f64, k0: f64, l0: f64) -> f64 {
    let [na, nb, nc] = plan.n_cells;
    let fudge = plan.fudge;
    match plan.shape {
        CrystalShape::Square => {
            let mut f = 1.0;
            let idx = |x: f64, n: f64| grating_index(x, n.fract() != 0.0);
            if na > 1.0 {
                f *= sincg(PI * idx(h, na), na);
            }
            if nb > 1.0 {
                f *= sincg(PI * idx(k, nb), nb);
            }
            if nc > 1.0 {
                f *= sincg(PI * idx(l, nc), nc);
            }
            f
        }
        CrystalShape::Round => {
            let (dh, dk, dl) = (h - h0, k - k0, l - l0);
            let hrad_sqr = dh * dh * na * na + dk * dk * nb * nb + dl * dl * nc * nc;
            na * nb * nc * ROUND_XTAL_SCALE * sinc3(PI * (hrad_sqr * fudge).sqrt())
        }
        CrystalShape::Gauss | CrystalShape::Tophat => {
            let (dh, dk, dl) = (h - h0, k - k0, l - l0);
            let (a, b, c) = (plan.cell.a_star, plan.cell.b_star, plan.cell.c_star);
            let dx = dh * a[0] + dk * b[0] + dl * c[0];
            let dy = dh * a[1] + dk * b[1] + dl * c[1];
            let dz = dh * a[2] + dk * b[2] + dl * c[2];
            let rad_star_sqr = (dx * dx + dy * dy + dz * dz) * na * na * nb * nb * nc * nc;
            if plan.shape == CrystalShape::Gauss {
                na * nb * nc * (-(rad_star_sqr / GAUSS_XTAL_WIDTH * fudge)).exp()
            } else if rad_star_sqr * fudge < TOPHAT_RADIUS_SQR {
                na * nb * nc
            } else {
                0.0
            }
        }
    }
}

fn structure_factor(
    plan: &Plan,
    hkl: V3<f64>,
    hkl0: [i64; 3],
    interpolate: &mut bool,
    out_of_range: &mut Option<([f64; 3], [i64; 3])>,
) -> f64 {
    let [h, k, l] = hkl;
    if *interpolate {
        if let Some(g) = &plan.grid {
            let (hmin, kmin, lmin) = (g.h_min as f64, g.k_min as f64, g.l_min as f64);
            if (h - hmin + 3.0) > g.h_range() as f64
                || (h - 2.0 < hmin)
                || (k - kmin + 3.0) > g.k_range() as f64
                || (k - 2.0 < kmin)
                || (l - lmin + 3.0) > g.l_range() as f64
                || (l - 2.0 < lmin)
            {
                if out_of_range.is_none() {
                    *out_of_range = Some((hkl, hkl0));
                }
                *interpolate = false;
            } else {
                let (hf, kf, lf) = (h.floor() as i32, k.floor() as i32, l.floor() as i32);
                let axis = |x: i32| [(x - 1) as f64, x as f64, (x + 1) as f64, (x + 2) as f64];
                let mut sub = [[[0.0f64; 4]; 4]; 4];
                for (i1, plane) in sub.iter_mut().enumerate() {
                    for (i2, row) in plane.iter_mut().enumerate() {
                        for (i3, v) in row.iter_mut().enumerate() {
                            *v = g.at(
                                hf - 1 + i1 as i32 - g.h_min,
                                kf - 1 + i2 as i32 - g.k_min,
                                lf - 1 + i3 as i32 - g.l_min,
                            );
                        }
                    }
                }
                return polin3(&axis(hf), &axis(kf), &axis(lf), &sub, h, k, l);
            }
        } else {
            *interpolate = false;
        }
    }
    let [h0, k0, l0] = hkl0;
    if let Some(g) = &plan.grid {
        if plan.hkls > 0
            && (g.h_min as i64..=g.h_max as i64).contains(&h0)
            && (g.k_min as i64..=g.k_max as i64).contains(&k0)
            && (g.l_min as i64..=g.l_max as i64).contains(&l0)
        {
            return g.at(
                (h0 - g.h_min as i64) as i32,
                (k0 - g.k_min as i64) as i32,
                (l0 - g.l_min as i64) as i32,
            );
        }
    }
    plan.default_f
}

/// Re-evaluates pixel (`fpixel`, `spixel`) and returns its intermediate values,
/// or `None` for a pixel that is not rendered (outside the detector or the
/// region of interest, or masked).
///
/// `interpolate` is the running tricubic-interpolation flag, as for
/// [`super::kernel::Kernel::pixel`]: pass the plan's choice for the first
/// pixel (see [`interpolation_cutoff`] for later ones); it is cleared when
/// interpolation leaves the grid.
pub fn trace_pixel(
    plan: &Plan,
    fpixel: usize,
    spixel: usize,
    interpolate: &mut bool,
) -> Option<PixelTrace> {
    if !rendered(plan, fpixel, spixel) {
        return None;
    }
    let d = &plan.detector;
    let os = plan.oversample;
    let subpixel = d.pixel_size_m / os as f64;
    let thick_zero = d.thick_m == 0.0;
    let mut out_of_range = None;
    let mut i_acc = plan.i_bg;
    let mut polar = if plan.nopolar { 1.0 } else { 0.0 };
    let mut omega = 0.0;
    let mut capture_fraction = 0.0;
    let mut position = [0.0; 3];
    let mut stol = 0.0;
    let mut hkl = [0.0; 3];
    let mut hkl0 = [0i64; 3];
    let mut f_cell = 0.0;
    let mut f_latt = 0.0;
    let mut cell_m = [plan.cell.a_m, plan.cell.b_m, plan.cell.c_m];
    for thick_tic in 0..d.thicksteps {
        let odet_pos = thick_tic as f64 * d.thickstep_m;
        capture_fraction = if thick_zero { 1.0 } else { 0.0 };
        for sub_s in 0..os {
            for sub_f in 0..os {
                let fdet_pos = subpixel * (fpixel * os + sub_f) as f64 + subpixel / 2.0;
                let sdet_pos = subpixel * (spixel * os + sub_s) as f64 + subpixel / 2.0;
                let mut pos: V3<f64> = std::array::from_fn(|i| {
                    fdet_pos * d.fdet[i] + sdet_pos * d.sdet[i] + odet_pos * d.odet[i] + d.pix0[i]
                });
                if d.curved {
                    let v = d.beam.map(|b| d.distance_m * b);
                    let nv = rotate_axis(v, d.sdet, pos[1] / d.distance_m);
                    pos = rotate_axis(nv, d.fdet, pos[2] / d.distance_m);
                }
                position = pos;
                let (mut diffracted, airpath) = unitize(pos);
                if omega == 0.0 || plan.oversample_omega {
                    omega = d.pixel_size_m * d.pixel_size_m / airpath / airpath
                        * d.close_distance_m
                        / airpath;
                    if d.point_pixel {
                        omega = 1.0 / airpath / airpath;
                    }
                }
                if capture_fraction == 0.0 || plan.oversample_thick {
                    let parallax = dot(diffracted, d.odet);
                    let t = thick_tic as f64;
                    capture_fraction = (-t * d.thickstep_m * d.mu_per_m / parallax).exp()
                        - (-(t + 1.0) * d.thickstep_m * d.mu_per_m / parallax).exp();
                }
                for src in &plan.sources.list {
                    let incident = src.dir.map(|x| -x);
                    let lambda = src.lambda_m;
                    let scattering: V3<f64> =
                        std::array::from_fn(|i| (diffracted[i] - incident[i]) / lambda);
                    stol = 0.5 * magnitude(scattering);
                    if plan.dmin_m > 0.0 && stol > 0.0 && plan.dmin_m > 0.5 / stol {
                        continue;
                    }
                    if polar == 0.0 || plan.oversample_polar {
                        polar =
                            polarization_factor(plan.kahn_factor, incident, diffracted, d.polar);
                        diffracted = unitize(diffracted).0;
                    }
                    for m in &plan.cells_m {
                        let a = [m[0], m[1], m[2]];
                        let b = [m[3], m[4], m[5]];
                        let c = [m[6], m[7], m[8]];
                        cell_m = [a, b, c];
                        hkl = [dot(a, scattering), dot(b, scattering), dot(c, scattering)];
                        let h0 = (hkl[0] - 0.5).ceil();
                        let k0 = (hkl[1] - 0.5).ceil();
                        let l0 = (hkl[2] - 0.5).ceil();
                        hkl0 = [h0 as i64, k0 as i64, l0 as i64];
                        f_latt = lattice(plan, hkl[0], hkl[1], hkl[2], h0, k0, l0);
                        if f_latt == 0.0 && plan.water_size_m == 0.0 {
                            continue;
                        }
                        f_cell = structure_factor(plan, hkl, hkl0, interpolate, &mut out_of_range);
                        i_acc += f_cell * f_cell * f_latt * f_latt;
                        if plan.oversample_thick {
                            i_acc *= capture_fraction;
                        }
                        if plan.oversample_polar {
                            i_acc *= polar;
                        }
                        if plan.oversample_omega {
                            i_acc *= omega;
                        }
                    }
                }
            }
        }
    }
    let steps = plan.steps as f64;
    let mut value = R_E_SQR * plan.fluence * i_acc / steps;
    if !plan.oversample_thick {
        value *= capture_fraction;
    }
    if !plan.oversample_polar {
        value *= polar;
    }
    if !plan.oversample_omega {
        value *= omega;
    }
    let twotheta =
        (position[1] * position[1] + position[2] * position[2]).sqrt().atan2(position[0]);
    Some(PixelTrace {
        fpixel,
        spixel,
        stol,
        stol_geometric: (twotheta / 2.0).sin() / (plan.lambda0_m * 1e10),
        position,
        hkl,
        hkl0,
        f_cell,
        f_latt,
        i: i_acc,
        steps,
        polar,
        omega,
        capture_fraction,
        value,
        cell_m,
        out_of_range,
    })
}

/// The raster index (`spixel * fpixels + fpixel`) of the first rendered pixel
/// in which tricubic interpolation leaves the structure factor grid, or `None`
/// if it never does (or the plan does not interpolate). As in nanoBragg.c,
/// pixels up to and including this one start with interpolation on, later
/// ones with nearest-neighbour lookup. Evaluates pixels in parallel.
pub fn interpolation_cutoff(plan: &Plan) -> Option<usize> {
    if plan.interpolation != Interpolation::Tricubic {
        return None;
    }
    let fp = plan.detector.fpixels;
    (0..fp * plan.detector.spixels).into_par_iter().find_first(|&idx| {
        let mut interp = true;
        trace_pixel(plan, idx % fp, idx / fp, &mut interp).is_some_and(|t| t.out_of_range.is_some())
    })
}

/// Traces pixels `range` (raster indices) in parallel, skipping those not
/// rendered; `cutoff` is [`interpolation_cutoff`] of the plan. Results are in
/// raster order.
pub fn trace_range(
    plan: &Plan,
    range: std::ops::Range<usize>,
    cutoff: Option<usize>,
) -> Vec<PixelTrace> {
    let fp = plan.detector.fpixels.max(1);
    let start_on = plan.interpolation == Interpolation::Tricubic;
    range
        .into_par_iter()
        .filter_map(|idx| {
            let mut interp = start_on && cutoff.is_none_or(|c| idx <= c);
            trace_pixel(plan, idx % fp, idx / fp, &mut interp)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SimConfig;
    use crate::render::{render, RenderOptions};
    use crate::setup::SetupSeeds;
    use crate::sf::HklEntry;

    fn plan(edit: impl FnOnce(&mut SimConfig)) -> Plan {
        let mut cfg = SimConfig::default();
        cfg.crystal.cell = Some([50.0, 60.0, 70.0, 90.0, 95.0, 100.0]);
        (cfg.crystal.na, cfg.crystal.nb, cfg.crystal.nc) = (3.0, 3.0, 3.0);
        cfg.detector.fpixels = 10;
        cfg.detector.spixels = 9;
        cfg.detector.pixel_mm = 0.5;
        cfg.detector.distance_mm = 40.0;
        cfg.sf.default_f = 10.0;
        edit(&mut cfg);
        Plan::new(&cfg, SetupSeeds { misset_idum: -1 }).unwrap()
    }

    fn hkl_grid(n: i32) -> Vec<HklEntry> {
        let mut v = Vec::new();
        for h in -n..=n {
            for k in -n..=n {
                for l in -n..=n {
                    let f = 10.0 + ((h * 7 + k * 3 + l * 5).abs() % 37) as f64;
                    v.push(HklEntry { h: h as f64, k: k as f64, l: l as f64, f });
                }
            }
        }
        v
    }

    /// Every rendered pixel's traced value is the rendered value.
    fn check(plan: &Plan) {
        let image = render(plan, RenderOptions::default()).image;
        let cutoff = interpolation_cutoff(plan);
        let fp = plan.detector.fpixels;
        let traces = trace_range(plan, 0..image.len(), cutoff);
        for (idx, &px) in image.iter().enumerate() {
            let t = traces.iter().find(|t| t.spixel * fp + t.fpixel == idx);
            match t {
                Some(t) => {
                    let tol = 1e-6 * (px as f64).abs() + 1e-30;
                    assert!((t.value - px as f64).abs() <= tol, "pixel {idx}: {} vs {px}", t.value);
                    assert_eq!(t.steps, plan.steps as f64);
                }
                None => assert_eq!(px, 0.0, "pixel {idx} not traced"),
            }
        }
    }

    #[test]
    fn traces_agree_with_the_render() {
        check(&plan(|_| {}));
        check(&plan(|c| {
            c.crystal.mosaic_deg = 0.5;
            c.crystal.mosaic_domains = 2;
            c.crystal.osc_deg = 2.0;
            c.crystal.phisteps = 2;
            c.sampling.oversample = 2;
            c.detector.thick_um = 100.0;
            c.detector.thicksteps = 2;
            c.crystal.shape = CrystalShape::Round;
        }));
        // interpolation leaves the grid part way through the image
        let p = plan(|c| {
            c.sf.source = crate::config::SfSource::Hkl(hkl_grid(3));
            c.sf.interpolate = Some(true);
            c.detector.xbeam_mm = Some(0.1);
            c.detector.ybeam_mm = Some(0.1);
            c.crystal.shape = CrystalShape::Gauss;
        });
        assert!(interpolation_cutoff(&p).is_some_and(|c| c > 0));
        check(&p);
        check(&plan(|c| {
            c.detector.roi = Some([1, 4, 2, 3]);
            c.sampling.dmin_a = 30.0;
        }));
    }

    #[test]
    fn trace_values() {
        let p = plan(|c| c.sf.source = crate::config::SfSource::Hkl(hkl_grid(4)));
        let t = trace_pixel(&p, 4, 5, &mut false).unwrap();
        assert_eq!((t.fpixel, t.spixel), (4, 5));
        // the nearest whole indices of the last cell evaluated
        assert_eq!(t.hkl0, t.hkl.map(|x| (x - 0.5).ceil() as i64));
        assert!(t.f_cell >= 10.0 && t.polar > 0.9 && t.omega > 0.0 && t.capture_fraction == 1.0);
        assert!((t.stol * 1e-10 - t.stol_geometric).abs() < 1e-6 * t.stol_geometric);
        assert_eq!(t.cell_m[0], [p.cells_m[0][0], p.cells_m[0][1], p.cells_m[0][2]]);
        assert!(trace_pixel(&p, 10, 0, &mut false).is_none());
        assert!(trace_pixel(&p, 0, 9, &mut false).is_none());
        assert_eq!(interpolation_cutoff(&p), None);
    }
}
