//! An experiment ([`Experiment`], core's model of a shot: every panel
//! planned, a detector without panels being one) planned with the flags and
//! files of its errors named, and rendered on the invocation's device. The
//! command's render, `-batch`, the dataset and the Python binding share it.

use crate::invocation::Invocation;
use crate::render::{explain, render_plan_into};
use anyhow::Result;
use nanobragg_core::config::SimConfig;
use nanobragg_core::render::RenderInfo;
use nanobragg_core::setup::{Plan, SetupSeeds};
use nanobragg_core::Experiment;

/// Plans every panel of `config` (the invocation's, or one shot's of a
/// batch) into an [`Experiment`], on the grid of `with` where given (a plan
/// of another shot of the run); `inv` names the flags and files of a setup
/// error.
pub fn experiment(
    inv: &Invocation,
    config: &SimConfig,
    seeds: SetupSeeds,
    with: Option<&Plan>,
) -> Result<Experiment> {
    Experiment::new(config, seeds, with).map_err(|e| explain(e, inv))
}

/// Renders every panel of `exp` into its place of `image` (the whole image,
/// zeros; the pixels between panels stay 0) with the invocation's
/// precision, threads and device, and returns each panel's [`RenderInfo`].
/// On the CPU the panels render side by side: a thread done with its part
/// of one panel takes rows of another instead of waiting.
pub fn render_into(
    inv: &Invocation,
    exp: &Experiment,
    image: &mut [f32],
) -> Result<Vec<RenderInfo>> {
    assert_eq!(image.len(), exp.pixels(), "render_into: image of the wrong size");
    let stacked = exp.layout.is_stacked();
    // panels stacked in order render straight into their rows of the
    // image; others into their own, copied into place
    let mut own: Vec<Vec<f32>> = match stacked {
        true => Vec::new(),
        false => {
            (exp.plans.iter()).map(|p| vec![0.0; p.detector.fpixels * p.detector.spixels]).collect()
        }
    };
    let mut slices: Vec<&mut [f32]> = Vec::with_capacity(exp.plans.len());
    if stacked {
        let mut rest = &mut *image;
        for plan in &exp.plans {
            let (panel, tail) = rest.split_at_mut(plan.detector.fpixels * plan.detector.spixels);
            slices.push(panel);
            rest = tail;
        }
    } else {
        slices.extend(own.iter_mut().map(|v| &mut v[..]));
    }
    let one = |(plan, panel): (&Plan, &mut &mut [f32])| render_plan_into(inv, plan, panel);
    let infos: Vec<RenderInfo> = if inv.uses_gpu() {
        exp.plans.iter().zip(slices.iter_mut()).map(one).collect::<Result<_>>()?
    } else {
        use rayon::prelude::*;
        // in a pool of the invocation's threads, which each panel's
        // render then uses as its own (the binding's `threads=N` bounds
        // the whole image, not each panel)
        nanobragg_core::render::cpu::in_pool(inv.threads, || {
            exp.plans.par_iter().zip(slices.par_iter_mut()).map(one).collect::<Result<_>>()
        })?
    };
    drop(slices);
    for (k, panel) in own.iter().enumerate() {
        exp.layout.put(k, panel, image);
    }
    Ok(infos)
}

/// The whole image of `exp` rendered into memory (see [`render_into`]).
pub fn render(inv: &Invocation, exp: &Experiment) -> Result<(Vec<f32>, Vec<RenderInfo>)> {
    let mut image = vec![0.0f32; exp.pixels()];
    let infos = render_into(inv, exp, &mut image)?;
    Ok((image, infos))
}

/// What the panels' renders `infos` say of the whole image of `exp`: the
/// solid angles summed, the first interpolation fallback, and the rows'
/// statistics where the panels' rows are the image's (stacked in order).
pub fn whole_info(exp: &Experiment, infos: Vec<RenderInfo>) -> RenderInfo {
    let mut info = RenderInfo::default();
    for panel in infos {
        info.omega_sum += panel.omega_sum;
        info.interpolation_fallback = info.interpolation_fallback.or(panel.interpolation_fallback);
        info.rows.extend(panel.rows);
    }
    if !exp.layout.is_stacked() {
        info.rows.clear();
    }
    info
}
