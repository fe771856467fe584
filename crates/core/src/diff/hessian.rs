//! Second derivatives of every pixel: hyper-dual numbers ([`HyperDual64`],
//! a dual of duals: two first-order directions and their product) through the
//! same exact render kernel as [`super::jacobian`].

use super::dual::{hyper, HyperDual64};
use super::leaves::{check_param, Leaves};
use super::param::{Deltas, Param};
use crate::config::SimConfig;
use crate::error::Result;
use crate::render::cpu::{in_pool, Precision, RenderOptions};
use crate::render::kernel::{Exact, Kernel};
use crate::render::rows::{render_images, KernelRows};
use crate::setup::{Plan, SetupSeeds};

/// An image, its first derivatives and second derivatives by parameters.
#[derive(Debug, Clone)]
pub struct Hessian {
    /// Photons per pixel (the exact f64 render, rounded to f32).
    pub image: Vec<f32>,
    /// The parameters, in the order asked for.
    pub params: Vec<Param>,
    /// d pixel / d `params[i]`, per unit of the flag, one image each.
    pub gradient: Vec<Vec<f32>>,
    /// d² pixel / d `params[i]`², one image each.
    pub diagonal: Vec<Vec<f32>>,
    /// `(i, j, image)` with i < j: d² pixel / d `params[i]` d `params[j]`,
    /// for every pair in row order when asked for, else empty.
    pub mixed: Vec<(usize, usize, Vec<f32>)>,
}

/// The image of `cfg` with first and second derivatives by `params`: one
/// render per parameter (value, gradient, diagonal) and, with `mixed`, one
/// per pair of parameters. Deterministic for any thread count (as
/// [`super::jacobian_with`]).
pub fn hessian_with(
    cfg: &SimConfig,
    params: &[Param],
    seeds: SetupSeeds,
    opts: RenderOptions,
    mixed: bool,
) -> Result<Hessian> {
    hessian_of(cfg, &Plan::new(cfg, seeds)?, params, seeds, opts, mixed)
}

/// [`hessian_with`] for `cfg` whose plan (built with `seeds`) the caller
/// already has: setup runs again only in hyper-dual numbers.
pub fn hessian_of(
    cfg: &SimConfig,
    plan: &Plan,
    params: &[Param],
    seeds: SetupSeeds,
    opts: RenderOptions,
    mixed: bool,
) -> Result<Hessian> {
    for &p in params {
        check_param(cfg, plan, p)?;
    }
    in_pool(opts.threads, || {
        let (fp, sp) = (plan.detector.fpixels, plan.detector.spixels);
        let mut image = None;
        let (mut gradient, mut diagonal) = (Vec::new(), Vec::new());
        for &p in params {
            let [v, g, h] = pair_images(cfg, plan, seeds, p, p, &[0, 1, 3])?;
            image.get_or_insert(v);
            gradient.push(g);
            diagonal.push(h);
        }
        let mut pairs = Vec::new();
        if mixed {
            for i in 0..params.len() {
                for j in i + 1..params.len() {
                    let [h] = pair_images(cfg, plan, seeds, params[i], params[j], &[3])?;
                    pairs.push((i, j, h));
                }
            }
        }
        let image = match image {
            Some(i) => i,
            None => {
                crate::render::render::<f32>(
                    plan,
                    RenderOptions::new(Precision::Exact64).threads(0),
                )
                .image
            }
        };
        debug_assert_eq!(image.len(), fp * sp);
        Ok(Hessian { image, params: params.to_vec(), gradient, diagonal, mixed: pairs })
    })
}

/// Render with `a` along the first hyper-dual direction and `b` along the
/// second (the same parameter on both for d²/da²); `parts` picks the
/// outputs: 0 value, 1 d/da, 2 d/db, 3 d²/da db.
fn pair_images<const K: usize>(
    cfg: &SimConfig,
    plan: &Plan,
    seeds: SetupSeeds,
    a: Param,
    b: Param,
    parts: &[usize; K],
) -> Result<[Vec<f32>; K]> {
    let mut deltas = Deltas::<HyperDual64>::zero();
    if a == b {
        deltas.set(a, hyper(0.0, 1.0, 1.0));
    } else {
        deltas.set(a, hyper(0.0, 1.0, 0.0));
        deltas.set(b, hyper(0.0, 0.0, 1.0));
    }
    let leaves = Leaves::new(cfg, plan, seeds, &deltas)?;
    let kernel = Kernel::<HyperDual64, Exact>::from_leaves(plan, &leaves);
    let images = render_images(plan, &KernelRows::new(kernel, parts), K);
    Ok(images.try_into().expect("one image per part"))
}
