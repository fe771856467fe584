//! The CPU backend: rows in parallel with rayon, pixels with the generic kernel.

use super::kernel::{Kernel, PixelResult};
use crate::real::Real;
use crate::setup::Plan;
use rayon::prelude::*;

/// Options that do not change the image.
#[derive(Debug, Clone, Copy, Default)]
pub struct RenderOptions {
    /// Threads to use (0 = rayon's default, all cores).
    pub threads: usize,
}

/// A rendered float image and what the C program reports about it.
#[derive(Debug, Clone)]
pub struct RenderOutput {
    /// Photons per pixel, fast index fastest.
    pub image: Vec<f32>,
    /// Sum of solid angles over all sub-pixel evaluations.
    pub omega_sum: f64,
    /// First point where tricubic interpolation left the grid (raster order):
    /// (h, k, l) and (h0, k0, l0).
    pub interpolation_fallback: Option<([f64; 3], [i64; 3])>,
}

fn rendered(plan: &Plan, f: usize, s: usize) -> bool {
    let roi = plan.detector.roi;
    let (fi, si) = (f as i64, s as i64);
    if fi < roi[0] || fi > roi[1] || si < roi[2] || si > roi[3] {
        return false;
    }
    match &plan.mask {
        Some(m) => m[s * plan.detector.fpixels + f] != 0,
        None => true,
    }
}

fn render_rows<R: Real>(
    plan: &Plan,
    kernel: &Kernel<R>,
    image: &mut [f32],
    omega_rows: &mut [f64],
    first_row: usize,
    interpolate_from: Option<usize>,
) -> Vec<Option<(usize, PixelResult<R>)>> {
    let fpixels = plan.detector.fpixels;
    let start_on = kernel.interpolates();
    image
        .par_chunks_mut(fpixels)
        .zip(omega_rows.par_iter_mut())
        .enumerate()
        .map(|(r, (row, omega))| {
            let s = first_row + r;
            let mut first_fallback = None;
            *omega = 0.0;
            for (f, out) in row.iter_mut().enumerate() {
                if !rendered(plan, f, s) {
                    continue;
                }
                let idx = s * fpixels + f;
                let mut interp = match interpolate_from {
                    Some(limit) => start_on && idx <= limit,
                    None => start_on,
                };
                let px = kernel.pixel(f, s, &mut interp);
                *out = px.value.val() as f32;
                *omega += px.omega_sum;
                if first_fallback.is_none() && px.out_of_range.is_some() {
                    first_fallback = Some((idx, px));
                }
            }
            first_fallback
        })
        .collect()
}

fn render_generic<R: Real>(plan: &Plan) -> RenderOutput {
    let kernel = Kernel::<R>::new(plan);
    let (fp, sp) = (plan.detector.fpixels, plan.detector.spixels);
    let mut image = vec![0.0f32; fp * sp];
    let mut omega_rows = vec![0.0f64; sp];
    let fallbacks = render_rows(plan, &kernel, &mut image, &mut omega_rows, 0, None);
    let first = fallbacks.into_iter().flatten().min_by_key(|(i, _)| *i);
    let mut interpolation_fallback = None;
    if let Some((p, px)) = first {
        // nanoBragg.c clears its shared interpolation flag at the first
        // out-of-range point: every later pixel (raster order) is nearest-neighbour.
        interpolation_fallback = px.out_of_range;
        // Re-render from that row on: pixels up to p start interpolating (and
        // give the same values as before), later ones start in nearest mode.
        let row = p / fp;
        render_rows(plan, &kernel, &mut image[row * fp..], &mut omega_rows[row..], row, Some(p));
    }
    let omega_sum = omega_rows.iter().sum();
    RenderOutput { image, omega_sum, interpolation_fallback }
}

/// Render the float image of a plan in f64 (the C program's precision).
pub fn render(plan: &Plan, opts: RenderOptions) -> RenderOutput {
    if opts.threads > 0 {
        if let Ok(pool) = rayon::ThreadPoolBuilder::new().num_threads(opts.threads).build() {
            return pool.install(|| render_generic::<f64>(plan));
        }
    }
    render_generic::<f64>(plan)
}

/// Render in a chosen scalar type (f64 or f32).
pub fn render_as<R: Real>(plan: &Plan, opts: RenderOptions) -> RenderOutput {
    if opts.threads > 0 {
        if let Ok(pool) = rayon::ThreadPoolBuilder::new().num_threads(opts.threads).build() {
            return pool.install(|| render_generic::<R>(plan));
        }
    }
    render_generic::<R>(plan)
}
