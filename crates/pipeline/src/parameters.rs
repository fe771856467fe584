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
use nanobragg_core::diff::loss::{self, loss_gradient, LossEval, LossKind};
use nanobragg_core::diff::{jacobian_of, jvp_of, sf_vjp_of, vjp_of, Param, SfProducts, Weights};
use nanobragg_core::geometry::{panel_configs, PanelLayout};
use nanobragg_core::render::{render, Precision, RenderOptions};
use nanobragg_core::setup::{Plan, SetupSeeds};
use nanobragg_core::vec3::dot;
use nanobragg_core::Experiment;
use nanobragg_core::SimConfig;
use std::borrow::Cow;

/// The message of a library error without its `invalid -gradient:` prefix.
pub(crate) fn message(e: &nanobragg_core::Error) -> String {
    match e {
        nanobragg_core::Error::Invalid { msg, .. } => msg.clone(),
        e => e.to_string(),
    }
}

pub(crate) const MISSETS: [Param; 3] = [Param::MissetX, Param::MissetY, Param::MissetZ];

/// The detector parameters a panel of a multi-panel detector has of its
/// own: its shifts along its normal, fast and slow axes.
pub const PANEL_PARAMS: [Param; 3] = [Param::CloseDistance, Param::Xbeam, Param::Ybeam];

/// The parameters that move a single-panel detector.
pub(crate) const DETECTOR_PARAMS: [Param; 8] = [
    Param::Distance,
    Param::CloseDistance,
    Param::Xbeam,
    Param::Ybeam,
    Param::DetectorRotX,
    Param::DetectorRotY,
    Param::DetectorRotZ,
    Param::Twotheta,
];

/// A parameter to fit: one of the model's ([`Param`]), or, written
/// `NAME@K`, a detector parameter of panel `K` of a multi-panel detector
/// (`close_distance@3`, `Xbeam@3`, `Ybeam@3`: that panel's own
/// single-panel flags, which move it along its normal, against its fast
/// axis and against its slow axis).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Target {
    /// The parameter.
    pub param: Param,
    /// The panel whose parameter it is; `None`: the model's.
    pub panel: Option<usize>,
}

impl From<Param> for Target {
    fn from(param: Param) -> Self {
        Target { param, panel: None }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.panel {
            Some(k) => write!(f, "{}@{k}", self.param),
            None => write!(f, "{}", self.param),
        }
    }
}

impl Target {
    /// The unit of its value.
    pub fn unit(self) -> &'static str {
        self.param.unit()
    }

    /// The targets of a comma-separated list of names, `NAME@K` naming
    /// panel `K` by index or by name among `panels` and `NAME@*` every
    /// panel (`all`: every [`Param`]).
    pub fn parse_list(s: &str, panels: &[String]) -> Result<Vec<Target>> {
        let mut out: Vec<Target> = Vec::new();
        let mut push = |t: Target| {
            if !out.contains(&t) {
                out.push(t);
            }
        };
        for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let Some((p, k)) = name.split_once('@') else {
                for p in Param::parse_list(name).map_err(|e| anyhow!("{}", message(&e)))? {
                    push(p.into());
                }
                continue;
            };
            // each name checked alone, so that the message names it
            let param = Param::parse_list(p).map_err(|e| anyhow!("{}", message(&e)))?;
            let [param] = param[..] else { bail!("'{name}': one parameter before @") };
            let ks: Vec<usize> = if k == "*" {
                (0..panels.len()).collect()
            } else if let Ok(i) = k.parse::<usize>() {
                vec![i]
            } else {
                match panels.iter().position(|n| n == k) {
                    Some(i) => vec![i],
                    None => bail!(
                        "'{name}': no panel named '{}' (panels: {})",
                        nanobragg_core::error::shown(k),
                        if panels.is_empty() {
                            "none, one flat detector".into()
                        } else {
                            panels.join(", ")
                        }
                    ),
                }
            };
            if panels.is_empty() {
                bail!("'{name}': the detector is a single panel: name the parameter without @");
            }
            for i in ks {
                if i >= panels.len() {
                    bail!(
                        "'{name}': the detector has {} panels (0 to {})",
                        panels.len(),
                        panels.len() - 1
                    );
                }
                push(Target { param, panel: Some(i) });
            }
        }
        if out.is_empty() {
            bail!("no parameter named");
        }
        Ok(out)
    }
}

/// The flag that holds parameter `p` and its place among the flag's values
/// (`cell_b`: `-cell`, 1); `None` for the divergence, which moves two flags
/// by the same shift.
pub fn flag_of(p: Param) -> Option<(&'static str, usize)> {
    let cell = Param::CellA as usize;
    Some(match p {
        Param::CellA
        | Param::CellB
        | Param::CellC
        | Param::CellAlpha
        | Param::CellBeta
        | Param::CellGamma => ("-cell", p as usize - cell),
        Param::MissetX => ("-misset", 0),
        Param::MissetY => ("-misset", 1),
        Param::MissetZ => ("-misset", 2),
        Param::Na => ("-Na", 0),
        Param::Nb => ("-Nb", 0),
        Param::Nc => ("-Nc", 0),
        Param::Divergence => return None,
        Param::Fluence => ("-fluence", 0),
        Param::Distance => ("-distance", 0),
        Param::CloseDistance => ("-close_distance", 0),
        Param::Xbeam => ("-Xbeam", 0),
        Param::Ybeam => ("-Ybeam", 0),
        Param::DetectorRotX => ("-detector_rotx", 0),
        Param::DetectorRotY => ("-detector_roty", 0),
        Param::DetectorRotZ => ("-detector_rotz", 0),
        Param::Twotheta => ("-twotheta", 0),
        Param::Mosaic => ("-mosaic", 0),
        Param::Phi => ("-phi", 0),
        Param::Osc => ("-osc", 0),
        Param::Lambda => ("-lambda", 0),
        Param::Dispersion => ("-dispersion", 0),
        Param::Polar => ("-polar", 0),
        Param::Water => ("-water", 0),
        Param::DefaultF => ("-default_F", 0),
        Param::LambdaOffset => ("-lambda_offset", 0),
        Param::LambdaScale => ("-lambda_scale", 0),
        Param::Fudge => ("-fudge", 0),
    })
}

/// Whether `value` is one the flag of parameter `t` takes (`-fluence -1`
/// is refused, so is a fluence of -1 set by name); a panel's parameters,
/// which no flag holds, need only be finite.
pub fn check_value(t: Target, value: f64) -> Result<()> {
    match flag_of(t.param) {
        Some((flag, index)) if t.panel.is_none() => {
            crate::parse::check_flag_number(flag, index, value)?
        }
        _ if !value.is_finite() => bail!("{t}: {value:?} is not a number"),
        _ => {}
    }
    Ok(())
}

/// Chosen parameters of a model as numbers, and the configuration they give.
///
/// The model is rendered panel by panel (its [`Experiment`]; a detector of
/// flags is one panel); the model's parameters move every panel, a panel's
/// own (`Xbeam@3`, of a detector with a panel list) that panel alone, by
/// moving its origin in the model's panel list.
#[derive(Debug, Clone)]
pub struct Parameters {
    pub(crate) cfg0: SimConfig,
    /// The plan of the model (of its first panel, with several).
    pub(crate) plan0: Plan,
    /// Where the panels' pixels lie in the image, and each panel's engine
    /// parameters and automatic oversampling.
    panels: Panels,
    seeds: SetupSeeds,
    pub(crate) params: Vec<Target>,
    pub(crate) start: Vec<f64>,
    /// Parameters the Jacobian is taken by: the chosen ones of the model,
    /// with the three crystal rotations in place of any `misset_*`.
    query: Vec<Param>,
}

/// The panels of a model.
#[derive(Debug, Clone)]
struct Panels {
    layout: PanelLayout,
    /// Each panel's engine parameters: [`Parameters::query`], then its own.
    query: Vec<Vec<Param>>,
    /// Each panel's automatic oversampling at the start, held fixed.
    oversample: Vec<Option<i64>>,
}

impl Parameters {
    /// `params` of the model `cfg0` (rendered with `seeds`). The automatic
    /// oversampling of `cfg0`'s plan is kept for every value.
    pub fn new(cfg0: SimConfig, seeds: SetupSeeds, params: Vec<Param>) -> Result<Self> {
        Self::of_targets(cfg0, seeds, params.into_iter().map(Target::from).collect())
    }

    /// [`Parameters::new`] with panels' parameters among them.
    pub fn of_targets(mut cfg0: SimConfig, seeds: SetupSeeds, params: Vec<Target>) -> Result<Self> {
        let mut query: Vec<Param> = (params.iter())
            .filter(|t| t.panel.is_none() && !MISSETS.contains(&t.param))
            .map(|t| t.param)
            .collect();
        if params.iter().any(|t| MISSETS.contains(&t.param)) {
            query.extend(MISSETS);
        }
        if let Some(t) =
            params.iter().enumerate().find_map(|(i, t)| params[..i].contains(t).then_some(t))
        {
            bail!("{t} is named twice");
        }
        let mut exp = Experiment::new(&cfg0, seeds, None)?;
        let oversample: Vec<Option<i64>> =
            exp.plans.iter().map(|p| p.oversample_auto.then_some(p.oversample as i64)).collect();
        // (a detector of panels that move each on its own: -expt, -geom)
        let listed = !cfg0.detector.panels.is_empty();
        if let (false, Some(n)) = (listed, oversample[0]) {
            // The automatic oversampling is a whole number that jumps with the
            // geometry (distance, cell, N): the fit keeps the starting model's
            // (the model's own, where it is the one panel's configuration).
            cfg0.sampling.oversample = n;
            exp.configs[0] = cfg0.clone();
        }
        let (configs, plans) = (&exp.configs, &exp.plans);
        let mut start = Vec::new();
        for &t in &params {
            let p = t.param;
            let k = match t.panel {
                Some(_) if !listed => {
                    bail!("{t}: the detector is a single panel: name the parameter without @")
                }
                Some(k) if PANEL_PARAMS.contains(&p) => k,
                Some(_) => bail!(
                    "{t}: a panel's parameters are {} (its shifts along its normal, fast and slow axes)",
                    PANEL_PARAMS.map(|p| p.name()).join(", ")
                ),
                None if listed && PANEL_PARAMS.contains(&p) => bail!(
                    "{p}: the panels of a multi-panel detector move each on its own: name a panel, {p}@K (K its index or name), or {p}@* for every panel"
                ),
                None if listed && DETECTOR_PARAMS.contains(&p) => bail!(
                    "{p}: a multi-panel detector is placed by its panels' vectors: refine its panels' {} (NAME@K)",
                    PANEL_PARAMS.map(|p| p.name()).join(", ")
                ),
                None => 0,
            };
            if k >= plans.len() {
                bail!("{t}: the detector has {} panels", plans.len());
            }
            check_param(&configs[k], &plans[k], p).map_err(|e| anyhow!("{}", message(&e)))?;
            start.push(start_value(&configs[k], &plans[k], p)?);
        }
        let query_of = |k: usize| {
            let own = params.iter().filter(|t| t.panel == Some(k)).map(|t| t.param);
            query.iter().copied().chain(own).collect()
        };
        let panels = Panels {
            query: (0..plans.len()).map(query_of).collect(),
            layout: exp.layout.clone(),
            oversample,
        };
        let plan0 = exp.plans.swap_remove(0);
        Ok(Parameters { cfg0, plan0, panels, seeds, params, start, query })
    }

    /// The configuration with the parameters at `values` (with several
    /// panels, the whole detector's: the panels' origins moved).
    pub fn config(&self, values: &[f64]) -> Result<SimConfig> {
        if values.len() != self.params.len() {
            bail!("{} values for {} parameters", values.len(), self.params.len());
        }
        let mut cfg = self.cfg0.clone();
        let mut misset = misset_angles(&self.cfg0);
        let mut shifts = Vec::new();
        for ((&t, &v), &s) in self.params.iter().zip(values).zip(&self.start) {
            if let Some(i) = MISSETS.iter().position(|&m| m == t.param) {
                misset[i] = v;
            } else if let Some(k) = t.panel {
                shifts.push((k, t.param, v));
            } else if v != s {
                cfg = t.param.nudged(&cfg, &self.plan0, v - s)?;
            }
        }
        if self.params.iter().any(|t| MISSETS.contains(&t.param)) {
            cfg.crystal.misset = Misset::Angles(misset);
        }
        let beam = cfg.detector.beam;
        for (k, p, v) in shifts {
            let panel = &mut cfg.detector.panels[k];
            let [f, s, o] = panel.frame(beam)?;
            let at = panel.origin_mm;
            // (Xbeam, Ybeam, close_distance) of the panel, one of them moved
            let (mut x, mut y, mut c) = (-dot(at, f), -dot(at, s), dot(at, o));
            match p {
                Param::Xbeam => x = v,
                Param::Ybeam => y = v,
                _ => c = v,
            }
            panel.origin_mm = std::array::from_fn(|i| -x * f[i] - y * s[i] + c * o[i]);
        }
        Ok(cfg)
    }

    /// `d/d params = M · d/d query` (row-major `params × query`): the
    /// identity but for the misset angles. Their derivatives come as small
    /// rotations about the lab axes after the orientation; the angle ψx of
    /// `-misset` (rotations x, then y, then z) turns about Rz(ψz)·Ry(ψy)·x,
    /// ψy about Rz(ψz)·y, ψz about z.
    pub fn chain(&self, values: &[f64]) -> Vec<f64> {
        self.chain_to(values, &self.query, None)
    }

    /// [`Parameters::chain`] to the engine parameters `query` of `panel`
    /// (`None`: the model's alone): other panels' parameters get zero rows.
    fn chain_to(&self, values: &[f64], query: &[Param], panel: Option<usize>) -> Vec<f64> {
        let (np, nq) = (self.params.len(), query.len());
        let mut m = vec![0.0; np * nq];
        let mut psi = misset_angles(&self.cfg0);
        for (&t, &v) in self.params.iter().zip(values) {
            if let Some(i) = MISSETS.iter().position(|&m| m == t.param) {
                psi[i] = v;
            }
        }
        let r = psi.map(f64::to_radians);
        let axes = [
            rot_z(rot_y([1.0, 0.0, 0.0], r[1]), r[2]),
            rot_z([0.0, 1.0, 0.0], r[2]),
            [0.0, 0.0, 1.0],
        ];
        for (i, &t) in self.params.iter().enumerate() {
            if let Some(a) = MISSETS.iter().position(|&m| m == t.param) {
                for (j, &q) in MISSETS.iter().enumerate() {
                    let col = query.iter().position(|&x| x == q).unwrap();
                    m[i * nq + col] = axes[a][j];
                }
            } else if t.panel.is_none() || t.panel == panel {
                m[i * nq + query.iter().position(|&x| x == t.param).unwrap()] = 1.0;
            }
        }
        m
    }

    /// Holds panel `k`'s automatic oversampling at its start value.
    fn fixed_sampling(&self) -> impl Fn(usize, &mut SimConfig) + '_ {
        |k, c| {
            if let Some(n) = self.panels.oversample[k] {
                c.sampling.oversample = n;
            }
        }
    }

    /// Each panel's configuration at `values` (one: the model's).
    fn configs_at(&self, values: &[f64]) -> Result<Vec<SimConfig>> {
        let mut out = panel_configs(&self.config(values)?)?;
        let fix = self.fixed_sampling();
        out.iter_mut().enumerate().for_each(|(k, c)| fix(k, c));
        Ok(out)
    }

    /// Each panel's configuration and plan at `values` (one: the model's),
    /// the panels holding one structure-factor grid.
    fn panels_at(&self, values: &[f64]) -> Result<Vec<(SimConfig, Plan)>> {
        let cfg = self.config(values)?;
        let exp = Experiment::new_adjusted(&cfg, self.seeds, None, self.fixed_sampling())?;
        Ok(exp.configs.into_iter().zip(exp.plans).collect())
    }

    /// The plan at `values` (the geometry a set of values gives; of the
    /// first panel, with several).
    pub fn plan_at(&self, values: &[f64]) -> Result<Plan> {
        Ok(Plan::new(&self.configs_at(values)?[0], self.seeds)?)
    }

    /// Each panel's plan at `values` (one: the model's).
    pub fn plans_at(&self, values: &[f64]) -> Result<Vec<Plan>> {
        Ok(self.panels_at(values)?.into_iter().map(|(_, p)| p).collect())
    }

    /// Where each panel's pixels lie in the image: origin (fast, slow) and
    /// size (fast, slow) per panel.
    pub fn panel_boxes(&self) -> Vec<([usize; 2], [usize; 2])> {
        let l = &self.panels.layout;
        l.origins.iter().copied().zip(l.sizes.iter().copied()).collect()
    }

    /// Where each panel's pixels lie in the image of the whole detector.
    pub fn layout(&self) -> &nanobragg_core::geometry::PanelLayout {
        &self.panels.layout
    }

    /// The image's pixels (fast, slow): the detector's, or with several
    /// panels the whole layout's.
    pub fn image_size(&self) -> [usize; 2] {
        [self.panels.layout.width, self.panels.layout.height]
    }

    /// Panel `k`'s pixels of an image of the whole detector
    /// ([`PanelLayout::piece`]).
    pub fn panel_pixels<'a, T: Copy>(&self, k: usize, image: &'a [T]) -> Cow<'a, [T]> {
        self.panels.layout.piece(k, image)
    }

    /// The image of the whole detector from each panel's (gaps 0).
    fn stacked<T: Copy + Default>(&self, mut parts: Vec<Vec<T>>) -> Vec<T> {
        let l = &self.panels.layout;
        if l.is_stacked() {
            // (the panels' pieces in order are the image)
            return match parts.len() {
                1 => parts.pop().unwrap_or_default(),
                _ => parts.concat(),
            };
        }
        let mut image = vec![T::default(); l.width * l.height];
        for (k, part) in parts.iter().enumerate() {
            l.put(k, part, &mut image);
        }
        image
    }

    /// Which pixels of the image a loss uses ([`loss::pixels_used`] of each
    /// panel; gaps between panels are not used).
    pub fn pixels_used(&self, skip: &[bool]) -> Result<Vec<bool>> {
        let mut parts = Vec::new();
        for (k, plan) in self.plans_at(&self.start)?.iter().enumerate() {
            parts.push(loss::pixels_used(plan, Some(&self.panel_pixels(k, skip))));
        }
        Ok(self.stacked(parts))
    }

    /// An error unless `len` is the pixel count of the whole detector's
    /// image (with several panels: the panels' pieces are cut from it).
    fn check_len(&self, what: &str, len: usize) -> Result<()> {
        let [w, h] = self.image_size();
        if len != w * h {
            bail!("{what} has {len} pixels but the detector has {} ({w} x {h})", w * h);
        }
        Ok(())
    }

    /// Panel `k`'s automatic oversampling, held fixed in the fit (`None`
    /// where the flag gave it).
    pub fn auto_oversample(&self) -> Vec<Option<i64>> {
        self.panels.oversample.clone()
    }

    /// Panel `k`'s engine parameters.
    fn query_of(&self, k: usize) -> &[Param] {
        &self.panels.query[k]
    }

    /// [`Parameters::chain`] to panel `k`'s engine parameters.
    fn chain_of(&self, values: &[f64], k: usize) -> Vec<f64> {
        self.chain_to(values, self.query_of(k), Some(k))
    }

    /// Derivatives by a panel's engine parameters turned into derivatives
    /// by the chosen ones through its chain matrix `m` ([`Parameters::chain_of`]).
    fn by_params(&self, m: &[f64], by_query: &[f64]) -> Vec<f64> {
        let nq = by_query.len();
        (0..self.params.len()).map(|i| (0..nq).map(|q| m[i * nq + q] * by_query[q]).sum()).collect()
    }

    /// The parameters, in the order given.
    pub fn params(&self) -> &[Target] {
        &self.params
    }

    /// Their values in the model they were chosen from.
    pub fn start(&self) -> &[f64] {
        &self.start
    }

    /// The plan of the model they were chosen from (of its first panel,
    /// with several).
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
        let parts = self.panels_at(values)?;
        Ok(self.stacked(
            parts
                .iter()
                .map(|(_, plan)| render::<f64>(plan, RenderOptions { precision, ..opts }).image)
                .collect(),
        ))
    }

    /// `Jᵀv` at `values`: `Σ v · d pixel / d parameter` for each parameter
    /// (per unit of its flag), without forming the derivative images where
    /// the engine can ([`vjp_of`]).
    pub fn vjp(&self, values: &[f64], v: Weights<'_>, opts: RenderOptions) -> Result<Vec<f64>> {
        if let Weights::PerPixel(v) = v {
            self.check_len("v", v.len())?;
        }
        let mut out = vec![0.0; self.params.len()];
        for (k, (cfg, plan)) in self.panels_at(values)?.iter().enumerate() {
            let vk = match v {
                Weights::PerPixel(v) => Some(self.panel_pixels(k, v)),
                Weights::Uniform(_) => None,
            };
            let wk = vk.as_deref().map_or(v, Weights::PerPixel);
            let by_query = vjp_of(cfg, plan, self.query_of(k), self.seeds, opts, wk)?;
            for (o, x) in out.iter_mut().zip(self.by_params(&self.chain_of(values, k), &by_query)) {
                *o += x;
            }
        }
        Ok(out)
    }

    /// The f64 image at `values` and `Σ v · d pixel / d F` for every value
    /// of the structure-factor grid ([`sf_vjp_of`]).
    pub fn sf_vjp(&self, values: &[f64], v: &[f64], opts: RenderOptions) -> Result<SfProducts> {
        self.check_len("v", v.len())?;
        let (mut images, mut gradient) = (Vec::new(), Vec::<f64>::new());
        for (k, (_, plan)) in self.panels_at(values)?.iter().enumerate() {
            let p = sf_vjp_of(plan, opts, &self.panel_pixels(k, v))?;
            if gradient.is_empty() {
                gradient = p.gradient;
            } else {
                gradient.iter_mut().zip(&p.gradient).for_each(|(g, x)| *g += x);
            }
            images.push(p.image);
        }
        Ok(SfProducts { image: self.stacked(images), gradient })
    }

    /// The image at `values` and its derivative images by each parameter
    /// (per unit of its flag: the misset angles through [`Parameters::chain`],
    /// as [`Parameters::jvp`]), in f32 as the command line's `-gradient`
    /// files ([`jacobian_of`]).
    pub fn jacobian(
        &self,
        values: &[f64],
        opts: RenderOptions,
        precision: Precision,
    ) -> Result<(Vec<f32>, Vec<Vec<f32>>)> {
        let (mut images, mut by_param) = (Vec::new(), vec![Vec::new(); self.params.len()]);
        for (k, (cfg, plan)) in self.panels_at(values)?.iter().enumerate() {
            let query = self.query_of(k);
            let j = jacobian_of(cfg, plan, query, self.seeds, opts, precision)?;
            let m = self.chain_of(values, k);
            let nq = query.len();
            for (i, d) in by_param.iter_mut().enumerate() {
                let rows: Vec<(f64, &Vec<f32>)> = (0..nq)
                    .filter(|&q| m[i * nq + q] != 0.0)
                    .map(|q| (m[i * nq + q], &j.derivatives[q]))
                    .collect();
                // (a copy where one engine parameter is the chosen one)
                d.push(match rows[..] {
                    [(1.0, image)] => image.clone(),
                    _ => (0..j.image.len())
                        .map(|px| rows.iter().map(|&(w, image)| w * image[px] as f64).sum::<f64>())
                        .map(|x| x as f32)
                        .collect(),
                });
            }
            images.push(j.image);
        }
        let derivatives = by_param.into_iter().map(|parts| self.stacked(parts)).collect();
        Ok((self.stacked(images), derivatives))
    }

    /// `J·t` at `values`: the derivative of every pixel along the direction
    /// `t` (one number per parameter, per unit of its flag).
    pub fn jvp(&self, values: &[f64], t: &[f64], opts: RenderOptions) -> Result<Vec<f64>> {
        if t.len() != self.params.len() {
            bail!("{} tangents for {} parameters", t.len(), self.params.len());
        }
        let mut parts = Vec::new();
        for (k, (cfg, plan)) in self.panels_at(values)?.iter().enumerate() {
            let query = self.query_of(k);
            let m = self.chain_of(values, k);
            let nq = query.len();
            let tq: Vec<f64> = (0..nq)
                .map(|q| (0..self.params.len()).map(|i| m[i * nq + q] * t[i]).sum())
                .collect();
            parts.push(jvp_of(cfg, plan, query, self.seeds, opts, &tq)?.values);
        }
        Ok(self.stacked(parts))
    }

    /// The loss of the image at `values` against `observed` and its
    /// gradient, Gauss–Newton Hessian and information by the parameters
    /// (with several panels, over every panel's pixels).
    pub fn loss(
        &self,
        values: &[f64],
        kind: LossKind,
        observed: &[f32],
        skip: Option<&[bool]>,
        opts: RenderOptions,
    ) -> Result<LossEval> {
        let np = self.params.len();
        self.check_len("the observed image", observed.len())?;
        self.check_len("skip", skip.map_or(observed.len(), |s| s.len()))?;
        let mut evals = Vec::new();
        for (k, cfg) in self.configs_at(values)?.iter().enumerate() {
            let query = self.query_of(k);
            let obs = self.panel_pixels(k, observed);
            let skip = skip.map(|s| self.panel_pixels(k, s));
            let ev = loss_gradient(cfg, query, self.seeds, opts, kind, &obs, skip.as_deref())?;
            let m = self.chain_of(values, k);
            let nq = query.len();
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
            evals.push(LossEval {
                params: self.params.iter().map(|t| t.param).collect(),
                gradient: self.by_params(&m, &ev.gradient),
                hessian: sandwich(&ev.hessian),
                information: sandwich(&ev.information),
                ..ev
            });
        }
        if evals.len() == 1 {
            return Ok(evals.pop().expect("one panel"));
        }
        // the panels' sums; SSE's variance is the residuals' over all pixels
        let images = evals.iter_mut().map(|e| std::mem::take(&mut e.image)).collect();
        let mut evals = evals.into_iter();
        let mut sum = evals.next().expect("panels");
        for e in evals {
            sum.value += e.value;
            sum.pixels += e.pixels;
            for (a, b) in sum.gradient.iter_mut().zip(&e.gradient) {
                *a += b;
            }
            for (a, b) in sum.hessian.iter_mut().zip(&e.hessian) {
                *a += b;
            }
            for (a, b) in sum.information.iter_mut().zip(&e.information) {
                *a += b;
            }
        }
        if kind == LossKind::Sse {
            let dof = sum.pixels.saturating_sub(np);
            sum.sigma2 = if dof > 0 { sum.value / dof as f64 } else { 0.0 };
            let s2 = sum.sigma2.max(f64::MIN_POSITIVE);
            sum.information = sum.hessian.iter().map(|h| h / 2.0 / s2).collect();
        }
        sum.image = self.stacked(images);
        Ok(sum)
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
    fn every_parameter_has_a_flag_that_takes_its_value() {
        use crate::flags::Arity;
        for p in Param::ALL {
            let Some((flag, index)) = flag_of(p) else { continue };
            let f = crate::flags::lookup(flag).unwrap_or_else(|| panic!("{p}: no flag {flag}"));
            let values = match f.arity {
                Arity::Zero => 0,
                Arity::Exactly(n) => n,
                Arity::Cell => 6,
                Arity::Misset => 3,
            };
            assert!(index < values, "{p}: value {index} of {flag}");
            // its rule takes a usual value
            let usual = if flag == "-cell" && index >= 3 { 90.0 } else { 1.0 };
            crate::parse::check_flag_number(flag, index, usual).unwrap();
            assert!(check_value(Target::from(p), f64::NAN).is_err(), "{p}");
        }
    }

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
        products_match_finite_differences(&p, &x, 7, |_, _| {});
    }

    /// `J·t` and `Jᵀv` (v cycling through `period` values) by each
    /// parameter at `x` against central differences of the f64 image;
    /// `each(i, fd)` sees parameter `i`'s difference image.
    fn products_match_finite_differences(
        p: &Parameters,
        x: &[f64],
        period: usize,
        each: impl Fn(usize, &[f64]),
    ) {
        let opts = RenderOptions::default();
        let image = |x: &[f64]| p.image(x, opts, Precision::Fast64).unwrap();
        let n = image(x).len();
        let v: Vec<f64> = (0..n).map(|i| (i % period) as f64 - (period / 2) as f64).collect();
        let vjp = p.vjp(x, Weights::PerPixel(&v), opts).unwrap();
        for i in 0..x.len() {
            let h = 1e-6 * x[i].abs().max(1.0);
            let (mut up, mut dn) = (x.to_vec(), x.to_vec());
            up[i] += h;
            dn[i] -= h;
            let (a, b) = (image(&up), image(&dn));
            let fd: Vec<f64> = a.iter().zip(&b).map(|(a, b)| (a - b) / (2.0 * h)).collect();
            each(i, &fd);
            let max = fd.iter().fold(0f64, |m, d| m.max(d.abs()));
            let mut t = vec![0.0; x.len()];
            t[i] = 1.0;
            let jvp = p.jvp(x, &t, opts).unwrap();
            let err = jvp.iter().zip(&fd).fold(0f64, |m, (j, f)| m.max((j - f).abs()));
            assert!(max > 0.0 && err <= 1e-6 * max, "{}: J·t {err} of {max}", p.params()[i]);
            let want: f64 = fd.iter().zip(&v).map(|(f, v)| f * v).sum();
            let scale: f64 = fd.iter().zip(&v).map(|(f, v)| (f * v).abs()).sum();
            assert!((vjp[i] - want).abs() <= 1e-6 * scale, "{}: Jᵀv", p.params()[i]);
        }
    }

    /// With two panels: a panel's own parameter moves its pixels alone, and
    /// `J·t`, `Jᵀv` and the loss gradient by panel and model parameters
    /// agree with central differences of the stacked f64 image.
    #[test]
    fn panel_parameters_match_finite_differences() {
        let dir = std::env::temp_dir().join(format!("nb-params-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let geom = dir.join("two.geom");
        let mut text = String::from("clen = 0.06\nres = 1000\nphoton_energy = 12398.42 eV\n");
        for (k, (cx, cy, fs)) in [(-14.0, -6.0, "+1x +0y +0z"), (1.0, -5.0, "+0.9998x +0y +0.02z")]
            .into_iter()
            .enumerate()
        {
            text += &format!(
                "p{k}/min_fs = 0\np{k}/max_fs = 11\np{k}/min_ss = {}\np{k}/max_ss = {}\n\
                 p{k}/corner_x = {cx}\np{k}/corner_y = {cy}\np{k}/coffset = {}\n\
                 p{k}/fs = {fs}\np{k}/ss = +0x +1y +0z\n",
                10 * k,
                10 * k + 9,
                0.001 * k as f64
            );
        }
        std::fs::write(&geom, text).unwrap();
        let args: Vec<String> = format!(
            "-geom {} -cell 70 80 90 80 95 100 -misset 3 -2 5 -N 4 -default_F 100",
            geom.display()
        )
        .split(' ')
        .map(String::from)
        .collect();
        let inv = crate::parse_args(&args).unwrap();
        let targets = vec![
            Target { param: Param::Xbeam, panel: Some(1) },
            Target { param: Param::CloseDistance, panel: Some(0) },
            Target::from(Param::CellB),
            Target::from(Param::MissetZ),
        ];
        let p =
            Parameters::of_targets(inv.config, SetupSeeds { misset_idum: -1 }, targets).unwrap();
        assert_eq!(p.image_size(), [12, 20]);
        let x = p.start().to_vec();
        products_match_finite_differences(&p, &x, 5, |i, fd| {
            if let Some(k) = p.params()[i].panel {
                // the other panel's rows do not move
                let other = p.panel_pixels(1 - k, fd);
                assert!(other.iter().all(|&d| d == 0.0), "{}", p.params()[i]);
            }
        });
        let opts = RenderOptions::default();
        let image = |x: &[f64]| p.image(x, opts, Precision::Fast64).unwrap();
        let n = image(&x).len();
        // the SSE loss's gradient: 2 Jᵀ(μ − k) over both panels (the loss
        // renders with the exact kernels, the image above the fast ones:
        // they differ by rounding)
        let observed: Vec<f32> = image(&x).iter().map(|&m| (m * 1.1) as f32).collect();
        let ev = p.loss(&x, LossKind::Sse, &observed, None, opts).unwrap();
        let mu = image(&x);
        let r: Vec<f64> = mu.iter().zip(&observed).map(|(m, &o)| 2.0 * (m - o as f64)).collect();
        let want = p.vjp(&x, Weights::PerPixel(&r), opts).unwrap();
        // one weight for all pixels, each panel's: as that weight in each pixel
        let uniform = p.vjp(&x, Weights::Uniform(0.75), opts).unwrap();
        assert_eq!(uniform, p.vjp(&x, Weights::PerPixel(&vec![0.75; n]), opts).unwrap());
        for (g, w) in ev.gradient.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-5 * w.abs().max(1e-12), "{:?} vs {want:?}", ev.gradient);
        }
        assert_eq!(ev.image.len(), n);
        std::fs::remove_dir_all(&dir).ok();
    }
}
