//! A scalar loss of the rendered image against an observed one, its gradient
//! by chosen parameters and the curvature a standard error needs, built on
//! [`super::jacobian_with`] (one derivative image per parameter, then reduced).
//!
//! Losses, over the pixels used (inside the ROI, not masked by the plan, not
//! skipped by the caller), with μ the rendered pixel and k the observed one:
//! - [`LossKind::Sse`]: `Σ (μ − k)²`;
//! - [`LossKind::Poisson`]: the negative log-likelihood of counts k,
//!   `Σ μ − k ln μ` (the `ln k!` term dropped: it does not depend on the
//!   parameters). Below [`POISSON_FLOOR`] photons the term is continued by
//!   its second-order Taylor polynomial at the floor (finite, convex, with a
//!   continuous gradient), so a model pixel at or below 0 under a count
//!   gives a large finite loss, not infinity or NaN.
//!
//! See docs/refine.md.

use super::jacobian::jacobian_of;
use super::param::Param;
use crate::config::SimConfig;
use crate::error::{Error, Result};
use crate::render::cpu::{Precision, RenderOptions};
use crate::setup::{Plan, SetupSeeds};
use std::fmt;
use std::str::FromStr;

/// Model photons below which the Poisson term is continued quadratically.
pub const POISSON_FLOOR: f64 = 1e-6;

/// Which loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossKind {
    /// Sum of squared residuals.
    Sse,
    /// Poisson negative log-likelihood of the observed counts.
    Poisson,
}

impl LossKind {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            LossKind::Sse => "sse",
            LossKind::Poisson => "poisson",
        }
    }
}

impl fmt::Display for LossKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for LossKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<LossKind> {
        match s.trim().to_ascii_lowercase().as_str() {
            "sse" => Ok(LossKind::Sse),
            "poisson" => Ok(LossKind::Poisson),
            _ => Err(Error::Invalid {
                what: "-loss",
                msg: format!("unknown loss '{}' (known: sse, poisson)", crate::error::shown(s)),
            }),
        }
    }
}

/// The loss, its gradient and curvature at one set of parameter values.
#[derive(Debug, Clone)]
pub struct LossEval {
    /// Which loss.
    pub kind: LossKind,
    /// The parameters, in the order asked for.
    pub params: Vec<Param>,
    /// The loss.
    pub value: f64,
    /// d loss / d parameter, per unit of the flag ([`Param::unit`]).
    pub gradient: Vec<f64>,
    /// Gauss–Newton approximation of the loss's Hessian (row-major,
    /// `params.len()²`): `2 JᵀJ` for SSE, `Σ JᵢJⱼ/μ` (the Fisher information,
    /// the expected Hessian) for Poisson. Used to scale the parameters.
    pub hessian: Vec<f64>,
    /// Fisher information of the parameters (row-major): `JᵀJ / σ²` for SSE
    /// (Gaussian residuals of one variance σ², estimated as [`Self::sigma2`]),
    /// `Σ JᵢJⱼ/μ` for Poisson. Its inverse is the covariance of the estimates
    /// at the optimum (see [`Self::covariance`]).
    pub information: Vec<f64>,
    /// SSE: residual variance `Σ r² / (n − p)` (0 when n ≤ p); Poisson: 1.
    pub sigma2: f64,
    /// Pixels that entered the loss.
    pub pixels: usize,
    /// The rendered image (photons per pixel, the exact f64 render rounded to f32).
    pub image: Vec<f32>,
}

impl LossEval {
    /// The covariance of the parameter estimates (row-major, per unit² of
    /// the flags), the inverse of [`Self::information`]; `None` where the
    /// information is singular (a parameter with no effect, or two with the
    /// same effect). Meaningful at the optimum of the loss.
    pub fn covariance(&self) -> Option<Vec<f64>> {
        let n = self.params.len();
        if self.kind == LossKind::Sse {
            // σ² (JᵀJ)⁻¹, without dividing by a σ² that may be 0
            let jtj: Vec<f64> = self.hessian.iter().map(|h| h / 2.0).collect();
            return spd_inverse(&jtj, n).map(|c| c.iter().map(|x| x * self.sigma2).collect());
        }
        spd_inverse(&self.information, n)
    }

    /// Standard errors of the parameters (square roots of the covariance's
    /// diagonal), per unit of the flag; `None` as for [`Self::covariance`].
    pub fn standard_errors(&self) -> Option<Vec<f64>> {
        let n = self.params.len();
        self.covariance().map(|c| (0..n).map(|i| c[i * n + i].max(0.0).sqrt()).collect())
    }
}

/// Which pixels of `plan`'s image a loss uses: inside the ROI, not masked by
/// the plan (`-mask`), and not `skip`ped by the caller (`skip[i]` true skips
/// pixel `i`, e.g. saturated observed pixels).
pub fn pixels_used(plan: &Plan, skip: Option<&[bool]>) -> Vec<bool> {
    let (fp, sp) = (plan.detector.fpixels, plan.detector.spixels);
    let roi = plan.detector.roi;
    let mut used = vec![false; fp * sp];
    for s in 0..sp {
        if (s as i64) < roi[2] || (s as i64) > roi[3] {
            continue;
        }
        for f in 0..fp {
            if (f as i64) < roi[0] || (f as i64) > roi[1] {
                continue;
            }
            let i = s * fp + f;
            let masked = plan.mask.as_ref().is_some_and(|m| m[i] == 0);
            let skipped = skip.is_some_and(|k| k[i]);
            used[i] = !masked && !skipped;
        }
    }
    used
}

/// The loss of `cfg`'s image against `observed` (same layout as the image)
/// and its gradient by `params`, from one [`super::jacobian_with`]. `skip` (true =
/// skip) adds to the plan's ROI and mask.
pub fn loss_gradient(
    cfg: &SimConfig,
    params: &[Param],
    seeds: SetupSeeds,
    opts: RenderOptions,
    kind: LossKind,
    observed: &[f32],
    skip: Option<&[bool]>,
) -> Result<LossEval> {
    let plan = Plan::new(cfg, seeds)?;
    let n = plan.detector.fpixels * plan.detector.spixels;
    let size_error = |what: &str, len: usize| Error::Invalid {
        what: "-observed",
        msg: format!(
            "{what} has {len} pixels but the detector has {n} ({} x {})",
            plan.detector.fpixels, plan.detector.spixels
        ),
    };
    if observed.len() != n {
        return Err(size_error("the observed image", observed.len()));
    }
    if let Some(s) = skip.filter(|s| s.len() != n) {
        return Err(size_error("the pixel skip mask", s.len()));
    }
    let used = pixels_used(&plan, skip);
    check_observed(kind, observed, &used)?;
    let j = jacobian_of(cfg, &plan, params, seeds, opts, Precision::Fast64)?;
    Ok(evaluate(kind, &j.image, &j.derivatives, params, observed, &used))
}

/// Refuses an observed image the loss cannot take, among the `used`
/// pixels: a value that is not finite, or (Poisson) a negative count.
pub fn check_observed(kind: LossKind, observed: &[f32], used: &[bool]) -> Result<()> {
    let bad =
        |why: &dyn Fn(f32) -> bool| observed.iter().zip(used).position(|(&v, &u)| u && why(v));
    if let Some(i) = bad(&|v| !v.is_finite()) {
        return Err(Error::Invalid {
            what: "-observed",
            msg: format!(
                "the image holds {} at pixel {i}: a loss needs finite values",
                observed[i]
            ),
        });
    }
    if kind == LossKind::Poisson {
        if let Some(i) = bad(&|v| v < 0.0) {
            return Err(Error::Invalid {
                what: "-observed",
                msg: format!(
                    "the image holds {} at pixel {i}: a Poisson loss takes counts >= 0 (skip the \
                     pixel, or use the sse loss)",
                    observed[i]
                ),
            });
        }
    }
    Ok(())
}

/// The loss of a rendered `image` with its `derivatives` (one image per
/// parameter, as [`super::jacobian_with`] returns them) against `observed`, over the
/// pixels where `used` is true.
pub fn evaluate(
    kind: LossKind,
    image: &[f32],
    derivatives: &[Vec<f32>],
    params: &[Param],
    observed: &[f32],
    used: &[bool],
) -> LossEval {
    let p = params.len();
    let mut value = 0.0f64;
    let mut gradient = vec![0.0f64; p];
    // Σ w JᵢJⱼ with w = 1 (SSE) or 1/μ (Poisson), upper triangle
    let mut weighted = vec![0.0f64; p * p];
    let mut pixels = 0usize;
    let mut jac = vec![0.0f64; p];
    for i in (0..image.len()).filter(|&i| used[i]) {
        pixels += 1;
        let mu = image[i] as f64;
        let k = observed[i] as f64;
        for (q, d) in derivatives.iter().enumerate() {
            jac[q] = d[i] as f64;
        }
        let (term, slope, w) = match kind {
            LossKind::Sse => {
                let r = mu - k;
                (r * r, 2.0 * r, 1.0)
            }
            LossKind::Poisson => {
                let (t, s) = poisson_term(mu, k);
                (t, s, 1.0 / mu.max(POISSON_FLOOR))
            }
        };
        value += term;
        for q in 0..p {
            gradient[q] += slope * jac[q];
            for r in q..p {
                weighted[q * p + r] += w * jac[q] * jac[r];
            }
        }
    }
    for q in 0..p {
        for r in 0..q {
            weighted[q * p + r] = weighted[r * p + q];
        }
    }
    let (hessian, information, sigma2) = match kind {
        LossKind::Sse => {
            let dof = pixels.saturating_sub(p);
            let sigma2 = if dof > 0 { value / dof as f64 } else { 0.0 };
            let info = weighted.iter().map(|x| x / sigma2.max(f64::MIN_POSITIVE)).collect();
            (weighted.iter().map(|x| 2.0 * x).collect(), info, sigma2)
        }
        LossKind::Poisson => (weighted.clone(), weighted, 1.0),
    };
    LossEval {
        kind,
        params: params.to_vec(),
        value,
        gradient,
        hessian,
        information,
        sigma2,
        pixels,
        image: image.to_vec(),
    }
}

/// The loss alone for model pixels `model` (no derivatives), over `used`.
pub fn loss_value(kind: LossKind, model: &[f64], observed: &[f32], used: &[bool]) -> f64 {
    let mut v = 0.0;
    for i in (0..model.len()).filter(|&i| used[i]) {
        let (mu, k) = (model[i], observed[i] as f64);
        v += match kind {
            LossKind::Sse => (mu - k) * (mu - k),
            LossKind::Poisson => poisson_term(mu, k).0,
        };
    }
    v
}

/// `μ − k ln μ` and its derivative by μ, continued below the floor by the
/// second-order Taylor polynomial at the floor.
fn poisson_term(mu: f64, k: f64) -> (f64, f64) {
    if mu >= POISSON_FLOOR {
        return (if k == 0.0 { mu } else { mu - k * mu.ln() }, 1.0 - k / mu);
    }
    let e = POISSON_FLOOR;
    let (f0, f1, f2) = (e - k * e.ln(), 1.0 - k / e, k / (e * e));
    let d = mu - e;
    (f0 + f1 * d + 0.5 * f2 * d * d, f1 + f2 * d)
}

/// Inverse of a symmetric positive-definite `n × n` matrix (row-major) by
/// Cholesky; `None` when it is not positive definite. Each row and column is
/// first scaled to a unit diagonal so that parameters in very different
/// units do not look singular.
pub fn spd_inverse(a: &[f64], n: usize) -> Option<Vec<f64>> {
    let d: Vec<f64> = (0..n).map(|i| a[i * n + i]).collect();
    if d.iter().any(|&x| !(x > 0.0 && x.is_finite())) {
        return None;
    }
    let s: Vec<f64> = d.iter().map(|x| 1.0 / x.sqrt()).collect();
    let m: Vec<f64> = (0..n * n).map(|ij| a[ij] * s[ij / n] * s[ij % n]).collect();
    // m = L Lᵀ
    let mut l = vec![0.0f64; n * n];
    for i in 0..n {
        for j in 0..=i {
            let mut sum = m[i * n + j];
            for k in 0..j {
                sum -= l[i * n + k] * l[j * n + k];
            }
            if i == j {
                if sum.is_nan() || sum <= 1e-13 {
                    return None;
                }
                l[i * n + i] = sum.sqrt();
            } else {
                l[i * n + j] = sum / l[j * n + j];
            }
        }
    }
    // columns of m⁻¹ by forward and back substitution
    let mut inv = vec![0.0f64; n * n];
    for c in 0..n {
        let mut y = vec![0.0f64; n];
        for i in 0..n {
            let mut sum = if i == c { 1.0 } else { 0.0 };
            for k in 0..i {
                sum -= l[i * n + k] * y[k];
            }
            y[i] = sum / l[i * n + i];
        }
        for i in (0..n).rev() {
            let mut sum = y[i];
            for k in i + 1..n {
                sum -= l[k * n + i] * inv[k * n + c];
            }
            inv[i * n + c] = sum / l[i * n + i];
        }
    }
    Some((0..n * n).map(|ij| inv[ij] * s[ij / n] * s[ij % n]).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::kernel::{Exact, Kernel};

    const SEEDS: SetupSeeds = SetupSeeds { misset_idum: -1 };

    /// The exact f64 image (no rounding to f32), for finite differences.
    fn image_f64(cfg: &SimConfig) -> Vec<f64> {
        let plan = Plan::new(cfg, SEEDS).unwrap();
        let k = Kernel::<f64, Exact>::new(&plan);
        let (fp, sp) = (plan.detector.fpixels, plan.detector.spixels);
        let mut interp = false;
        (0..fp * sp).map(|i| k.pixel(i % fp, i / fp, &mut interp).value).collect()
    }

    fn cfg() -> SimConfig {
        let mut c = SimConfig::default();
        (c.detector.fpixels, c.detector.spixels) = (28, 24);
        c.detector.pixel_mm = 1.0;
        c.detector.distance_mm = 80.0;
        c.crystal.cell = Some([30.0, 34.0, 38.0, 88.0, 92.0, 95.0]);
        (c.crystal.na, c.crystal.nb, c.crystal.nc) = (4.0, 5.0, 6.0);
        c.crystal.phi0_deg = 20.0; // (misset angles would stop Param::nudged for misset_*)
        c.sf.default_f = 30.0;
        c
    }

    /// Gradient of both losses against central differences of the loss of
    /// f64 renders, observed image = the model moved away from `cfg`.
    #[test]
    fn gradient_matches_finite_differences() {
        let truth = cfg();
        let mut start = truth.clone();
        start.detector.distance_mm += 0.7;
        start.crystal.na += 0.4; // fractional N: continuous spots
        start.detector.rotx_deg = 0.2;
        // observed: the truth, rounded to whole counts (the Poisson case)
        let observed: Vec<f32> = image_f64(&truth).iter().map(|x| x.round() as f32).collect();
        let plan = Plan::new(&start, SEEDS).unwrap();
        // skip a block of pixels and take the ROI from the config
        let mut skip = vec![false; observed.len()];
        skip[100..140].iter_mut().for_each(|s| *s = true);
        let mut roi_cfg = start.clone();
        roi_cfg.detector.roi = Some([2, 25, 1, 22]);
        let params = [
            Param::Distance,
            Param::DetectorRotX,
            Param::CellA,
            Param::CellGamma,
            Param::MissetY,
            Param::Na,
        ];
        for kind in [LossKind::Sse, LossKind::Poisson] {
            for c in [&start, &roi_cfg] {
                let opts = RenderOptions::default();
                let ev =
                    loss_gradient(c, &params, SEEDS, opts, kind, &observed, Some(&skip)).unwrap();
                let used = pixels_used(&Plan::new(c, SEEDS).unwrap(), Some(&skip));
                let n_used = used.iter().filter(|&&u| u).count();
                assert_eq!(ev.pixels, n_used);
                assert!(n_used <= observed.len() - 40);
                let v0 = loss_value(kind, &image_f64(c), &observed, &used);
                assert!((ev.value - v0).abs() <= 1e-6 * v0.abs(), "{kind}: {} vs {v0}", ev.value);
                let fd: Vec<f64> = params
                    .iter()
                    .map(|&p| {
                        let h = 1e-4;
                        let at = |h: f64| {
                            let moved = p.nudged(c, &plan, h).unwrap();
                            loss_value(kind, &image_f64(&moved), &observed, &used)
                        };
                        (at(h) - at(-h)) / (2.0 * h)
                    })
                    .collect();
                // per unit of the flags: compare against the largest component
                // (f32 pixels and derivatives round each term to ~1e-7)
                let scale = fd.iter().fold(0.0f64, |m, x| m.max(x.abs()));
                for (q, &p) in params.iter().enumerate() {
                    let (g, fd) = (ev.gradient[q], fd[q]);
                    assert!(
                        (g - fd).abs() <= 1e-5 * scale,
                        "{kind} {p}: gradient {g} vs finite difference {fd} (largest {scale})"
                    );
                }
            }
        }
    }

    #[test]
    fn poisson_term_is_continued_below_the_floor() {
        // smooth at the floor, finite and decreasing towards it below
        let e = POISSON_FLOOR;
        let (a, da) = poisson_term(e * (1.0 + 1e-9), 3.0);
        let (b, db) = poisson_term(e * (1.0 - 1e-9), 3.0);
        assert!((a - b).abs() < 1e-6 * a.abs() && (da - db).abs() < 1e-6 * da.abs());
        let (z, dz) = poisson_term(0.0, 3.0);
        let (m, _) = poisson_term(-1.0, 3.0);
        assert!(z.is_finite() && m > z && dz < 0.0);
        // no count: the term is μ itself
        assert_eq!(poisson_term(2.5, 0.0), (2.5, 1.0));
        assert_eq!(poisson_term(-2.0, 0.0).0, -2.0);
    }

    #[test]
    fn information_and_standard_errors() {
        // two parameters, Poisson: information Σ JᵢJⱼ/μ, covariance its inverse
        let image = [4.0f32, 9.0, 1.0];
        let ders = vec![vec![1.0f32, 2.0, 0.5], vec![0.0f32, 1.0, 3.0]];
        let params = [Param::Distance, Param::Na];
        let used = [true; 3];
        let ev = evaluate(LossKind::Poisson, &image, &ders, &params, &image, &used);
        let i00 = 1.0 / 4.0 + 4.0 / 9.0 + 0.25;
        let i01 = 2.0 / 9.0 + 1.5;
        let i11 = 1.0 / 9.0 + 9.0;
        for (a, b) in ev.information.iter().zip([i00, i01, i01, i11]) {
            assert!((a - b).abs() < 1e-12);
        }
        // at a perfect fit the gradient is zero
        assert!(ev.gradient.iter().all(|g| g.abs() < 1e-12));
        let cov = ev.covariance().unwrap();
        let det = i00 * i11 - i01 * i01;
        assert!((cov[0] - i11 / det).abs() < 1e-12 && (cov[1] + i01 / det).abs() < 1e-12);
        let se = ev.standard_errors().unwrap();
        assert!((se[1] - (i00 / det).sqrt()).abs() < 1e-12);
        // SSE: σ² from the residuals, covariance σ² (JᵀJ)⁻¹
        let observed = [5.0f32, 8.0, 1.5];
        let ev = evaluate(LossKind::Sse, &image, &ders, &params, &observed, &used);
        assert_eq!(ev.value, 1.0 + 1.0 + 0.25);
        assert_eq!(ev.sigma2, 2.25 / 1.0);
        assert_eq!(ev.gradient, vec![2.0 * (-1.0 + 2.0 - 0.25), 2.0 * (1.0 - 1.5)]);
        let cov = ev.covariance().unwrap();
        let (j00, j01, j11) = (1.0 + 4.0 + 0.25, 2.0 + 1.5, 1.0 + 9.0);
        let det = j00 * j11 - j01 * j01;
        assert!((cov[3] - 2.25 * j00 / det).abs() < 1e-12);
        // a parameter with no effect: no covariance
        let flat = vec![vec![1.0f32, 2.0, 0.5], vec![0.0f32; 3]];
        let ev = evaluate(LossKind::Poisson, &image, &flat, &params, &image, &used);
        assert!(ev.covariance().is_none());
    }

    #[test]
    fn size_mismatch_is_an_error() {
        let c = cfg();
        let e = loss_gradient(
            &c,
            &[Param::Distance],
            SEEDS,
            RenderOptions::default(),
            LossKind::Sse,
            &[0.0; 10],
            None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("has 10 pixels but the detector has 672"), "{e}");
        assert_eq!("Poisson".parse::<LossKind>().unwrap(), LossKind::Poisson);
        assert!("l1".parse::<LossKind>().is_err());
    }
}
