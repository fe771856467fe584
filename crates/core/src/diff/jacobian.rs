//! Derivative images: every pixel differentiated by chosen parameters with
//! forward-mode dual numbers through the exact render kernel.

use super::contract::contracted_images;
use super::dual::{seeded, Dense64};
use super::lanes::{render_dense32, render_dense64};
use super::leaves::{check_param, Leaves};
use super::param::Param;
use crate::config::SimConfig;
use crate::error::Result;
use crate::render::cpu::{in_pool, render_exact, Precision, RenderOptions};
use crate::setup::{Plan, SetupSeeds};

/// An image and its derivatives by parameters.
#[derive(Debug, Clone)]
pub struct Jacobian {
    /// Photons per pixel (the exact f64 render, rounded to f32).
    pub image: Vec<f32>,
    /// The parameters, in the order asked for.
    pub params: Vec<Param>,
    /// One image per parameter: d pixel / d parameter, per unit of the flag
    /// ([`Param::unit`]), same layout as `image`.
    pub derivatives: Vec<Vec<f32>>,
}

/// The image of `cfg` and its derivatives by `params` (all threads).
pub fn jacobian(cfg: &SimConfig, params: &[Param], seeds: SetupSeeds) -> Result<Jacobian> {
    jacobian_with(cfg, params, seeds, RenderOptions::default())
}

/// [`jacobian`] with render options (threads), in f64. Parameters are
/// carried eight at a time in a [`Dense64`] (a smaller dual type for the last few); rows run
/// in parallel, each pixel by one thread in a fixed order, so the result
/// does not depend on the number of threads.
pub fn jacobian_with(
    cfg: &SimConfig,
    params: &[Param],
    seeds: SetupSeeds,
    opts: RenderOptions,
) -> Result<Jacobian> {
    jacobian_in(cfg, params, seeds, opts, Precision::Fast64)
}

/// [`jacobian_with`] in the given precision: [`Precision::Fast32`] renders
/// the exact kernel in dual numbers over f32 (setup in f64, as the f32
/// render; the image is then the exact kernel's f32 image), the f64
/// precisions in dual numbers over f64 (setup and kernel).
pub fn jacobian_in(
    cfg: &SimConfig,
    params: &[Param],
    seeds: SetupSeeds,
    opts: RenderOptions,
    precision: Precision,
) -> Result<Jacobian> {
    jacobian_of(cfg, &Plan::new(cfg, seeds)?, params, seeds, opts, precision)
}

/// [`jacobian_in`] for `cfg` whose plan (built with `seeds`) the caller
/// already has: setup runs again only in dual numbers.
pub fn jacobian_of(
    cfg: &SimConfig,
    plan: &Plan,
    params: &[Param],
    seeds: SetupSeeds,
    opts: RenderOptions,
    precision: Precision,
) -> Result<Jacobian> {
    for &p in params {
        check_param(cfg, plan, p)?;
    }
    let n = plan.detector.fpixels * plan.detector.spixels;
    in_pool(opts.threads, || {
        if precision != Precision::Fast32 {
            if let Some(images) = contracted_images(cfg, plan, seeds, params)? {
                let (image, derivatives) = split(images);
                return Ok(Jacobian { image, params: params.to_vec(), derivatives });
            }
        }
        let (image, derivatives) = chunked_images(cfg, plan, seeds, params, precision)?;
        let image = match image {
            Some(i) => i,
            None if n == 0 => Vec::new(),
            None => render_exact(plan, RenderOptions { threads: 0 }).image,
        };
        Ok(Jacobian { image, params: params.to_vec(), derivatives })
    })
}

/// One image per output.
type Planes = Vec<Vec<f32>>;
type Images = (Vec<f32>, Planes);

/// The derivative images with the parameters carried through the kernel,
/// up to eight per render (and the image of the first render, if any).
pub(crate) fn chunked_images(
    cfg: &SimConfig,
    plan: &Plan,
    seeds: SetupSeeds,
    params: &[Param],
    precision: Precision,
) -> Result<(Option<Vec<f32>>, Planes)> {
    let mut image = None;
    let mut derivatives = Vec::with_capacity(params.len());
    for chunk in params.chunks(8) {
        let (img, d) = match (precision, chunk.len()) {
            (Precision::Fast32, 1..=4) => chunk_images_f32::<4>(cfg, plan, seeds, chunk)?,
            (Precision::Fast32, _) => chunk_images_f32::<8>(cfg, plan, seeds, chunk)?,
            (_, 1) => chunk_images::<1>(cfg, plan, seeds, chunk)?,
            (_, 2) => chunk_images::<2>(cfg, plan, seeds, chunk)?,
            (_, 3 | 4) => chunk_images::<4>(cfg, plan, seeds, chunk)?,
            (_, _) => chunk_images::<8>(cfg, plan, seeds, chunk)?,
        };
        image.get_or_insert(img);
        derivatives.extend(d);
    }
    Ok((image, derivatives))
}

/// The image and the derivative images by up to `N` parameters.
fn chunk_images<const N: usize>(
    cfg: &SimConfig,
    plan: &Plan,
    seeds: SetupSeeds,
    params: &[Param],
) -> Result<Images> {
    let leaves = Leaves::new(cfg, plan, seeds, &seeded::<Dense64<N>>(params))?;
    Ok(split(render_dense64(plan, &leaves, params.len() + 1)))
}

/// [`chunk_images`] in single precision: the leaves (setup) in f64 as for
/// the f32 render, the kernel in `Dense32<N>`.
fn chunk_images_f32<const N: usize>(
    cfg: &SimConfig,
    plan: &Plan,
    seeds: SetupSeeds,
    params: &[Param],
) -> Result<Images> {
    let leaves = Leaves::new(cfg, plan, seeds, &seeded::<Dense64<N>>(params))?;
    Ok(split(render_dense32(plan, &leaves.map(Dense64::to_f32), params.len() + 1)))
}

fn split(mut images: Vec<Vec<f32>>) -> Images {
    let rest = images.split_off(1);
    (images.pop().unwrap_or_default(), rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_do_not_change_the_derivatives() {
        let mut cfg = SimConfig::default();
        (cfg.detector.fpixels, cfg.detector.spixels) = (24, 20);
        cfg.crystal.cell = Some([70.0, 80.0, 90.0, 75.0, 85.0, 95.0]);
        (cfg.crystal.na, cfg.crystal.nb, cfg.crystal.nc) = (5.0, 5.0, 5.0);
        cfg.sf.default_f = 10.0;
        let seeds = SetupSeeds { misset_idum: -1 };
        let params = [Param::Distance, Param::CellB, Param::Lambda];
        let one = jacobian_with(&cfg, &params, seeds, RenderOptions { threads: 1 }).unwrap();
        let three = jacobian_with(&cfg, &params, seeds, RenderOptions { threads: 3 }).unwrap();
        assert_eq!(one.image, three.image);
        assert_eq!(one.derivatives, three.derivatives);
        assert_eq!(one.derivatives.len(), 3);
        assert!(one.derivatives.iter().all(|d| d.iter().any(|&x| x != 0.0)));
        // no parameters: the exact image alone
        let none = jacobian(&cfg, &[], seeds).unwrap();
        assert!(none.derivatives.is_empty());
        assert_eq!(none.image.len(), 24 * 20);
        // the values are the exact render's
        let plan = Plan::new(&cfg, seeds).unwrap();
        let exact = render_exact(&plan, RenderOptions::default()).image;
        for (a, b) in one.image.iter().zip(&exact) {
            assert!((a - b).abs() <= 1e-6 * b.abs());
        }
    }

    /// The contracted derivatives against the parameter-carrying renderer.
    mod contraction {
        use super::*;
        use crate::config::{CrystalShape, SfSource};
        use crate::diff::contract::{contracted_images, contracted_images_on};
        use crate::render::SimdLevel;

        const SEEDS: SetupSeeds = SetupSeeds { misset_idum: -3 };

        fn base() -> SimConfig {
            let mut cfg = SimConfig::default();
            (cfg.detector.fpixels, cfg.detector.spixels) = (37, 29);
            cfg.detector.pixel_mm = 0.5;
            cfg.detector.distance_mm = 60.0;
            cfg.crystal.cell = Some([70.0, 80.0, 90.0, 75.0, 85.0, 95.0]);
            (cfg.crystal.na, cfg.crystal.nb, cfg.crystal.nc) = (5.0, 6.0, 7.0);
            cfg.sf.default_f = 10.0;
            // a droplet, so that d/d water is not identically 0
            cfg.sampling.water_um = 2.0;
            cfg
        }

        fn applicable(cfg: &SimConfig, plan: &Plan) -> Vec<Param> {
            let ok = |p: Param| check_param(cfg, plan, p).is_ok();
            Param::ALL.into_iter().filter(|&p| ok(p)).collect()
        }

        /// The contracted images against the parameter-carrying renderer's,
        /// plane by plane, relative to each plane's largest value; every plane
        /// must have something in it.
        fn compare(cfg: &SimConfig, bound: f64) {
            let plan = Plan::new(cfg, SEEDS).unwrap();
            let params = applicable(cfg, &plan);
            let (image, want) =
                chunked_images(cfg, &plan, SEEDS, &params, Precision::Fast64).unwrap();
            let mut want_all = vec![image.unwrap()];
            want_all.extend(want);
            for level in [SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512] {
                for subset in [&params[..], &params[..1], &params[params.len() - 1..]] {
                    let got =
                        contracted(cfg, &plan, subset, level).expect("the contraction applies");
                    let idx = |p: &Param| 1 + params.iter().position(|q| q == p).unwrap();
                    let names = std::iter::once("image".to_string())
                        .chain(subset.iter().map(|p| p.to_string()));
                    let planes = std::iter::once(0).chain(subset.iter().map(idx));
                    for ((g, w), name) in got.iter().zip(planes).zip(names) {
                        let w = &want_all[w];
                        let max = w.iter().fold(0f32, |m, v| m.max(v.abs())) as f64;
                        assert!(max > 0.0, "{name}: empty");
                        let err = g
                            .iter()
                            .zip(w)
                            .fold(0f64, |m, (a, b)| m.max((*a as f64 - *b as f64).abs()));
                        assert!(err <= bound * max, "{level:?} {name}: {err} of {max}");
                    }
                }
            }
        }

        fn contracted(
            cfg: &SimConfig,
            plan: &Plan,
            params: &[Param],
            level: SimdLevel,
        ) -> Option<Vec<Vec<f32>>> {
            contracted_images_on(cfg, plan, SEEDS, params, level).unwrap()
        }

        #[test]
        fn triclinic_with_mosaic_phi_and_polarization() {
            let mut cfg = base();
            cfg.crystal.mosaic_deg = 0.4;
            cfg.crystal.mosaic_domains = 3;
            cfg.crystal.phi0_deg = 5.0;
            cfg.crystal.osc_deg = 0.6;
            cfg.crystal.phisteps = 2;
            cfg.beam.kahn_factor = 0.8;
            cfg.sampling.water_um = 5.0;
            compare(&cfg, 1e-6);
        }

        #[test]
        fn sources_oversampling_dmin_and_a_region() {
            let mut cfg = base();
            cfg.beam.dispersion_pct = 0.5;
            cfg.beam.dispsteps = 2;
            cfg.beam.hdivrange_mrad = 1.0;
            cfg.beam.vdivrange_mrad = 1.0;
            cfg.beam.hdivsteps = 2;
            cfg.beam.vdivsteps = 1;
            cfg.sampling.oversample = 2;
            cfg.sampling.dmin_a = 4.0;
            cfg.detector.roi = Some([2, 33, 1, 27]);
            cfg.detector.mask = Some((0..37 * 29).map(|i| (i % 5 != 2) as u16).collect());
            compare(&cfg, 1e-6);
        }

        #[test]
        fn round_spots_hkl_interpolation_and_point_pixels() {
            let mut cfg = base();
            cfg.crystal.shape = CrystalShape::Round;
            cfg.crystal.fudge = 1.3;
            cfg.detector.point_pixel = true;
            cfg.beam.nopolar = true;
            cfg.sf.source = SfSource::Hkl(crate::sf::test_entries(3, 3));
            cfg.sf.interpolate = Some(true);
            compare(&cfg, 1e-6);
        }

        #[test]
        fn the_contraction_declines_what_it_does_not_cover() {
            for change in [
                (|c: &mut SimConfig| c.detector.curved = true) as fn(&mut SimConfig),
                |c| c.sampling.oversample_polar = true,
                |c| {
                    c.detector.thick_um = 100.0;
                    c.detector.thicksteps = 2;
                },
                |c| c.crystal.shape = CrystalShape::Gauss,
            ] {
                let mut cfg = base();
                change(&mut cfg);
                let plan = Plan::new(&cfg, SEEDS).unwrap();
                let params = applicable(&cfg, &plan);
                assert!(contracted_images(&cfg, &plan, SEEDS, &params).unwrap().is_none());
            }
        }
    }
}
