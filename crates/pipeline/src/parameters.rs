//! Chosen parameters of a model ([`Param`]s, named like the flags) as
//! numbers: their values in a configuration, the configuration at other
//! values, and the image's derivatives by them. `refine` and the Python
//! package (`nanobragg.torch`) work through it.
//!
//! The value of `misset_x/y/z` is the `-misset` angle (rotations about x,
//! then y, then z); the engine differentiates by small rotations about the
//! lab axes after the orientation, and [`Parameters::chain`] maps one to the
//! other.

use anyhow::{anyhow, bail, Result};
use nanobragg_core::config::Misset;
use nanobragg_core::diff::leaves::check_param;
use nanobragg_core::diff::loss::{loss_gradient, LossEval, LossKind};
use nanobragg_core::diff::{jvp_of, sf_vjp_of, vjp_of, Param, SfProducts};
use nanobragg_core::render::{render_f64, Precision, RenderOptions};
use nanobragg_core::setup::{Plan, SetupSeeds};
use nanobragg_core::SimConfig;

/// The message of a library error without its `invalid -gradient:` prefix.
pub(crate) fn message(e: &nanobragg_core::Error) -> String {
    match e {
        nanobragg_core::Error::Invalid { msg, .. } => msg.clone(),
        e => e.to_string(),
    }
}

pub(crate) const MISSETS: [Param; 3] = [Param::MissetX, Param::MissetY, Param::MissetZ];

/// Chosen parameters of a model as numbers, and the configuration they give.
#[derive(Debug, Clone)]
pub struct Parameters {
    pub(crate) cfg0: SimConfig,
    pub(crate) plan0: Plan,
    seeds: SetupSeeds,
    pub(crate) params: Vec<Param>,
    pub(crate) start: Vec<f64>,
    /// Parameters the Jacobian is taken by: the chosen ones, with the three
    /// crystal rotations in place of any `misset_*`.
    query: Vec<Param>,
}

impl Parameters {
    /// `params` of the model `cfg0` (rendered with `seeds`). The automatic
    /// oversampling of `cfg0`'s plan is kept for every value.
    pub fn new(mut cfg0: SimConfig, seeds: SetupSeeds, params: Vec<Param>) -> Result<Self> {
        let plan0 = Plan::new(&cfg0, seeds)?;
        // The automatic oversampling is a whole number that jumps with the
        // geometry (distance, cell, N): the fit keeps the starting model's.
        if plan0.oversample_auto {
            cfg0.sampling.oversample = plan0.oversample as i64;
        }
        let mut start = Vec::new();
        for &p in &params {
            check_param(&cfg0, &plan0, p).map_err(|e| anyhow!("{}", message(&e)))?;
            start.push(start_value(&cfg0, &plan0, p)?);
        }
        let mut query: Vec<Param> =
            params.iter().copied().filter(|p| !MISSETS.contains(p)).collect();
        if params.iter().any(|p| MISSETS.contains(p)) {
            query.extend(MISSETS);
        }
        Ok(Parameters { cfg0, plan0, seeds, params, start, query })
    }

    /// The configuration with the parameters at `values`.
    pub fn config(&self, values: &[f64]) -> Result<SimConfig> {
        if values.len() != self.params.len() {
            bail!("{} values for {} parameters", values.len(), self.params.len());
        }
        let mut cfg = self.cfg0.clone();
        let mut misset = misset_angles(&self.cfg0);
        for ((&p, &v), &s) in self.params.iter().zip(values).zip(&self.start) {
            if let Some(i) = MISSETS.iter().position(|&m| m == p) {
                misset[i] = v;
            } else if v != s {
                cfg = p.nudged(&cfg, &self.plan0, v - s)?;
            }
        }
        if self.params.iter().any(|p| MISSETS.contains(p)) {
            cfg.crystal.misset = Misset::Angles(misset);
        }
        Ok(cfg)
    }

    /// `d/d params = M · d/d query` (row-major `params × query`): the
    /// identity but for the misset angles. Their derivatives come as small
    /// rotations about the lab axes after the orientation; the angle ψx of
    /// `-misset` (rotations x, then y, then z) turns about Rz(ψz)·Ry(ψy)·x,
    /// ψy about Rz(ψz)·y, ψz about z.
    pub fn chain(&self, values: &[f64]) -> Vec<f64> {
        let (np, nq) = (self.params.len(), self.query.len());
        let mut m = vec![0.0; np * nq];
        let mut psi = misset_angles(&self.cfg0);
        for (&p, &v) in self.params.iter().zip(values) {
            if let Some(i) = MISSETS.iter().position(|&m| m == p) {
                psi[i] = v;
            }
        }
        let r = psi.map(f64::to_radians);
        let axes = [
            rot_z(rot_y([1.0, 0.0, 0.0], r[1]), r[2]),
            rot_z([0.0, 1.0, 0.0], r[2]),
            [0.0, 0.0, 1.0],
        ];
        for (i, &p) in self.params.iter().enumerate() {
            if let Some(a) = MISSETS.iter().position(|&m| m == p) {
                for (j, &q) in MISSETS.iter().enumerate() {
                    let col = self.query.iter().position(|&x| x == q).unwrap();
                    m[i * nq + col] = axes[a][j];
                }
            } else {
                m[i * nq + self.query.iter().position(|&x| x == p).unwrap()] = 1.0;
            }
        }
        m
    }

    /// The configuration and plan at `values`.
    fn at(&self, values: &[f64]) -> Result<(SimConfig, Plan)> {
        let cfg = self.config(values)?;
        let plan = Plan::new(&cfg, self.seeds)?;
        Ok((cfg, plan))
    }

    /// The plan at `values` (the geometry a set of values gives).
    pub fn plan_at(&self, values: &[f64]) -> Result<Plan> {
        Ok(self.at(values)?.1)
    }

    /// Derivatives by the query parameters turned into derivatives by the
    /// chosen ones at `values` ([`Parameters::chain`]).
    fn by_params(&self, values: &[f64], by_query: &[f64]) -> Vec<f64> {
        let m = self.chain(values);
        let nq = self.query.len();
        (0..self.params.len()).map(|i| (0..nq).map(|k| m[i * nq + k] * by_query[k]).sum()).collect()
    }

    /// The parameters, in the order given.
    pub fn params(&self) -> &[Param] {
        &self.params
    }

    /// Their values in the model they were chosen from.
    pub fn start(&self) -> &[f64] {
        &self.start
    }

    /// The plan of the model they were chosen from.
    pub fn plan(&self) -> &Plan {
        &self.plan0
    }

    /// The image at `values` in f64 (photons per pixel, before the rounding
    /// to f32 of the command line's float image).
    pub fn image(
        &self,
        values: &[f64],
        opts: RenderOptions,
        precision: Precision,
    ) -> Result<Vec<f64>> {
        let (_, plan) = self.at(values)?;
        Ok(render_f64(&plan, opts, precision).0)
    }

    /// `Jᵀv` at `values`: `Σ v · d pixel / d parameter` for each parameter
    /// (per unit of its flag), without forming the derivative images where
    /// the engine can ([`vjp_of`]).
    pub fn vjp(&self, values: &[f64], v: &[f64], opts: RenderOptions) -> Result<Vec<f64>> {
        let (cfg, plan) = self.at(values)?;
        let by_query = vjp_of(&cfg, &plan, &self.query, self.seeds, opts, v)?.values;
        Ok(self.by_params(values, &by_query))
    }

    /// The f64 image at `values` and `Σ v · d pixel / d F` for every value
    /// of the structure-factor grid ([`sf_vjp_of`]).
    pub fn sf_vjp(&self, values: &[f64], v: &[f64], opts: RenderOptions) -> Result<SfProducts> {
        let (_, plan) = self.at(values)?;
        Ok(sf_vjp_of(&plan, opts, v)?)
    }

    /// `J·t` at `values`: the derivative of every pixel along the direction
    /// `t` (one number per parameter, per unit of its flag).
    pub fn jvp(&self, values: &[f64], t: &[f64], opts: RenderOptions) -> Result<Vec<f64>> {
        if t.len() != self.params.len() {
            bail!("{} tangents for {} parameters", t.len(), self.params.len());
        }
        let (cfg, plan) = self.at(values)?;
        let m = self.chain(values);
        let nq = self.query.len();
        let tq: Vec<f64> =
            (0..nq).map(|k| (0..self.params.len()).map(|i| m[i * nq + k] * t[i]).sum()).collect();
        Ok(jvp_of(&cfg, &plan, &self.query, self.seeds, opts, &tq)?.values)
    }

    /// The loss of the image at `values` against `observed` and its
    /// gradient, Gauss–Newton Hessian and information by the parameters.
    pub fn loss(
        &self,
        values: &[f64],
        kind: LossKind,
        observed: &[f32],
        skip: Option<&[bool]>,
        opts: RenderOptions,
    ) -> Result<LossEval> {
        let cfg = self.config(values)?;
        let ev = loss_gradient(&cfg, &self.query, self.seeds, opts, kind, observed, skip)?;
        let m = self.chain(values);
        let (np, nq) = (self.params.len(), self.query.len());
        let gradient = self.by_params(values, &ev.gradient);
        let sandwich = |a: &[f64]| -> Vec<f64> {
            let mut out = vec![0.0; np * np];
            for i in 0..np {
                for j in 0..np {
                    let mut s = 0.0;
                    for k in 0..nq {
                        for l in 0..nq {
                            s += m[i * nq + k] * a[k * nq + l] * m[j * nq + l];
                        }
                    }
                    out[i * np + j] = s;
                }
            }
            out
        };
        Ok(LossEval {
            params: self.params.clone(),
            gradient,
            hessian: sandwich(&ev.hessian),
            information: sandwich(&ev.information),
            ..ev
        })
    }
}

fn rot_y(v: [f64; 3], a: f64) -> [f64; 3] {
    let (s, c) = a.sin_cos();
    [v[0] * c + v[2] * s, v[1], -v[0] * s + v[2] * c]
}

fn rot_z(v: [f64; 3], a: f64) -> [f64; 3] {
    let (s, c) = a.sin_cos();
    [v[0] * c - v[1] * s, v[0] * s + v[1] * c, v[2]]
}

pub(crate) fn misset_angles(cfg: &SimConfig) -> [f64; 3] {
    match cfg.crystal.misset {
        Misset::Angles(a) => a,
        _ => [0.0; 3],
    }
}

/// The value a parameter has in the run (what [`Param::nudged`] moves).
fn start_value(cfg: &SimConfig, plan: &Plan, p: Param) -> Result<f64> {
    let d = &cfg.detector;
    let det = &plan.detector;
    let cr = &cfg.crystal;
    Ok(match p {
        Param::Distance => d.distance_mm,
        Param::CloseDistance => {
            let ratio = det.close_distance_m / det.distance_m;
            d.close_distance_mm.unwrap_or((ratio * d.distance_mm).abs())
        }
        Param::Xbeam => d.xbeam_mm.unwrap_or(det.xbeam_m * 1000.0),
        Param::Ybeam => d.ybeam_mm.unwrap_or(det.ybeam_m * 1000.0),
        Param::DetectorRotX => d.rotx_deg,
        Param::DetectorRotY => d.roty_deg,
        Param::DetectorRotZ => d.rotz_deg,
        Param::Twotheta => d.twotheta_deg,
        Param::CellA
        | Param::CellB
        | Param::CellC
        | Param::CellAlpha
        | Param::CellBeta
        | Param::CellGamma => cr.cell.map(|c| c[p as usize - Param::CellA as usize]).unwrap_or(0.0),
        Param::MissetX | Param::MissetY | Param::MissetZ => {
            if cr.misset == Misset::Random {
                bail!("{p}: needs -misset angles (not random)");
            }
            misset_angles(cfg)[p as usize - Param::MissetX as usize]
        }
        Param::Na | Param::Nb | Param::Nc => {
            let i = p as usize - Param::Na as usize;
            if cr.size_mm[i] > 0.0 {
                bail!("{p}: the cell count comes from the crystal size (-xtalsize ...); give -N/-Na/-Nb/-Nc instead");
            }
            plan.n_cells[i]
        }
        Param::Mosaic => cr.mosaic_deg,
        Param::Phi => cr.phi0_deg,
        Param::Osc => cr.osc_deg,
        Param::Lambda => cfg.beam.lambda_a,
        Param::Dispersion => cfg.beam.dispersion_pct,
        Param::Divergence => cfg.beam.hdivrange_mrad,
        Param::Polar => cfg.beam.kahn_factor,
        Param::Fluence => plan.fluence,
        Param::Water => cfg.sampling.water_um,
        Param::DefaultF => cfg.sf.default_f,
        Param::Fudge => cr.fudge,
        Param::LambdaOffset => cfg.beam.lambda_offset_a,
        Param::LambdaScale => cfg.beam.lambda_scale,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misset_chain_rule_matches_the_composed_rotation() {
        // d/dψ of Rz Ry Rx(ψ) v against the generators about the lab axes
        let mut cfg = SimConfig::default();
        cfg.crystal.cell = Some([50.0, 50.0, 50.0, 90.0, 90.0, 90.0]);
        cfg.crystal.misset = Misset::Angles([10.0, 20.0, 30.0]);
        cfg.sf.default_f = 1.0;
        let m = Parameters::new(cfg, SetupSeeds { misset_idum: -1 }, MISSETS.to_vec()).unwrap();
        let psi = [10.0f64, 20.0, 30.0];
        let rot = |a: [f64; 3], v: [f64; 3]| {
            let r = a.map(f64::to_radians);
            let (sx, cx) = r[0].sin_cos();
            let v = [v[0], v[1] * cx - v[2] * sx, v[1] * sx + v[2] * cx];
            rot_z(rot_y(v, r[1]), r[2])
        };
        let v0 = [0.3, -0.5, 0.8];
        let v = rot(psi, v0);
        let c = m.chain(&psi);
        for i in 0..3 {
            let h = 1e-6;
            let (mut up, mut dn) = (psi, psi);
            up[i] += h;
            dn[i] -= h;
            let (a, b) = (rot(up, v0), rot(dn, v0));
            let fd: Vec<f64> = (0..3).map(|k| (a[k] - b[k]) / (2.0 * h)).collect();
            // ω × v per degree
            let w = [c[i * 3], c[i * 3 + 1], c[i * 3 + 2]].map(f64::to_radians);
            let cross =
                [w[1] * v[2] - w[2] * v[1], w[2] * v[0] - w[0] * v[2], w[0] * v[1] - w[1] * v[0]];
            for k in 0..3 {
                assert!((cross[k] - fd[k]).abs() < 1e-8, "ψ{i}: {cross:?} vs {fd:?}");
            }
        }
    }

    /// `Jᵀv` and `J·t` by the misset angles (through the chain rule), a
    /// detector and a crystal parameter against central differences of the
    /// f64 image.
    #[test]
    fn vector_products_match_finite_differences_of_the_image() {
        let mut cfg = SimConfig::default();
        (cfg.detector.fpixels, cfg.detector.spixels) = (12, 10);
        cfg.detector.pixel_mm = 1.0;
        cfg.detector.distance_mm = 60.0;
        cfg.crystal.cell = Some([70.0, 80.0, 90.0, 80.0, 95.0, 100.0]);
        cfg.crystal.misset = Misset::Angles([3.0, -2.0, 5.0]);
        (cfg.crystal.na, cfg.crystal.nb, cfg.crystal.nc) = (4.0, 4.0, 4.0);
        cfg.sf.default_f = 100.0;
        let params =
            vec![Param::MissetX, Param::MissetY, Param::MissetZ, Param::Distance, Param::CellB];
        let p = Parameters::new(cfg, SetupSeeds { misset_idum: -1 }, params).unwrap();
        let x = p.start().to_vec();
        assert_eq!(x, [3.0, -2.0, 5.0, 60.0, 80.0]);
        let opts = RenderOptions::default();
        let image = |x: &[f64]| p.image(x, opts, Precision::Fast64).unwrap();
        let n = image(&x).len();
        let v: Vec<f64> = (0..n).map(|i| (i % 7) as f64 - 3.0).collect();
        let vjp = p.vjp(&x, &v, opts).unwrap();
        for i in 0..x.len() {
            let h = 1e-6 * x[i].abs().max(1.0);
            let (mut up, mut dn) = (x.clone(), x.clone());
            up[i] += h;
            dn[i] -= h;
            let (a, b) = (image(&up), image(&dn));
            let fd: Vec<f64> = a.iter().zip(&b).map(|(a, b)| (a - b) / (2.0 * h)).collect();
            let max = fd.iter().fold(0f64, |m, d| m.max(d.abs()));
            let mut t = vec![0.0; x.len()];
            t[i] = 1.0;
            let jvp = p.jvp(&x, &t, opts).unwrap();
            let err = jvp.iter().zip(&fd).fold(0f64, |m, (j, f)| m.max((j - f).abs()));
            assert!(max > 0.0 && err <= 1e-6 * max, "{}: J·t {err} of {max}", p.params()[i]);
            let want: f64 = fd.iter().zip(&v).map(|(f, v)| f * v).sum();
            let scale: f64 = fd.iter().zip(&v).map(|(f, v)| (f * v).abs()).sum();
            assert!((vjp[i] - want).abs() <= 1e-6 * scale, "{}: Jᵀv", p.params()[i]);
        }
    }
}
