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
        let [f, s, o] = self.frame(base.beam)?;
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

    /// The panel's orthonormal frame: its fast axis, its slow axis made
    /// perpendicular to fast (refined geometries are perpendicular to a few
    /// 1e-4, and the placement by the closest point needs it exactly), and
    /// the normal away from the sample (`f × s` may point at it). The
    /// single-panel detector of [`PanelConfig::detector`] has
    /// `close_distance = origin · o`, `Xbeam = −origin · f`,
    /// `Ybeam = −origin · s` in it.
    pub fn frame(&self, beam: [f64; 3]) -> Result<[[f64; 3]; 3]> {
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
        let c = dot(f, s);
        let s = [s[0] - c * f[0], s[1] - c * f[1], s[2] - c * f[2]];
        let m = magnitude(s);
        let s = if c.abs() < 1e-12 { self.slow } else { s.map(|x| x / m) };
        if !(self.pixel_mm > 0.0 && self.fpixels > 0 && self.spixels > 0) {
            return Err(bad(format!("panel {}: no pixels (size or counts zero)", self.name)));
        }
        let mut o = cross(f, s);
        if dot(o, beam) < 0.0 {
            o = o.map(|x| -x);
        }
        Ok([f, s, o])
    }
}

/// Where each panel's pixels lie in the one image a multi-panel run writes:
/// at the panels' `data_origin`s (a CrystFEL geometry's data layout) where
/// no two of them overlap, else stacked along slow in the panels' order
/// (panels of one width).
#[derive(Debug, Clone, PartialEq)]
pub struct PanelLayout {
    /// The image's pixels along fast.
    pub width: usize,
    /// The image's pixels along slow.
    pub height: usize,
    /// Each panel's first pixel in the image (fast, slow).
    pub origins: Vec<[usize; 2]>,
    /// Each panel's pixels (fast, slow).
    pub sizes: Vec<[usize; 2]>,
}

/// What one pixel of the whole detector's image costs across a run's
/// images: f32 and f64 values, int32 and 16-bit outputs.
const BYTES_PER_IMAGE_PIXEL: u128 = 4 + 8 + 4 + 2;

impl PanelLayout {
    /// The layout of `d`'s panels; panels of several widths that must be
    /// stacked are refused.
    pub fn new(d: &DetectorConfig) -> Result<Self> {
        let bad = |msg: String| Error::Invalid { what: "-expt", msg };
        let panels = &d.panels;
        let sizes: Vec<[usize; 2]> = panels.iter().map(|p| [p.fpixels, p.spixels]).collect();
        let given: Vec<[usize; 2]> = panels.iter().filter_map(|p| p.data_origin).collect();
        if !given.is_empty() && given.len() != panels.len() {
            return Err(bad("some panels have a place in the data array and some not".into()));
        }
        // two panels with a pixel of the data array in common, if any (files
        // that give each panel its own slab with `dim` keys all start at 0, 0)
        let span =
            |o: &[[usize; 2]], k: usize, axis: usize| o[k][axis]..o[k][axis] + sizes[k][axis];
        let overlap = |o: &[[usize; 2]]| {
            for i in 0..o.len() {
                for j in i + 1..o.len() {
                    let meets = |axis| {
                        let (a, b) = (span(o, i, axis), span(o, j, axis));
                        a.start < b.end && b.start < a.end
                    };
                    if meets(0) && meets(1) {
                        return Some((i, j));
                    }
                }
            }
            None
        };
        let clash = if given.is_empty() { None } else { overlap(&given) };
        let origins = if !given.is_empty() && clash.is_none() {
            given
        } else {
            // stacked along slow in the panels' order
            let width = sizes.first().map_or(0, |s| s[0]);
            if let Some(p) = panels.iter().find(|p| p.fpixels != width) {
                let why = match clash {
                    Some((i, j)) => format!(
                        "panels {} and {} overlap in the data array (min_fs/min_ss), so the panels are stacked along slow into one image",
                        panels[i].name, panels[j].name
                    ),
                    None => "the panels are stacked along slow into one image".into(),
                };
                return Err(bad(format!(
                    "{why}, which needs one width: panel {} is {} pixels wide, panel {} {}",
                    p.name, p.fpixels, panels[0].name, width
                )));
            }
            let mut at = 0;
            sizes
                .iter()
                .map(|s| {
                    at += s[1];
                    [0, at - s[1]]
                })
                .collect()
        };
        let span = |k: usize, axis: usize| span(&origins, k, axis);
        let width = (0..panels.len()).map(|k| span(k, 0).end).max().unwrap_or(0);
        let height = (0..panels.len()).map(|k| span(k, 1).end).max().unwrap_or(0);
        // the whole detector's images (float, f64 sums, int32 and 16-bit
        // outputs): a data array far larger than its panels (a min_fs of
        // 10⁹) is refused before anything is allocated
        let bytes = width as u128 * height as u128 * BYTES_PER_IMAGE_PIXEL;
        if bytes > crate::memory::budget_for(bytes) {
            return Err(Error::TooLarge {
                what: format!("the detector's data array ({width} x {height} pixels)"),
                bytes,
            });
        }
        Ok(PanelLayout { width, height, origins, sizes })
    }

    /// Whether the panels fill the image row after row in their order:
    /// each panel's pixels are then one piece of the image, the next panel's
    /// right after.
    pub fn is_stacked(&self) -> bool {
        let mut at = 0;
        self.origins.iter().zip(&self.sizes).all(|(o, s)| {
            let ok = o[0] == 0 && s[0] == self.width && o[1] == at;
            at += s[1];
            ok
        }) && at == self.height
    }

    /// Panel `k`'s pixels copied into their place in `image`.
    pub fn put<T: Copy>(&self, k: usize, panel: &[T], image: &mut [T]) {
        let ([x, y], [f, s]) = (self.origins[k], self.sizes[k]);
        for (row, src) in panel.chunks_exact(f.max(1)).take(s).enumerate() {
            let at = (y + row) * self.width + x;
            image[at..at + f].copy_from_slice(src);
        }
    }

    /// One panel covering a `width` × `height` image.
    pub fn whole(width: usize, height: usize) -> Self {
        PanelLayout { width, height, origins: vec![[0, 0]], sizes: vec![[width, height]] }
    }

    /// Panel `k`'s pixels taken from `image`.
    pub fn get<T: Copy>(&self, k: usize, image: &[T]) -> Vec<T> {
        let ([x, y], [f, s]) = (self.origins[k], self.sizes[k]);
        (0..s).flat_map(|row| &image[(y + row) * self.width + x..][..f]).copied().collect()
    }

    /// Panel `k`'s pixels of `image` (the whole image) in one piece: a slice
    /// of it where the panels are stacked in order ([`Self::is_stacked`]),
    /// else a copy ([`Self::get`]). Images are large (a backward pass's
    /// weights, a 16-megapixel frame): a copy of each panel's pixels costs
    /// more than a tenth of a 1024² `Jᵀv`.
    pub fn piece<'a, T: Copy>(&self, k: usize, image: &'a [T]) -> std::borrow::Cow<'a, [T]> {
        let ([_, y], [f, s]) = (self.origins[k], self.sizes[k]);
        match self.is_stacked() && image.len() == self.width * self.height {
            true => std::borrow::Cow::Borrowed(&image[y * self.width..][..f * s]),
            false => std::borrow::Cow::Owned(self.get(k, image)),
        }
    }

    /// The image's pixels that belong to a panel (1) or to none (0); `None`
    /// where the panels cover the whole image.
    pub fn coverage(&self) -> Option<Vec<u16>> {
        let covered: usize = self.sizes.iter().map(|s| s[0] * s[1]).sum();
        if covered == self.width * self.height {
            return None;
        }
        let mut map = vec![0u16; self.width * self.height];
        for (k, s) in self.sizes.iter().enumerate() {
            self.put(k, &vec![1u16; s[0] * s[1]], &mut map);
        }
        Some(map)
    }

    /// The image's ROI (`-roi`), its negative bounds resolved to the edges
    /// as a single panel's are.
    pub fn roi(&self, d: &DetectorConfig) -> [i64; 4] {
        let r = d.roi.unwrap_or([-1; 4]);
        let edge = |v: i64, e: usize| if v < 0 { e as i64 } else { v };
        [edge(r[0], 0), edge(r[1], self.width), edge(r[2], 0), edge(r[3], self.height)]
    }
}

/// The configuration of each panel of `cfg` as a single-panel one (one
/// configuration, `cfg` itself, where it has no panel list).
///
/// `-roi` and `-mask` describe the written image (see [`PanelLayout`]):
/// each panel gets the part of them that falls on it (a panel the ROI
/// misses renders no pixel).
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
    let layout = PanelLayout::new(d)?;
    if let Some(mask) = &d.mask {
        if mask.len() != layout.width * layout.height {
            return refuse(
                "-mask",
                format!(
                    "the mask has {} pixels; for this multi-panel detector it must cover the image of its panels: {} x {} pixels",
                    mask.len(),
                    layout.width,
                    layout.height
                ),
            );
        }
    }
    let roi = d.roi.map(|_| layout.roi(d));
    let mut configs = Vec::with_capacity(d.panels.len());
    for (k, p) in d.panels.iter().enumerate() {
        let mut c = cfg.clone();
        c.detector = p.detector(d)?;
        let ([x, y], [f, s]) = (layout.origins[k], layout.sizes[k]);
        let (x, y, f, s) = (x as i64, y as i64, f as i64, s as i64);
        c.detector.roi = roi.map(|r| {
            let (x0, x1, y0, y1) = (r[0] - x, r[1] - x, r[2] - y, r[3] - y);
            if x1 < 0 || x0 > f - 1 || y1 < 0 || y0 > s - 1 {
                // no pixel of this panel: a range past its last row
                [0, 0, s, s]
            } else {
                [x0.max(0), x1.min(f), y0.max(0), y1.min(s)]
            }
        });
        c.detector.mask = d.mask.as_ref().map(|m| layout.get(k, m));
        configs.push(c);
    }
    Ok(configs)
}
