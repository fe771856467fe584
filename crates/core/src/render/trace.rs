//! One pixel, re-evaluated with its intermediate values kept: the data behind
//! `-printout` / `-printout_pixel`.
//!
//! The trace is the render's exact f64 kernel ([`Kernel::lanes_probed`] on
//! one lane) with a probe that records what it computes, so it cannot drift
//! from the physics. The values reported are those nanoBragg.c leaves in its
//! variables after the pixel: the ones of the last sub-pixel, source and cell
//! evaluated.

use super::kernel::{Exact, KCell, Kernel, Probe};
use crate::setup::{Interpolation, Plan};
use crate::vec3::{magnitude, V3};
use rayon::prelude::*;

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

/// Records what nanoBragg.c leaves in its variables after a pixel: the
/// values of the last sub-pixel, source and cell evaluated.
struct Recorder {
    position: V3<f64>,
    scattering: V3<f64>,
    hkl: V3<f64>,
    cell_m: [V3<f64>; 3],
    f_latt: f64,
    f_cell: f64,
    finish: [f64; 4],
}

impl Probe<f64> for Recorder {
    fn position(&mut self, pos: &V3<f64>) {
        self.position = *pos;
    }
    fn scattering(&mut self, scattering: &V3<f64>) {
        self.scattering = *scattering;
    }
    fn lattice(&mut self, cell: &KCell<f64>, hkl: [f64; 3], f_latt: f64) {
        self.cell_m = [cell.a, cell.b, cell.c];
        self.hkl = hkl;
        self.f_latt = f_latt;
    }
    fn structure_factor(&mut self, f_cell: f64, hit: bool) {
        if hit {
            self.f_cell = f_cell;
        }
    }
    fn finish(&mut self, i: f64, polar: f64, omega: f64, capture_fraction: f64) {
        self.finish = [i, polar, omega, capture_fraction];
    }
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
    let first = crate::render::cpu::first_sweep::<f64, Exact>(plan);
    trace_with(&Kernel::new(plan), fpixel, spixel, interpolate, first)
}

/// [`trace_pixel`] with the exact f64 kernel of the plan: the render's own
/// code, watched by a [`Recorder`].
/// `first`: the pixel of the first sweep over the phi steps and its value
/// ([`crate::render::cpu::first_sweep`]), which the render puts in.
fn trace_with(
    kernel: &Kernel<f64, Exact>,
    fpixel: usize,
    spixel: usize,
    interpolate: &mut bool,
    first: Option<(usize, f64)>,
) -> Option<PixelTrace> {
    let plan = kernel.plan();
    if !rendered(plan, fpixel, spixel) {
        return None;
    }
    let mut rec = Recorder {
        position: [0.0; 3],
        scattering: [0.0; 3],
        hkl: [0.0; 3],
        cell_m: [plan.cell.a_m, plan.cell.b_m, plan.cell.c_m],
        f_latt: 0.0,
        f_cell: 0.0,
        finish: [0.0; 4],
    };
    let mut bits = *interpolate as u32;
    let r = kernel.lanes_probed::<false>(fpixel, spixel, &mut bits, &mut rec);
    *interpolate = bits & 1 != 0;
    let [i, polar, omega, capture_fraction] = rec.finish;
    let position = rec.position;
    let twotheta =
        (position[1] * position[1] + position[2] * position[2]).sqrt().atan2(position[0]);
    Some(PixelTrace {
        fpixel,
        spixel,
        stol: 0.5 * magnitude(rec.scattering),
        stol_geometric: (twotheta / 2.0).sin() / (plan.lambda0_m * 1e10),
        position,
        hkl: rec.hkl,
        hkl0: rec.hkl.map(|x| (x - 0.5).ceil() as i64),
        f_cell: rec.f_cell,
        f_latt: rec.f_latt,
        i,
        steps: plan.steps as f64,
        polar,
        omega,
        capture_fraction,
        value: match first {
            Some((i, v)) if i == spixel * plan.detector.fpixels + fpixel => v,
            _ => r.value,
        },
        cell_m: rec.cell_m,
        out_of_range: r.out_of_range.map(|(_, p)| p),
    })
}

/// The raster index (`spixel * fpixels + fpixel`) of the first rendered pixel
/// in which tricubic interpolation leaves the structure factor grid, or `None`
/// if it never does (or the plan does not interpolate). As in nanoBragg.c,
/// pixels up to and including this one start with interpolation on, later
/// ones with nearest-neighbour lookup. Evaluates pixels in parallel. Always
/// `None` under `-corrected`, where each point falls back alone.
pub fn interpolation_cutoff(plan: &Plan) -> Option<usize> {
    if plan.interpolation != Interpolation::Tricubic || plan.corrected {
        return None;
    }
    let fp = plan.detector.fpixels;
    let kernel = Kernel::new(plan);
    (0..fp * plan.detector.spixels).into_par_iter().find_first(|&idx| {
        let mut interp = true;
        trace_with(&kernel, idx % fp, idx / fp, &mut interp, None)
            .is_some_and(|t| t.out_of_range.is_some())
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
    let kernel = Kernel::new(plan);
    let first = crate::render::cpu::first_sweep::<f64, Exact>(plan);
    range
        .into_par_iter()
        .filter_map(|idx| {
            let mut interp = start_on && cutoff.is_none_or(|c| idx <= c);
            trace_with(&kernel, idx % fp, idx / fp, &mut interp, first)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::CrystalShape;
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
        let image = render::<f32>(plan, RenderOptions::default()).image;
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
            c.sf.source = crate::config::SfSource::Hkl(hkl_grid(3).into());
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
        let p = plan(|c| c.sf.source = crate::config::SfSource::Hkl(hkl_grid(4).into()));
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
