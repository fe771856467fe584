//! X-ray sources: beam divergence, spectral dispersion and user source files.

pub mod sourcefile;

use crate::config::BeamConfig;
use crate::error::{Error, Result};
use crate::vec3::{rotate_axis, unitize};

/// Resolve a (range, step, count) triple the way nanoBragg.c auto-selects
/// divergence and dispersion sampling: any two given determine the third,
/// and a degenerate result collapses to one step of zero width.
pub fn auto_steps(mut range: f64, mut step: f64, mut steps: i64) -> (f64, f64, i64) {
    if steps <= 0 {
        if range < 0.0 {
            if step <= 0.0 {
                steps = 1;
                range = 0.0;
                step = 0.0;
            } else {
                range = step;
                steps = 2;
            }
        } else if step <= 0.0 {
            step = range;
            steps = 2;
        } else {
            steps = (range / step).ceil() as i64;
        }
    } else if range < 0.0 {
        if step <= 0.0 {
            range = 1.0;
            step = range / steps as f64;
        } else {
            range = step;
            steps = 2;
        }
    } else if step <= 0.0 {
        if steps <= 1 {
            steps = 2;
        }
        step = range / (steps - 1) as f64;
    }
    if range <= 0.0 || step <= 0.0 || steps <= 0 {
        (0.0, 0.0, 1)
    } else {
        (range, step, steps)
    }
}

/// One X-ray source point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Source {
    /// Position as generated or read (m), before normalisation.
    pub position: [f64; 3],
    /// Weight (nanoBragg.c ignores it when rendering).
    pub weight: f64,
    /// Wavelength (m).
    pub lambda_m: f64,
    /// Unit vector from the sample towards the source.
    pub dir: [f64; 3],
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
        let (hdivrange, hdivstep, hdivsteps) =
            auto_steps(cfg.hdivrange_mrad / 1000.0, cfg.hdivstep_mrad / 1000.0, cfg.hdivsteps);
        let (vdivrange, vdivstep, vdivsteps) =
            auto_steps(cfg.vdivrange_mrad / 1000.0, cfg.vdivstep_mrad / 1000.0, cfg.vdivsteps);
        let (dispersion, dispstep, dispsteps) =
            auto_steps(cfg.dispersion_pct / 100.0, -1.0, cfg.dispsteps);
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
                let lambda_m = if r[4].is_nan() { lambda0_m } else { r[4] };
                list.push(Source { position: pos, weight, lambda_m, dir: [0.0; 3] });
            }
        }
        if list.is_empty() {
            let keep = |hdiv: f64, vdiv: f64| {
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
                    let hdiv = hdivstep * h as f64 - hdivrange / 2.0;
                    let vdiv = vdivstep * v as f64 - vdivrange / 2.0;
                    if keep(hdiv, vdiv) {
                        divsteps += 1;
                        div_points.push((hdiv, vdiv));
                    }
                }
            }
            for d in 0..dispsteps {
                lambdas.push(lambda0_m * (1.0 + dispstep * d as f64 - dispersion / 2.0));
            }
            let n = (divsteps * dispsteps) as f64;
            let weight = 1.0 / n;
            for &(hdiv, vdiv) in &div_points {
                let v0 = [-sd * beam[0], -sd * beam[1], -sd * beam[2]];
                let v1 = rotate_axis(v0, polar, vdiv);
                let pos = rotate_axis(v1, vert, hdiv);
                for &lambda_m in &lambdas {
                    list.push(Source { position: pos, weight, lambda_m, dir: [0.0; 3] });
                }
            }
        }
        if list.is_empty() {
            return Err(Error::Invalid {
                what: "-divergence",
                msg: "no source points remain".into(),
            });
        }
        for s in &mut list {
            s.dir = unitize(s.position).0;
            if !(s.lambda_m > 0.0 && s.lambda_m.is_finite()) {
                return Err(Error::Invalid {
                    what: "-lambda",
                    msg: format!("wavelength {} m is not positive", s.lambda_m),
                });
            }
        }
        Ok(Sources {
            list,
            hdivrange,
            hdivstep,
            hdivsteps,
            vdivrange,
            vdivstep,
            vdivsteps,
            dispersion,
            dispstep,
            dispsteps,
            divsteps,
            div_points,
            lambdas,
        })
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
