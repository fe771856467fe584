//! The derivatives of a weighted image by every structure factor of the
//! grid: `g[hkl] = Σ_pixels v · d pixel / d F[hkl]`, the reverse-mode product
//! that refining structure factors needs, without a derivative image per
//! structure factor (there are as many as grid points).
//!
//! A pixel is `c · i_acc`, with `c` the scale and the factors applied once
//! at the end and `i_acc` the background plus `F_cell² F_latt²` summed over
//! the samples (each running sum multiplied by the factors an
//! `-oversample_*` flag compounds). `F_cell` is one grid value (nearest) or
//! a tricubic interpolation, linear in 64 grid values with the weights of
//! [`polin3_weights`]; so `d pixel / d F[hkl]` is a sum of
//! `c · 2 F_cell F_latt² · weight` over the samples that read `F[hkl]`,
//! each multiplied by the factors compounded after it. Each pixel's terms
//! are gathered by the sample loop's hook ([`Scatter`]), weighted by `v`
//! and added into one sparse sum per row; the rows are then added in order,
//! so the result does not depend on the threads. The rows go through the
//! row driver ([`render_planes`]), which applies the ROI, the mask and
//! nanoBragg.c's tricubic fallback as for the image.

use crate::error::{Error, Result};
use crate::render::cpu::{in_pool, RenderOptions};
use crate::render::kernel::{tricubic_in_range, Fallback, Fast, Kernel};
use crate::render::rows::{render_planes, zeroed_plane, RowBlocks, RowKernel, RowOut};
use crate::render::samples::Samples;
use crate::setup::Plan;
use crate::sf::polin3_weights;
use crate::vec3::V3;
use std::collections::HashMap;
use std::sync::Mutex;

/// The image and the derivatives of `Σ v·image` by the structure factors.
#[derive(Debug, Clone)]
pub struct SfProducts {
    /// Photons per pixel (the f64 image of the fast kernels).
    pub image: Vec<f64>,
    /// `Σ v · d pixel / d F` for every value of the plan's grid, in the
    /// grid's layout ([`crate::sf::HklGrid::data`], padding included: its
    /// entries stay 0, no pixel reads them).
    pub gradient: Vec<f64>,
}

/// The image of `plan` and `Σ v · d pixel / d F[hkl]` for every structure
/// factor of its grid (`v`: one weight per pixel; pixels outside the ROI or
/// masked do not count). An error without a grid (`-default_F` alone: its
/// derivative is the parameter `default_F`).
pub fn sf_vjp_of(plan: &Plan, opts: RenderOptions, v: &[f64]) -> Result<SfProducts> {
    let (fp, sp) = (plan.detector.fpixels, plan.detector.spixels);
    let Some(grid) = plan.grid.as_ref() else {
        return Err(Error::Invalid {
            what: "structure factors",
            msg: "no structure-factor grid to differentiate by (give -hkl or an Fdump file)".into(),
        });
    };
    if plan.corrected {
        // the engine's products and central differences of the image
        // disagree by ~0.3 % there: refused until understood
        return Err(Error::Invalid {
            what: "structure factors",
            msg: "gradients by the structure factors are not available with -corrected".into(),
        });
    }
    if v.len() != fp * sp {
        return Err(Error::Invalid {
            what: "structure factors",
            msg: format!("{} weights for {} pixels ({fp} x {sp})", v.len(), fp * sp),
        });
    }
    let rows = ScatterRows {
        kernel: Kernel::new(plan),
        v,
        rows: (0..sp).map(|_| Mutex::default()).collect(),
    };
    let image = in_pool(opts.threads, || {
        let mut image = zeroed_plane(fp * sp);
        render_planes(plan, &rows, &mut [&mut image[..]], false, None);
        image
    });
    let mut gradient = vec![0.0f64; grid.data.len()];
    for row in rows.rows {
        let row = row.into_inner().unwrap_or_else(|e| e.into_inner());
        // each index once per row: the order within a row does not matter
        for (i, g) in row {
            gradient[i] += g;
        }
    }
    Ok(SfProducts { image, gradient })
}

/// One row's `Σ v · d pixel / d F`, by grid index.
type RowSums = HashMap<usize, f64>;

/// The image kernel in f64 with the structure-factor hook, one pixel at a
/// time; each row's sums replace the last ones (a re-render after a
/// tricubic fallback renders the row again).
struct ScatterRows<'p, 'v> {
    kernel: Kernel<'p, f64, Fast>,
    v: &'v [f64],
    rows: Vec<Mutex<RowSums>>,
}

impl RowKernel<f64> for ScatterRows<'_, '_> {
    fn row(&self, s: usize, planes: &mut [&mut [f64]], limit: Option<usize>) -> RowOut {
        let kernel = &self.kernel;
        let plan = kernel.plan();
        let fp = plan.detector.fpixels;
        let mut sums = RowSums::new();
        let mut out = RowOut::default();
        if let Some(blocks) = RowBlocks::new(plan, s, 1, kernel.interpolates(), limit) {
            let mut hook = Scatter { i_acc: 0.0, terms: Vec::new() };
            for mut b in blocks {
                hook.i_acc = kernel.i_start();
                hook.terms.clear();
                let mut oor = None;
                let end = kernel.samples(b.f0, s, &mut b.interp, &mut oor, &mut hook);
                planes[0][b.f0] = kernel.finish_value(hook.i_acc, end.factors);
                out.omega += end.omega_sum;
                // the pixel is linear in i_acc
                let w = self.v[s * fp + b.f0] * kernel.finish_value(1.0, end.factors);
                if w != 0.0 {
                    for &(i, t) in &hook.terms {
                        *sums.entry(i).or_default() += w * t;
                    }
                }
                if out.fallback.is_none() {
                    out.fallback = oor.map(|(i, p)| (s * fp + b.f0 + i, Some(p)));
                }
            }
        }
        *self.rows[s].lock().unwrap_or_else(|e| e.into_inner()) = sums;
        out
    }
    fn interpolates(&self) -> bool {
        self.kernel.interpolates()
    }
}

/// The sample hook: the photons of every cell (as the image's hook adds
/// them) and, for each grid value read, `d i_acc / d F`.
struct Scatter {
    i_acc: f64,
    /// (grid index, d i_acc / d F[index]) for the pixel so far.
    terms: Vec<(usize, f64)>,
}

impl Samples<f64, Fast> for Scatter {
    fn source(
        &mut self,
        kernel: &Kernel<f64, Fast>,
        _src: (usize, &V3<f64>),
        q: V3<f64>,
        active: bool,
        [capture_fraction, polar, omega]: [f64; 3],
        interp: &mut u32,
        out_of_range: &mut Option<(usize, Fallback)>,
    ) {
        if !active {
            return;
        }
        let plan = kernel.plan();
        // -corrected: the sample's factors multiply its photons once
        let weight = if kernel.corrected { capture_fraction * polar * omega } else { 1.0 };
        if kernel.corrected {
            self.i_acc += kernel.bg_per_sample * weight;
        }
        for cell in &kernel.cells {
            let [h, k, l] = kernel.miller(cell, q);
            let f_latt = kernel.lattice(h, k, l);
            if plan.water_size_m == 0.0 && f_latt == 0.0 {
                continue;
            }
            let tricubic_before = *interp & 1 != 0;
            let f_cell = kernel.structure_factor([h, k, l], true, interp, out_of_range);
            let slope = 2.0 * f_cell * f_latt * f_latt * weight;
            // interpolated where the whole neighbourhood is on the grid (under
            // -corrected the flag stays set past an out-of-range point)
            let on_grid = kernel.grid.is_some_and(|g| tricubic_in_range(g, [h, k, l]));
            if tricubic_before && on_grid {
                self.tricubic_terms(kernel, [h, k, l], slope);
            } else {
                // nanoBragg.c's rounding, as the lookup's
                let [h0, k0, l0] = [h, k, l].map(|x| (x - 0.5).ceil() as i64);
                if let Some(i) = kernel.nearest_index(h0, k0, l0) {
                    self.terms.push((i, slope));
                }
            }
            self.i_acc += f_cell * f_cell * weight * f_latt * f_latt;
            if kernel.corrected {
                continue;
            }
            for (on, factor) in [
                (plan.oversample_thick, capture_fraction),
                (plan.oversample_polar, polar),
                (plan.oversample_omega, omega),
            ] {
                if on {
                    self.i_acc *= factor;
                    self.terms.iter_mut().for_each(|t| t.1 *= factor);
                }
            }
        }
    }
}

impl Scatter {
    /// The 64 grid values of a tricubic interpolation at (h, k, l), each
    /// with `slope` times its weight.
    fn tricubic_terms(&mut self, kernel: &Kernel<f64, Fast>, [h, k, l]: [f64; 3], slope: f64) {
        let g = kernel.grid.expect("tricubic interpolation reads a grid");
        let fl = [h.floor(), k.floor(), l.floor()];
        let axis = |x: f64| [x - 1.0, x, x + 1.0, x + 2.0];
        let w = polin3_weights(&axis(fl[0]), &axis(fl[1]), &axis(fl[2]), h, k, l);
        let start =
            [fl[0] as i32 - 1 - g.h_min, fl[1] as i32 - 1 - g.k_min, fl[2] as i32 - 1 - g.l_min];
        for (i, plane) in w.iter().enumerate() {
            for (j, row) in plane.iter().enumerate() {
                for (m, &wt) in row.iter().enumerate() {
                    let at = g.index(start[0] + i as i32, start[1] + j as i32, start[2] + m as i32);
                    self.terms.push((at, slope * wt));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{SfSource, SimConfig};
    use crate::render::{render, Precision};
    use crate::setup::SetupSeeds;

    fn config(interpolate: bool) -> SimConfig {
        let mut cfg = SimConfig::default();
        (cfg.detector.fpixels, cfg.detector.spixels) = (23, 19);
        cfg.detector.pixel_mm = 1.0;
        cfg.detector.distance_mm = 50.0;
        cfg.crystal.cell = Some([30.0, 34.0, 38.0, 88.0, 93.0, 95.0]);
        (cfg.crystal.na, cfg.crystal.nb, cfg.crystal.nc) = (3.0, 3.0, 3.0);
        cfg.crystal.mosaic_deg = 0.5;
        cfg.crystal.mosaic_domains = 2;
        cfg.beam.lambda_a = 1.5;
        cfg.sf.source = SfSource::Hkl(crate::sf::test_entries(3, 3).into());
        cfg.sf.interpolate = Some(interpolate);
        cfg.sf.default_f = 5.0;
        cfg
    }

    /// `Σ v·image` of `plan` in f64.
    fn weighted(plan: &Plan, v: &[f64]) -> f64 {
        let (image, _) = render::<f64>(plan, RenderOptions::new(Precision::Fast64)).into_parts();
        image.iter().zip(v).map(|(a, b)| a * b).sum()
    }

    /// Against central differences of the f64 image at the grid values with
    /// the largest derivatives and at some that no pixel reads; the image
    /// is the fast kernels'; the threads do not change the sums.
    fn check(cfg: &SimConfig) {
        let plan = Plan::new(cfg, SetupSeeds { misset_idum: -1 }).unwrap();
        let n = plan.detector.fpixels * plan.detector.spixels;
        let v: Vec<f64> = (0..n).map(|i| 1.0 + ((i * 37) % 11) as f64 / 5.0).collect();
        let one = sf_vjp_of(&plan, RenderOptions::default().threads(1), &v).unwrap();
        let two = sf_vjp_of(&plan, RenderOptions::default().threads(2), &v).unwrap();
        assert_eq!(one.gradient, two.gradient);
        let (want, _) = render::<f64>(&plan, RenderOptions::new(Precision::Fast64)).into_parts();
        for (a, b) in one.image.iter().zip(&want) {
            assert!((a - b).abs() <= 1e-10 * b.abs(), "image {a} vs {b}");
        }
        let g = &one.gradient;
        let mut order: Vec<usize> = (0..g.len()).collect();
        order.sort_by(|&a, &b| g[b].abs().total_cmp(&g[a].abs()));
        let read = order.iter().take_while(|&&i| g[i] != 0.0).count();
        assert!(read >= 8, "{read} grid values read");
        let unread = order[read..].iter().step_by(97).take(3);
        for &i in order[..6].iter().chain(order[read / 2..read / 2 + 2].iter()).chain(unread) {
            let h = 1e-3;
            let mut up = plan.clone();
            std::sync::Arc::make_mut(&mut up.grid.as_mut().unwrap().data)[i] += h;
            let mut dn = plan.clone();
            std::sync::Arc::make_mut(&mut dn.grid.as_mut().unwrap().data)[i] -= h;
            let fd = (weighted(&up, &v) - weighted(&dn, &v)) / (2.0 * h);
            let scale = g[order[0]].abs();
            assert!((g[i] - fd).abs() <= 1e-7 * scale, "index {i}: {} vs {fd}", g[i]);
        }
    }

    #[test]
    fn nearest_neighbour() {
        check(&config(false));
    }

    #[test]
    fn tricubic_with_a_fallback_and_compounded_factors() {
        let mut cfg = config(true);
        cfg.sampling.oversample = 2;
        cfg.sampling.oversample_omega = true;
        cfg.sampling.oversample_polar = true;
        let plan = Plan::new(&cfg, SetupSeeds { misset_idum: -1 }).unwrap();
        let out = crate::render::render::<f32>(&plan, RenderOptions::new(Precision::Fast64));
        assert!(out.info.interpolation_fallback.is_some(), "the grid is small enough to leave");
        check(&cfg);
    }

    /// `-corrected` is refused (see `sf_vjp_of`).
    #[test]
    fn corrected_is_refused() {
        let mut cfg = config(false);
        cfg.sampling.corrected = true;
        let plan = Plan::new(&cfg, SetupSeeds { misset_idum: -1 }).unwrap();
        let e = sf_vjp_of(&plan, RenderOptions::default(), &vec![1.0; 437]).unwrap_err();
        assert!(e.to_string().contains("not available with -corrected"), "{e}");
    }

    #[test]
    fn without_a_grid_or_with_the_wrong_size_it_says_so() {
        let mut cfg = config(false);
        let plan = Plan::new(&cfg, SetupSeeds { misset_idum: -1 }).unwrap();
        let e = sf_vjp_of(&plan, RenderOptions::default(), &[1.0]).unwrap_err();
        assert!(e.to_string().contains("1 weights for 437 pixels"), "{e}");
        cfg.sf.source = SfSource::None;
        let plan = Plan::new(&cfg, SetupSeeds { misset_idum: -1 }).unwrap();
        let e = sf_vjp_of(&plan, RenderOptions::default(), &vec![1.0; 437]).unwrap_err();
        assert!(e.to_string().contains("no structure-factor grid"), "{e}");
    }
}
