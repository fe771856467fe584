//! X-ray sources: beam divergence, spectral dispersion or a spectrum file,
//! and user source files.

pub mod sourcefile;
pub mod spectrum;

use crate::config::BeamConfig;
use crate::error::{Error, Result};
use crate::param::{Deltas, Param};
use crate::real::{DiffReal, Real};
use crate::vec3::{lift, rotate_axis, unitize, V3};

/// Resolve a (range, step, count) triple the way nanoBragg.c auto-selects
/// divergence and dispersion sampling: any two given determine the third,
/// and a degenerate result collapses to one step of zero width.
pub fn auto_steps(range: f64, step: f64, steps: i64) -> (f64, f64, i64) {
    auto_steps_in(range, step, steps)
}

/// [`auto_steps`] in any number type: the range and step carry the
/// derivatives of the range (the count is fixed by the values).
pub fn auto_steps_in<R: Real>(mut range: R, mut step: R, mut steps: i64) -> (R, R, i64) {
    let c = R::c;
    if steps <= 0 {
        if range.val() < 0.0 {
            if step.val() <= 0.0 {
                steps = 1;
                range = R::zero();
                step = R::zero();
            } else {
                range = step;
                steps = 2;
            }
        } else if step.val() <= 0.0 {
            step = range;
            steps = 2;
        } else {
            steps = (range / step).val().ceil() as i64;
        }
    } else if range.val() < 0.0 {
        if step.val() <= 0.0 {
            range = R::one();
            step = range / c(steps as f64);
        } else {
            range = step;
            steps = 2;
        }
    } else if step.val() <= 0.0 {
        if steps <= 1 {
            steps = 2;
        }
        step = range / c((steps - 1) as f64);
    }
    if range.val() <= 0.0 || step.val() <= 0.0 || steps <= 0 {
        (R::zero(), R::zero(), 1)
    } else {
        (range, step, steps)
    }
}

/// One X-ray source point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Source {
    /// Position as generated or read (m), before normalisation.
    pub position: [f64; 3],
    /// Weight: the source's share of the fluence once divided by the sum of
    /// the weights. nanoBragg.c ignores source-file weights when rendering,
    /// and so does the render unless [`Sources::weighted`].
    pub weight: f64,
    /// Wavelength (m).
    pub lambda_m: f64,
    /// Unit vector from the sample towards the source.
    pub dir: [f64; 3],
}

/// One source in the number type of [`Sources::resolve_in`].
#[derive(Debug, Clone, Copy)]
pub struct SourceIn<R> {
    /// Unit vector from the sample towards the source.
    pub dir: V3<R>,
    /// Wavelength (m).
    pub lambda: R,
}

/// The resolved source list and how it was sampled.
#[derive(Debug, Clone, PartialEq)]
pub struct Sources {
    /// All sources.
    pub list: Vec<Source>,
    /// Horizontal divergence range (rad).
    pub hdivrange: f64,
    /// Horizontal divergence step (rad).
    pub hdivstep: f64,
    /// Horizontal divergence steps.
    pub hdivsteps: i64,
    /// Vertical divergence range (rad).
    pub vdivrange: f64,
    /// Vertical divergence step (rad).
    pub vdivstep: f64,
    /// Vertical divergence steps.
    pub vdivsteps: i64,
    /// Dispersion (fraction, full width).
    pub dispersion: f64,
    /// Dispersion step (fraction).
    pub dispstep: f64,
    /// Number of wavelengths.
    pub dispsteps: i64,
    /// Divergence points kept (after `-round_div` trimming).
    pub divsteps: i64,
    /// (hdiv, vdiv) of each kept divergence point (rad), in order.
    pub div_points: Vec<(f64, f64)>,
    /// The generated wavelengths (m), in order.
    pub lambdas: Vec<f64>,
    /// The wavelengths are the lines of a `-spectrum` file (`dispsteps` of
    /// them, `dispersion` and `dispstep` 0).
    pub spectrum: bool,
    /// The sources are a `-sourcefile`'s.
    pub from_file: bool,
    /// The wavelength (m) the images' headers give: `-lambda`'s, as
    /// nanoBragg.c writes it (with `-dispersion` or a source file too),
    /// moved by `-lambda_offset` and `-lambda_scale`; a `-spectrum`'s
    /// weighted mean.
    pub central_lambda_m: f64,
    /// The render multiplies each source's photons by its weight over the
    /// mean weight ([`Sources::kernel_weights`]): a spectrum's, or a source
    /// file's under `-corrected` (nanoBragg.c ignores those), with weights
    /// that are not all equal.
    pub weighted: bool,
}

impl Sources {
    /// Build the sources from a source file or from divergence × dispersion,
    /// in nanoBragg.c's order (divergence outer, wavelength inner).
    pub fn resolve(
        cfg: &BeamConfig,
        lambda0_m: f64,
        beam: [f64; 3],
        polar: [f64; 3],
        vert: [f64; 3],
    ) -> Result<Sources> {
        Ok(Self::resolve_in::<f64>(cfg, lambda0_m, beam, polar, vert, &Deltas::zero())?.0)
    }

    /// [`Sources::resolve`] in any number type, with the divergence and
    /// dispersion parameters of `deltas` added to their ranges (`lambda0_m`
    /// may carry the wavelength's). Also returns each source's unit direction
    /// towards the source and wavelength in `R`. With all-zero deltas the f64
    /// instance is [`Sources::resolve`].
    pub fn resolve_in<R: DiffReal>(
        cfg: &BeamConfig,
        lambda0_m: R,
        beam: [f64; 3],
        polar: [f64; 3],
        vert: [f64; 3],
        deltas: &Deltas<R>,
    ) -> Result<(Sources, Vec<SourceIn<R>>)> {
        let c = R::c;
        let div = |range: f64| deltas.apply(Param::Divergence, c(range), 1.0) / c(1000.0);
        let (hdivrange, hdivstep, hdivsteps) =
            auto_steps_in(div(cfg.hdivrange_mrad), c(cfg.hdivstep_mrad) / c(1000.0), cfg.hdivsteps);
        let (vdivrange, vdivstep, vdivsteps) =
            auto_steps_in(div(cfg.vdivrange_mrad), c(cfg.vdivstep_mrad) / c(1000.0), cfg.vdivsteps);
        let (dispersion, dispstep, dispsteps) = match &cfg.spectrum {
            Some(lines) => (R::zero(), R::zero(), lines.len() as i64),
            None => auto_steps_in(
                deltas.apply(Param::Dispersion, c(cfg.dispersion_pct), 1.0) / c(100.0),
                c(-1.0),
                cfg.dispsteps,
            ),
        };
        // λ' = offset + scale · λ on every wavelength (exactly λ by default)
        let moved = cfg.lambda_offset_a != 0.0
            || cfg.lambda_scale != 1.0
            || deltas.has(Param::LambdaOffset)
            || deltas.has(Param::LambdaScale);
        let offset_m = deltas.apply(Param::LambdaOffset, c(cfg.lambda_offset_a), 1.0) / c(1.0e10);
        let scale = deltas.apply(Param::LambdaScale, c(cfg.lambda_scale), 1.0);
        let shift = |lambda: R| if moved { offset_m + scale * lambda } else { lambda };
        let sd = cfg.source_distance_m;
        let mut list = Vec::new();
        let mut div_points = Vec::new();
        let mut lambdas = Vec::new();
        let mut divsteps = 0;
        if let Some(rows) = &cfg.sources {
            for r in rows {
                let pos = [
                    if r[0].is_nan() { -sd * beam[0] } else { r[0] },
                    if r[1].is_nan() { -sd * beam[1] } else { r[1] },
                    if r[2].is_nan() { -sd * beam[2] } else { r[2] },
                ];
                let weight = if r[3].is_nan() { 1.0 } else { r[3] };
                let lambda_m = if r[4].is_nan() { lambda0_m } else { c(r[4]) };
                list.push((lift(pos), weight, shift(lambda_m)));
            }
        }
        if list.is_empty() {
            let keep = |hdiv: R, vdiv: R| {
                let (hdiv, vdiv) = (hdiv.val(), vdiv.val());
                let (hdivstep, hdivrange) = (hdivstep.val(), hdivrange.val());
                let (vdivstep, vdivrange) = (vdivstep.val(), vdivrange.val());
                let mut test = (hdiv * hdiv
                    - hdivstep * hdivstep / 4.0 * (1 - hdivsteps % 2) as f64)
                    / hdivrange
                    / hdivrange;
                test += (vdiv * vdiv - vdivstep * vdivstep / 4.0 * (1 - vdivsteps % 2) as f64)
                    / vdivrange
                    / vdivrange;
                !(cfg.round_div && test * 4.0 > 1.1)
            };
            for h in 0..hdivsteps {
                for v in 0..vdivsteps {
                    let hdiv = hdivstep * c(h as f64) - hdivrange / c(2.0);
                    let vdiv = vdivstep * c(v as f64) - vdivrange / c(2.0);
                    if keep(hdiv, vdiv) {
                        divsteps += 1;
                        div_points.push((hdiv, vdiv));
                    }
                }
            }
            let mut weights = Vec::new();
            match &cfg.spectrum {
                Some(lines) => {
                    for &[lambda_a, weight] in lines {
                        lambdas.push(shift(c(lambda_a) / c(1.0e10)));
                        weights.push(weight);
                    }
                }
                None => {
                    let n = (divsteps * dispsteps) as f64;
                    for d in 0..dispsteps {
                        let l =
                            lambda0_m * (R::one() + dispstep * c(d as f64) - dispersion / c(2.0));
                        lambdas.push(shift(l));
                        weights.push(1.0 / n);
                    }
                }
            }
            for &(hdiv, vdiv) in &div_points {
                let v0: V3<R> = lift([-sd * beam[0], -sd * beam[1], -sd * beam[2]]);
                let v1 = rotate_axis(v0, lift(polar), vdiv);
                let pos = rotate_axis(v1, lift(vert), hdiv);
                for (&lambda_m, &weight) in lambdas.iter().zip(&weights) {
                    list.push((pos, weight, lambda_m));
                }
            }
        }
        if list.is_empty() {
            return Err(Error::Invalid {
                what: "-divergence",
                msg: "no source points remain".into(),
            });
        }
        let mut sources = Vec::with_capacity(list.len());
        let mut inputs = Vec::with_capacity(list.len());
        for &(position, weight, lambda) in &list {
            let dir = unitize(position).0;
            let lambda_m = lambda.val();
            if !(lambda_m > 0.0 && lambda_m.is_finite()) {
                return Err(Error::Invalid {
                    what: "-lambda",
                    msg: format!("wavelength {lambda_m} m is not positive"),
                });
            }
            sources.push(Source {
                position: position.map(R::val),
                weight,
                lambda_m,
                dir: dir.map(R::val),
            });
            inputs.push(SourceIn { dir, lambda });
        }
        let spectrum = cfg.spectrum.is_some() && !div_points.is_empty();
        let central_lambda_m = match spectrum {
            true => {
                let (w, wl) = (sources.iter())
                    .fold((0.0, 0.0), |(w, wl), s| (w + s.weight, wl + s.weight * s.lambda_m));
                wl / w
            }
            false => shift(lambda0_m).val(),
        };
        let sources = Sources {
            central_lambda_m,
            list: sources,
            hdivrange: hdivrange.val(),
            hdivstep: hdivstep.val(),
            hdivsteps,
            vdivrange: vdivrange.val(),
            vdivstep: vdivstep.val(),
            vdivsteps,
            dispersion: dispersion.val(),
            dispstep: dispstep.val(),
            dispsteps,
            divsteps,
            div_points: div_points.iter().map(|(h, v)| (h.val(), v.val())).collect(),
            lambdas: lambdas.iter().map(|l| l.val()).collect(),
            spectrum,
            from_file: div_points.is_empty(),
            weighted: false,
        };
        Ok((sources, inputs))
    }

    /// Decide whether the render applies the weights: always for a
    /// spectrum, for a source file only with `corrected` (nanoBragg.c reads
    /// the column and ignores it), and not where every weight is the same
    /// (the unweighted sum is then the same image, bit for bit the
    /// unweighted render's). Applied weights must be finite and
    /// non-negative with a positive sum.
    pub fn apply_weights(&mut self, corrected: bool) -> Result<()> {
        let given = self.spectrum || (corrected && self.from_file);
        if !given {
            return Ok(());
        }
        let what = if self.spectrum { "-spectrum" } else { "-sourcefile" };
        if let Some(w) = self.list.iter().map(|s| s.weight).find(|w| !(w.is_finite() && *w >= 0.0))
        {
            return Err(Error::Invalid {
                what,
                msg: format!("source weight {w} is not a finite non-negative number"),
            });
        }
        if self.list.iter().all(|s| s.weight == 0.0) {
            return Err(Error::Invalid { what, msg: "every source weight is 0".into() });
        }
        let w0 = self.list[0].weight;
        self.weighted = self.list.iter().any(|s| s.weight != w0);
        Ok(())
    }

    /// Each source's factor on its photons: its weight over the mean
    /// weight (n wᵢ / Σw, so that dividing the sum by the number of samples
    /// gives Σ wᵢ Iᵢ / Σ w), or all 1 where the render does not weight.
    pub fn kernel_weights(&self) -> Vec<f64> {
        if !self.weighted {
            return vec![1.0; self.list.len()];
        }
        let sum: f64 = self.list.iter().map(|s| s.weight).sum();
        let n = self.list.len() as f64;
        self.list.iter().map(|s| n * s.weight / sum).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_steps_selection() {
        // nothing given: one step of zero width
        assert_eq!(auto_steps(-1.0, -1.0, -1), (0.0, 0.0, 1));
        // range only: two steps one range apart
        assert_eq!(auto_steps(2.0, -1.0, -1), (2.0, 2.0, 2));
        // range and step: ceil(range/step)
        assert_eq!(auto_steps(1.6, 0.4, -1), (1.6, 0.4, 4));
        // range and count: step = range/(count-1)
        assert_eq!(auto_steps(2.0, -1.0, 5), (2.0, 0.5, 5));
        // count only: unit range
        assert_eq!(auto_steps(-1.0, -1.0, 4), (1.0, 0.25, 4));
        // step only: two steps
        assert_eq!(auto_steps(-1.0, 0.3, -1), (0.3, 0.3, 2));
        // zero range collapses
        assert_eq!(auto_steps(0.0, -1.0, 5), (0.0, 0.0, 1));
    }

    #[test]
    fn round_divergence_trims_corners() {
        let cfg = BeamConfig {
            hdivrange_mrad: 2.0,
            vdivrange_mrad: 1.0,
            hdivsteps: 5,
            vdivsteps: 3,
            ..Default::default()
        };
        let s = Sources::resolve(&cfg, 1e-10, [1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, -1.0, 0.0])
            .unwrap();
        assert!(s.divsteps < 15 && s.divsteps > 1);
        let sq = BeamConfig { round_div: false, ..cfg };
        let s2 = Sources::resolve(&sq, 1e-10, [1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, -1.0, 0.0])
            .unwrap();
        assert_eq!(s2.divsteps, 15);
        // every direction is a unit vector pointing back along the beam
        for src in &s2.list {
            assert!((crate::vec3::magnitude(src.dir) - 1.0).abs() < 1e-12);
            assert!(src.dir[0] < -0.99);
        }
    }
}
