//! Derivative images: every pixel differentiated by chosen parameters with
//! forward-mode dual numbers through the exact render kernel.

use super::contract::{contracted_images, contracted_vjp};
use super::dual::{seeded, Dense64};
use super::lanes::{render_dense32, render_dense64};
use super::leaves::{check_param, Leaves};
use super::param::Param;
use crate::config::SimConfig;
use crate::error::{Error, Result};
use crate::render::cpu::{in_pool, render, Precision, RenderOptions};
use crate::setup::{Plan, SetupSeeds};
use Precision::Fast64;

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
            None => render::<f32>(plan, RenderOptions::new(Precision::Exact64).threads(0)).image,
        };
        Ok(Jacobian { image, params: params.to_vec(), derivatives })
    })
}

/// The image and a product of the Jacobian with a vector (forward mode).
#[derive(Debug, Clone)]
pub struct Products {
    /// Photons per pixel (f64 kernels, rounded to f32).
    pub image: Vec<f32>,
    /// `J·t` (one number per pixel).
    pub values: Vec<f64>,
}

/// The weights `v` of a product `Jᵀv`.
#[derive(Debug, Clone, Copy)]
pub enum Weights<'a> {
    /// One weight per pixel, fast index fastest.
    PerPixel(&'a [f64]),
    /// The same weight for every pixel: the gradient of the image's sum,
    /// which torch hands over as one number broadcast (a 1024² image of it
    /// is 8 MB to write and read again).
    Uniform(f64),
}

impl Weights<'_> {
    /// The weight of pixel `i`.
    #[inline(always)]
    pub fn at(&self, i: usize) -> f64 {
        match self {
            Weights::PerPixel(v) => v[i],
            Weights::Uniform(w) => *w,
        }
    }
}

/// `Jᵀv`: `Σ_pixels v · d pixel / d parameter` for each of `params` (per
/// unit of the flag), `v` the weights of the pixels (pixels outside the
/// ROI or masked do not count). Where the contracted renderer applies, no image is
/// formed, the photons' or a derivative's (see [`super::contract`]: a
/// backward pass has the image from its forward pass); elsewhere the
/// derivative images are rendered eight parameters at a time and weighted.
/// Independent of the thread count.
pub fn vjp_of(
    cfg: &SimConfig,
    plan: &Plan,
    params: &[Param],
    seeds: SetupSeeds,
    opts: RenderOptions,
    v: Weights<'_>,
) -> Result<Vec<f64>> {
    if let Weights::PerPixel(v) = v {
        check_length(plan, v.len(), "the weights v")?;
    }
    for &p in params {
        check_param(cfg, plan, p)?;
    }
    in_pool(opts.threads, || {
        if let Some(values) = contracted_vjp(cfg, plan, seeds, params, v)? {
            return Ok(values);
        }
        let mut values = Vec::with_capacity(params.len());
        let used = super::loss::pixels_used(plan, None);
        for chunk in params.chunks(8) {
            let j = jacobian_of(cfg, plan, chunk, seeds, RenderOptions::default(), Fast64)?;
            values.extend(j.derivatives.iter().map(|d| weighted_sum(d, v, &used)));
        }
        Ok(values)
    })
}

/// The image of `plan` and `J·t`: `Σ_params t · d pixel / d parameter` for
/// each pixel, the derivative of the image along the direction `t` (one
/// number per parameter, per unit of its flag). The derivative images are
/// rendered eight parameters at a time and summed.
pub fn jvp_of(
    cfg: &SimConfig,
    plan: &Plan,
    params: &[Param],
    seeds: SetupSeeds,
    opts: RenderOptions,
    t: &[f64],
) -> Result<Products> {
    if t.len() != params.len() {
        return Err(Error::Invalid {
            what: "jvp",
            msg: format!("{} tangents for {} parameters", t.len(), params.len()),
        });
    }
    let n = plan.detector.fpixels * plan.detector.spixels;
    let mut values = vec![0.0f64; n];
    let mut image = None;
    for (chunk, tc) in params.chunks(8).zip(t.chunks(8)) {
        let j = jacobian_of(cfg, plan, chunk, seeds, opts, Fast64)?;
        for (d, &tp) in j.derivatives.iter().zip(tc) {
            for (o, &x) in values.iter_mut().zip(d) {
                *o += tp * x as f64;
            }
        }
        image.get_or_insert(j.image);
    }
    let image = match image {
        Some(i) => i,
        None => in_pool(opts.threads, || {
            render::<f32>(plan, RenderOptions::new(Precision::Exact64)).image
        }),
    };
    Ok(Products { image, values })
}

/// `Σ d·v` over the pixels `used`, in a fixed order (a weight outside them
/// may be anything, NaN included).
fn weighted_sum(d: &[f32], v: Weights<'_>, used: &[bool]) -> f64 {
    let on = d.iter().zip(used).enumerate().filter(|(_, (_, &u))| u);
    on.map(|(i, (&d, _))| d as f64 * v.at(i)).sum()
}

/// An error unless `len` is the plan's pixel count.
fn check_length(plan: &Plan, len: usize, what: &str) -> Result<()> {
    let (fp, sp) = (plan.detector.fpixels, plan.detector.spixels);
    if len == fp * sp {
        return Ok(());
    }
    Err(Error::Invalid {
        what: "vjp",
        msg: format!("{what} have {len} values but the detector has {} ({fp} x {sp})", fp * sp),
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
        let one = jacobian_with(&cfg, &params, seeds, RenderOptions::default().threads(1)).unwrap();
        let three =
            jacobian_with(&cfg, &params, seeds, RenderOptions::default().threads(3)).unwrap();
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
        let exact = render::<f32>(&plan, RenderOptions::new(Precision::Exact64)).image;
        for (a, b) in one.image.iter().zip(&exact) {
            assert!((a - b).abs() <= 1e-6 * b.abs());
        }
    }

    /// The contracted derivatives against the parameter-carrying renderer.
    mod contraction {
        use super::*;
        use crate::config::{CrystalShape, SfSource};
        use crate::diff::contract::{contracted_images, contracted_images_on, contracted_vjp};
        use crate::diff::jacobian::Weights::{PerPixel, Uniform};
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
        /// plane by plane, relative to each plane's largest value, for all
        /// parameters at once and each alone; every plane must have something
        /// in it.
        fn compare(cfg: &SimConfig, bound: f64) {
            let plan = Plan::new(cfg, SEEDS).unwrap();
            let params = applicable(cfg, &plan);
            let (image, want) =
                chunked_images(cfg, &plan, SEEDS, &params, Precision::Fast64).unwrap();
            let mut want_all = vec![image.unwrap()];
            want_all.extend(want);
            for level in [SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512] {
                // every parameter alone too: one that moves the detector
                // alone carries the position's derivative along itself; and
                // a usual refinement's (the narrower duals of its size)
                let alone = (0..params.len()).map(|i| &params[i..i + 1]);
                let usual = [Param::Distance, Param::CellA, Param::CellB, Param::Lambda];
                let usual: Vec<Param> = usual.into_iter().filter(|p| params.contains(p)).collect();
                for subset in [&params[..], &usual[..]].into_iter().chain(alone) {
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

        /// Square spots whose three factors are taken together (one parity,
        /// N ≤ 9: odd with 5 coefficients, even with 3).
        #[test]
        fn square_spots_of_one_parity() {
            for n in [[3.0, 5.0, 9.0], [2.0, 4.0, 6.0]] {
                let mut cfg = base();
                [cfg.crystal.na, cfg.crystal.nb, cfg.crystal.nc] = n;
                compare(&cfg, 1e-6);
            }
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
            cfg.sf.source = SfSource::Hkl(crate::sf::test_entries(3, 3).into());
            cfg.sf.interpolate = Some(true);
            compare(&cfg, 1e-6);
        }

        /// `Jᵀv` and `J·t` against the derivative images of the
        /// parameter-carrying renderer, with and without the contraction
        /// (a curved detector), through a region, a mask and a tricubic
        /// fallback; `Jᵀv` does not depend on the threads.
        #[test]
        fn vector_products_are_those_of_the_derivative_images() {
            let mut mosaic = base();
            mosaic.crystal.mosaic_deg = 0.4;
            mosaic.crystal.mosaic_domains = 3;
            mosaic.detector.roi = Some([2, 33, 1, 27]);
            mosaic.detector.mask = Some((0..37 * 29).map(|i| (i % 5 != 2) as u16).collect());
            let mut grid = base();
            grid.sf.source = SfSource::Hkl(crate::sf::test_entries(3, 3).into());
            grid.sf.interpolate = Some(true);
            let mut curved = base();
            curved.detector.curved = true;
            curved.detector.mask = mosaic.detector.mask.clone();
            for (cfg, contracted) in [(mosaic, true), (grid, true), (curved, false)] {
                let plan = Plan::new(&cfg, SEEDS).unwrap();
                let params = applicable(&cfg, &plan);
                let j = jacobian_of(&cfg, &plan, &params, SEEDS, RenderOptions::default(), Fast64)
                    .unwrap();
                let n = j.image.len();
                let used = crate::diff::loss::pixels_used(&plan, None);
                // weights outside the pixels used do not count, NaN included
                let v: Vec<f64> = (0..n)
                    .map(|i| if used[i] { ((i * 7919) % 13) as f64 - 6.0 } else { f64::NAN })
                    .collect();
                let t: Vec<f64> = (0..params.len()).map(|p| 0.5 - (p % 3) as f64).collect();
                let one = RenderOptions::default().threads(1);
                let vjp = vjp_of(&cfg, &plan, &params, SEEDS, one, PerPixel(&v)).unwrap();
                let two = RenderOptions::default().threads(2);
                let two = vjp_of(&cfg, &plan, &params, SEEDS, two, PerPixel(&v));
                assert_eq!(vjp, two.unwrap(), "threads");
                // one weight for every pixel: the same sums as that weight in each
                let same = vjp_of(&cfg, &plan, &params, SEEDS, one, PerPixel(&vec![-2.5; n]));
                let uniform = vjp_of(&cfg, &plan, &params, SEEDS, one, Uniform(-2.5)).unwrap();
                assert_eq!(same.unwrap(), uniform, "uniform");
                for (k, d) in j.derivatives.iter().enumerate() {
                    let on = |&i: &usize| used[i];
                    let want: f64 = (0..n).filter(on).map(|i| d[i] as f64 * v[i]).sum();
                    let scale: f64 = (0..n).filter(on).map(|i| (d[i] as f64 * v[i]).abs()).sum();
                    let err = (vjp[k] - want).abs();
                    assert!(scale > 0.0 && err <= 1e-6 * scale, "{}: {err} of {scale}", params[k]);
                }
                let jvp = jvp_of(&cfg, &plan, &params, SEEDS, one, &t).unwrap();
                for i in 0..n {
                    let want: f64 =
                        j.derivatives.iter().zip(&t).map(|(d, t)| d[i] as f64 * t).sum();
                    let scale: f64 = j.derivatives.iter().map(|d| d[i].abs() as f64).sum();
                    assert!((jvp.values[i] - want).abs() <= 1e-6 * scale.max(1e-30), "pixel {i}");
                }
                let fits = contracted_vjp(&cfg, &plan, SEEDS, &params, PerPixel(&v));
                let fits = fits.unwrap().is_some();
                assert_eq!(fits, contracted);
            }
            let plan = Plan::new(&base(), SEEDS).unwrap();
            let short = vjp_of(
                &base(),
                &plan,
                &[Param::Distance],
                SEEDS,
                Default::default(),
                PerPixel(&[1.0]),
            );
            assert!(short.unwrap_err().to_string().contains("1 values"));
        }

        /// The direct beam on a pixel's centre, where h, k and l are about
        /// 0 and the quotient rule's slopes of `sin(Nπh)/sin(πh)` and
        /// `sinc3` are rounding noise: the pixel's derivatives by the beam
        /// centre are 0 there (the lattice factor, the solid angle and the
        /// polarization are all at their extremes), for whole N (the
        /// contraction's polynomials), larger and fractional N (the exact
        /// factor in both renderers) and round spots; and the two
        /// renderers agree on every pixel.
        #[test]
        fn the_direct_beam_on_a_pixel() {
            let shapes = [
                ([5.0, 6.0, 7.0], CrystalShape::Square),
                ([12.0, 12.0, 12.0], CrystalShape::Square),
                ([7.5, 6.0, 5.0], CrystalShape::Square),
                ([5.0, 6.0, 7.0], CrystalShape::Round),
            ];
            // the beam centre (mm) and the pixel it lies on: the default
            // centre, rounded off it by 1e-12 of a pixel and less, and another
            let beams = [(7.5, 9.5, 574), (7.5 + 4e-12, 9.5 - 1e-13, 574), (9.5, 7.5, 718)];
            for (n, shape) in shapes {
                let mut cfg = base();
                [cfg.crystal.na, cfg.crystal.nb, cfg.crystal.nc] = n;
                cfg.crystal.shape = shape;
                // (sub-pixels about the beam would each have a slope)
                cfg.sampling.oversample = 1;
                for (x, y, pixel) in beams {
                    (cfg.detector.xbeam_mm, cfg.detector.ybeam_mm) = (Some(x), Some(y));
                    let plan = Plan::new(&cfg, SEEDS).unwrap();
                    let params = [Param::Xbeam, Param::Ybeam];
                    let (image, planes) =
                        chunked_images(&cfg, &plan, SEEDS, &params, Precision::Fast64).unwrap();
                    let image = image.unwrap();
                    let peak = (0..image.len()).max_by(|&a, &b| image[a].total_cmp(&image[b]));
                    assert_eq!(peak, Some(pixel), "{n:?} {shape:?} {x} {y}: the direct beam");
                    for (p, plane) in params.iter().zip(&planes) {
                        let max = plane.iter().fold(0f32, |m, v| m.max(v.abs()));
                        let at = plane[pixel];
                        assert!(
                            at.abs() <= 1e-9 * max,
                            "{n:?} {shape:?} {x} {y} {p}: {at} of {max}"
                        );
                    }
                }
                compare(&cfg, 1e-6);
            }
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
