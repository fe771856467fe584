//! Multi-panel detectors: each panel becomes the single custom-vector panel
//! the nanoBragg.c flags describe, so that every panel is rendered by the
//! one plan and kernel (and equals a render of those flags).

use crate::config::{Convention, DetectorConfig, PanelConfig, Pivot, SimConfig};
use crate::error::{Error, Result};
use crate::vec3::{cross, dot, magnitude};

impl PanelConfig {
    /// The single-panel detector of this panel: `base`'s beam, polarization
    /// and spindle axes, sensor, sampling options, ROI and mask, this
    /// panel's axes and pixels, placed by the sample pivot (the closest point of the panel's
    /// plane and the distance to it, which put the first pixel's corner at
    /// [`PanelConfig::origin_mm`]).
    pub fn detector(&self, base: &DetectorConfig) -> Result<DetectorConfig> {
        let bad = |msg: String| Error::Invalid { what: "-expt", msg };
        let (f, s) = (self.fast, self.slow);
        if (magnitude(f) - 1.0).abs() > 1e-6 || (magnitude(s) - 1.0).abs() > 1e-6 {
            return Err(bad(format!(
                "panel {}: the fast and slow axes must be unit vectors",
                self.name
            )));
        }
        if dot(f, s).abs() > 1e-2 {
            return Err(bad(format!(
                "panel {}: the fast and slow axes are not perpendicular (cosine {:e})",
                self.name,
                dot(f, s)
            )));
        }
        // refined geometries are perpendicular to a few 1e-4: slow is made
        // perpendicular to fast (the placement by the closest point needs it)
        let c = dot(f, s);
        let s = [s[0] - c * f[0], s[1] - c * f[1], s[2] - c * f[2]];
        let m = magnitude(s);
        let s = if c.abs() < 1e-12 { self.slow } else { s.map(|x| x / m) };
        if !(self.pixel_mm > 0.0 && self.fpixels > 0 && self.spixels > 0) {
            return Err(bad(format!("panel {}: no pixels (size or counts zero)", self.name)));
        }
        // the normal away from the sample (f × s may point at it)
        let mut o = cross(f, s);
        if dot(o, base.beam) < 0.0 {
            o = o.map(|x| -x);
        }
        let origin = self.origin_mm;
        Ok(DetectorConfig {
            pixel_mm: self.pixel_mm,
            fpixels: self.fpixels as i64,
            spixels: self.spixels as i64,
            detsize_f_mm: self.pixel_mm * self.fpixels as f64,
            detsize_s_mm: self.pixel_mm * self.spixels as f64,
            close_distance_mm: Some(dot(origin, o)),
            // custom convention: the closest point is -Xbeam/-Ybeam
            xbeam_mm: Some(-dot(origin, f)),
            ybeam_mm: Some(-dot(origin, s)),
            xclose_mm: None,
            yclose_mm: None,
            orgx_px: None,
            orgy_px: None,
            pivot: Pivot::Sample,
            convention: Convention::Custom,
            fdet: f,
            sdet: s,
            odet: o,
            pix0: None,
            panels: Vec::new(),
            ..base.clone()
        })
    }
}

/// The ROI of a multi-panel detector's stacked image (every panel's rows
/// along slow, the first panel's width), its negative bounds resolved to the
/// edges as a single panel's are.
pub fn stacked_roi(d: &DetectorConfig) -> [i64; 4] {
    let rows: usize = d.panels.iter().map(|p| p.spixels).sum();
    let width = d.panels.first().map_or(0, |p| p.fpixels) as i64;
    let r = d.roi.unwrap_or([-1; 4]);
    let edge = |v: i64, e: i64| if v < 0 { e } else { v };
    [edge(r[0], 0), edge(r[1], width), edge(r[2], 0), edge(r[3], rows as i64)]
}

/// The configuration of each panel of `cfg` as a single-panel one (one
/// configuration, `cfg` itself, where it has no panel list).
///
/// The panels' images stack along slow in their order, and `-roi` and
/// `-mask` describe that stacked image: each panel gets the rows of them
/// that fall on it (a panel the ROI misses renders no pixel).
pub fn panel_configs(cfg: &SimConfig) -> Result<Vec<SimConfig>> {
    let d = &cfg.detector;
    if d.panels.is_empty() {
        return Ok(vec![cfg.clone()]);
    }
    let refuse = |what: &'static str, msg: String| Err(Error::Invalid { what, msg });
    if [d.rotx_deg, d.roty_deg, d.rotz_deg, d.twotheta_deg].iter().any(|&x| x != 0.0) {
        return refuse(
            "-detector_rot*/-twotheta",
            "a multi-panel detector (-expt) is placed by its panels' vectors: move or turn the panels in the file".into(),
        );
    }
    if d.curved {
        return refuse(
            "-curved_det",
            "not available for a multi-panel detector (-expt): its panels are flat".into(),
        );
    }
    let rows: usize = d.panels.iter().map(|p| p.spixels).sum();
    let width = d.panels[0].fpixels;
    if let Some(mask) = &d.mask {
        if d.panels.iter().any(|p| p.fpixels != width) || mask.len() != width * rows {
            return refuse(
                "-mask",
                format!(
                    "the mask has {} pixels; for this multi-panel detector it must cover the panels stacked along slow: {} x {} pixels",
                    mask.len(),
                    width,
                    rows
                ),
            );
        }
    }
    let roi = d.roi.map(|_| stacked_roi(d));
    let mut at = 0usize;
    let mut configs = Vec::with_capacity(d.panels.len());
    for p in &d.panels {
        let mut c = cfg.clone();
        c.detector = p.detector(d)?;
        let first = at as i64;
        let sp = p.spixels as i64;
        c.detector.roi = roi.map(|r| {
            let (lo, hi) = (r[2] - first, r[3] - first);
            if hi < 0 || lo > sp - 1 {
                // no row of this panel: a range past its last row
                [r[0], r[1], sp, sp]
            } else {
                [r[0], r[1], lo.max(0), hi.min(sp)]
            }
        });
        c.detector.mask = d.mask.as_ref().map(|m| m[at * width..(at + p.spixels) * width].to_vec());
        at += p.spixels;
        configs.push(c);
    }
    Ok(configs)
}
