//! Spots for `refine`: strong spots found on the observed image, the model's
//! predicted positions for them, and a least-squares fit of the geometric
//! parameters to the spot centroids. The pixel loss is flat wherever the
//! model's spots miss the observed ones; the centroid fit brings them
//! together first (as DIALS refines against centroids after indexing), and
//! its residuals and the share of spots the final model explains say whether
//! a fit worked. See docs/refine.md.

use crate::parameters::Parameters;
use anyhow::Result;
use nanobragg_core::diff::Param;
use nanobragg_core::setup::Plan;
use nanobragg_core::vec3::{cross, dot, magnitude as norm, scale};
use rayon::prelude::*;

/// A strong spot on an image: its intensity-weighted centroid in pixel
/// units (the centre of pixel `f` is `f + 0.5`) and its photons above the
/// local background.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spot {
    /// Centroid along the fast axis (pixels).
    pub fast: f64,
    /// Centroid along the slow axis (pixels).
    pub slow: f64,
    /// Photons above the background.
    pub photons: f64,
    /// Pixels above the threshold.
    pub pixels: usize,
    /// The panel it lies on (its centroid in that panel's pixels; 0 for a
    /// single-panel detector).
    pub panel: usize,
}

/// Side of the tiles the background is estimated in (pixels).
const TILE: usize = 16;
/// The fewest photons above the background a spot holds.
pub const MIN_PHOTONS: f64 = 30.0;
/// A pixel is strong above `background + SIGMAS · √max(background, 1)`.
const SIGMAS: f64 = 4.0;

/// The strong spots of an image of `fpixels × spixels` photons (fast index
/// fastest), `skip` pixels left out: pixels above the local background
/// (the median of their tile) by [`SIGMAS`] Poisson deviations, joined
/// into 8-connected spots of at least `min_photons` above the background.
/// Spots are returned strongest first.
pub fn find_spots(
    values: &[f32],
    skip: &[bool],
    fpixels: usize,
    spixels: usize,
    min_photons: f64,
) -> Vec<Spot> {
    let background = tile_medians(values, skip, fpixels, spixels);
    let bg_at = |f: usize, s: usize| {
        let tiles_f = fpixels.div_ceil(TILE);
        background[(s / TILE) * tiles_f + f / TILE]
    };
    let strong: Vec<bool> = (0..values.len())
        .map(|i| {
            let (f, s) = (i % fpixels, i / fpixels);
            let bg = bg_at(f, s);
            !skip[i] && (values[i] as f64) > bg + SIGMAS * bg.max(1.0).sqrt()
        })
        .collect();
    let mut seen = vec![false; values.len()];
    let mut spots = Vec::new();
    let mut stack = Vec::new();
    for start in 0..values.len() {
        if !strong[start] || seen[start] {
            continue;
        }
        seen[start] = true;
        stack.push(start);
        let (mut sum, mut sf, mut ss, mut n) = (0.0, 0.0, 0.0, 0usize);
        while let Some(i) = stack.pop() {
            let (f, s) = (i % fpixels, i / fpixels);
            let w = values[i] as f64 - bg_at(f, s);
            sum += w;
            sf += w * (f as f64 + 0.5);
            ss += w * (s as f64 + 0.5);
            n += 1;
            for ds in -1i64..=1 {
                for df in -1i64..=1 {
                    let (g, t) = (f as i64 + df, s as i64 + ds);
                    if g < 0 || t < 0 || g >= fpixels as i64 || t >= spixels as i64 {
                        continue;
                    }
                    let j = t as usize * fpixels + g as usize;
                    if strong[j] && !seen[j] {
                        seen[j] = true;
                        stack.push(j);
                    }
                }
            }
        }
        if sum >= min_photons && sum > 0.0 {
            spots.push(Spot { fast: sf / sum, slow: ss / sum, photons: sum, pixels: n, panel: 0 });
        }
    }
    spots.sort_by(|a, b| b.photons.total_cmp(&a.photons));
    spots
}

/// The strong spots of an image of `model`'s detector ([`find_spots`] on
/// each panel's pixels), strongest first.
pub fn find_panel_spots(model: &Parameters, values: &[f32], skip: &[bool]) -> Vec<Spot> {
    let mut spots = Vec::new();
    for (k, (_, [f, s])) in model.panel_boxes().into_iter().enumerate() {
        let (v, m) = (model.panel_pixels(k, values), model.panel_pixels(k, skip));
        let found = find_spots(&v, &m, f, s, MIN_PHOTONS);
        spots.extend(found.into_iter().map(|x| Spot { panel: k, ..x }));
    }
    spots.sort_by(|a, b| b.photons.total_cmp(&a.photons));
    spots
}

/// The median of each `TILE × TILE` tile's used pixels (0 for a tile with
/// none), tiles in raster order.
fn tile_medians(values: &[f32], skip: &[bool], fpixels: usize, spixels: usize) -> Vec<f64> {
    let (tf, ts) = (fpixels.div_ceil(TILE), spixels.div_ceil(TILE));
    let mut out = Vec::with_capacity(tf * ts);
    let mut buf = Vec::with_capacity(TILE * TILE);
    for ty in 0..ts {
        for tx in 0..tf {
            buf.clear();
            for s in ty * TILE..((ty + 1) * TILE).min(spixels) {
                for f in tx * TILE..((tx + 1) * TILE).min(fpixels) {
                    let i = s * fpixels + f;
                    if !skip[i] {
                        buf.push(values[i]);
                    }
                }
            }
            if buf.is_empty() {
                out.push(0.0);
                continue;
            }
            let mid = buf.len() / 2;
            let (_, m, _) = buf.select_nth_unstable_by(mid, f32::total_cmp);
            out.push(*m as f64);
        }
    }
    out
}

/// The geometry of a still as the spots see it: the detector plane, the
/// incident wave vector and the crystal's real and reciprocal axes.
#[derive(Clone, Copy)]
struct Still {
    pix0: [f64; 3],
    fdet: [f64; 3],
    sdet: [f64; 3],
    odet: [f64; 3],
    pixel_m: f64,
    /// Incident wave vector, 1/m (the beam direction over λ).
    s0: [f64; 3],
    real: [[f64; 3]; 3],
    recip: [[f64; 3]; 3],
    /// The lattice factor's shape near a reciprocal-lattice point:
    /// `Σ Nᵢ² aᵢ aᵢᵀ`, whose quadratic form in q − q₀ is (up to a constant)
    /// the Gaussian that falls off like the spot.
    metric: [[f64; 3]; 3],
}

impl Still {
    /// Each panel's still at `values`.
    fn all(model: &Parameters, values: &[f64]) -> Result<Vec<Still>> {
        Ok(model.plans_at(values)?.iter().map(Still::of).collect())
    }

    fn of(plan: &Plan) -> Self {
        let d = &plan.detector;
        let c = &plan.cell;
        let real = [c.a_m, c.b_m, c.c_m];
        let v = dot(real[0], cross(real[1], real[2]));
        let recip = [
            cross(real[1], real[2]).map(|x| x / v),
            cross(real[2], real[0]).map(|x| x / v),
            cross(real[0], real[1]).map(|x| x / v),
        ];
        let mut metric = [[0.0; 3]; 3];
        for (a, n) in real.iter().zip(plan.n_cells) {
            for i in 0..3 {
                for j in 0..3 {
                    metric[i][j] += n * n * a[i] * a[j];
                }
            }
        }
        Still {
            metric,
            pix0: d.pix0,
            fdet: d.fdet,
            sdet: d.sdet,
            odet: d.odet,
            pixel_m: d.pixel_size_m,
            s0: d.beam.map(|x| x / plan.sources.central_lambda_m),
            real,
            recip,
        }
    }

    /// Fractional Miller indices of the scattering vector of the pixel
    /// position `(fast, slow)` (pixel units).
    fn hkl_at(&self, fast: f64, slow: f64) -> [f64; 3] {
        let q = self.q_at(fast, slow);
        self.real.map(|r| dot(r, q))
    }

    /// The lab position (m, from the sample) of the pixel position
    /// `(fast, slow)`.
    fn point_at(&self, fast: f64, slow: f64) -> [f64; 3] {
        add(
            self.pix0,
            add(scale(self.fdet, fast * self.pixel_m), scale(self.sdet, slow * self.pixel_m)),
        )
    }

    /// The reciprocal-lattice point (1/m) of the reflection `hkl`.
    fn lattice_point(&self, hkl: [f64; 3]) -> [f64; 3] {
        add(
            scale(self.recip[0], hkl[0]),
            add(scale(self.recip[1], hkl[1]), scale(self.recip[2], hkl[2])),
        )
    }

    /// The scattering vector (1/m) of the pixel position `(fast, slow)`.
    fn q_at(&self, fast: f64, slow: f64) -> [f64; 3] {
        let p = self.point_at(fast, slow);
        let k = norm(self.s0);
        sub(scale(p, k / norm(p)), self.s0)
    }

    /// The excitation error of the observed point `(fast, slow)` (pixel
    /// units) for the reflection `hkl`: how far the reciprocal-lattice
    /// point lies off the Ewald sphere there, along the sphere's normal, in
    /// widths of the lattice factor in that direction (`√(nᵀ M n)` with
    /// [`Still::metric`]). A still's spot centroid barely moves when the
    /// crystal turns about an axis across the beam, but its lattice point
    /// leaves the sphere: this sees it.
    fn excitation(&self, fast: f64, slow: f64, hkl: [f64; 3]) -> f64 {
        let p = self.point_at(fast, slow);
        let k = norm(self.s0);
        let n = scale(p, 1.0 / norm(p));
        let q = sub(scale(n, k), self.s0);
        let q0 = self.lattice_point(hkl);
        let per_width = dot(n, self.metric.map(|row| dot(row, n))).sqrt();
        dot(sub(q, q0), n) * per_width
    }

    /// Where the reflection `hkl` falls (pixel units), the spot's centre for
    /// a still: the diffracted ray through the point of the Ewald sphere
    /// where the lattice factor around the reciprocal-lattice point is
    /// largest (in [`Still::metric`]; for an isotropic spot the point
    /// nearest to it).
    fn position_of(&self, hkl: [f64; 3]) -> Option<[f64; 2]> {
        let q0 = self.lattice_point(hkl);
        let k = norm(self.s0);
        let m = |x: [f64; 3]| self.metric.map(|row| dot(row, x));
        let mut s1 = add(self.s0, q0);
        s1 = scale(s1, k / norm(s1));
        // minimise (q − q₀)ᵀ M (q − q₀) over the sphere |s1| = k: Newton
        // steps in the tangent plane, back onto the sphere after each
        for _ in 0..4 {
            let n = scale(s1, 1.0 / k);
            let helper = if n[0].abs() < 0.9 { [1.0, 0.0, 0.0] } else { [0.0, 1.0, 0.0] };
            let u = cross(n, helper);
            let u = scale(u, 1.0 / norm(u));
            let v = cross(n, u);
            let d = sub(sub(s1, self.s0), q0);
            let (mu, mv) = (m(u), m(v));
            let (a, b, c) = (dot(u, mu), dot(u, mv), dot(v, mv));
            let (ru, rv) = (-dot(u, m(d)), -dot(v, m(d)));
            let det = a * c - b * b;
            if det.abs() < 1e-300 {
                break;
            }
            let (alpha, beta) = ((ru * c - rv * b) / det, (a * rv - b * ru) / det);
            let t = add(scale(u, alpha), scale(v, beta));
            s1 = add(s1, t);
            s1 = scale(s1, k / norm(s1));
        }
        let den = dot(s1, self.odet);
        if den.abs() < 1e-300 {
            return None;
        }
        let t = dot(self.pix0, self.odet) / den;
        if t.is_nan() || t <= 0.0 {
            return None;
        }
        let x = sub(scale(s1, t), self.pix0);
        Some([dot(x, self.fdet) / self.pixel_m, dot(x, self.sdet) / self.pixel_m])
    }
}

/// The parameters a spot's position depends on.
pub fn moves_spots(p: Param) -> bool {
    use Param::*;
    matches!(
        p,
        Distance
            | CloseDistance
            | Xbeam
            | Ybeam
            | DetectorRotX
            | DetectorRotY
            | DetectorRotZ
            | Twotheta
            | CellA
            | CellB
            | CellC
            | CellAlpha
            | CellBeta
            | CellGamma
            | MissetX
            | MissetY
            | MissetZ
            | Lambda
            | LambdaOffset
            | LambdaScale
    )
}

/// The finite-difference step of a parameter in the centroid fit.
fn step_of(p: Param, value: f64) -> f64 {
    match p.unit() {
        "mm" | "Å" | "deg" => 1e-3,
        _ => 1e-5 * value.abs().max(1e-3),
    }
}

/// What the centroid fit found.
#[derive(Debug, Clone)]
pub struct CentroidFit {
    /// The fitted values of the parameters (all of them, those the spots
    /// do not see unchanged).
    pub values: Vec<f64>,
    /// Spots indexed (within [`INDEXED`] of a whole hkl) at the end.
    pub indexed: usize,
    /// Spots found on the observed image.
    pub spots: usize,
    /// Rms distance between observed and predicted centroids (pixels).
    pub rms_px: f64,
    /// Starting points fitted (the start and the search's points).
    pub starts: usize,
    /// Whether refine started the pixel fit from these values (their
    /// pixel loss is below the start's).
    pub kept: bool,
}

/// A spot counts as indexed when each of its fractional Miller indices lies
/// within this of a whole number.
pub const INDEXED: f64 = 0.25;

/// Per spot: the differences (pixels; fast, slow) between the predicted
/// positions of `hkls` at `values` and the observed centroids, and the
/// excitation error at the centroid (in [`EXCITATION_PX`] pixels per width),
/// each times √(the spot's photons): a weak spot is a slice through the far
/// tail of its reflection, centred less well. `None` when a reflection does
/// not reach the detector plane.
fn residuals(
    model: &Parameters,
    values: &[f64],
    spots: &[Spot],
    hkls: &[[f64; 3]],
) -> Result<Option<Vec<f64>>> {
    let stills = Still::all(model, values)?;
    let mut r = Vec::with_capacity(3 * hkls.len());
    for (s, hkl) in spots.iter().zip(hkls) {
        let still = &stills[s.panel];
        let Some([f, sl]) = still.position_of(*hkl) else { return Ok(None) };
        let w = s.photons.max(0.0).sqrt();
        r.push(w * (f - s.fast));
        r.push(w * (sl - s.slow));
        r.push(w * EXCITATION_PX * still.excitation(s.fast, s.slow, *hkl));
    }
    Ok(Some(r))
}

/// The weight of a spot's excitation error (in widths of its lattice
/// factor) against its centroid residual (pixels): one width counts as this
/// many pixels. The spots a still shows lie within about half a width of
/// the sphere, on both sides, so the right orientation centres them.
const EXCITATION_PX: f64 = 1.0;

/// The spots indexed by the model at `values`, with their whole hkl: the
/// strongest spot of each hkl (a spot's side lobes, found as spots of
/// their own, index alike), in the order of `spots`.
fn index(model: &Parameters, values: &[f64], spots: &[Spot]) -> Result<(Vec<Spot>, Vec<[f64; 3]>)> {
    let stills = Still::all(model, values)?;
    let mut best: std::collections::HashMap<[i64; 3], usize> = Default::default();
    let mut whole_of = vec![None; spots.len()];
    for (i, s) in spots.iter().enumerate() {
        let h = stills[s.panel].hkl_at(s.fast, s.slow);
        let whole = h.map(f64::round);
        if whole != [0.0; 3] && (0..3).all(|j| (h[j] - whole[j]).abs() <= INDEXED) {
            whole_of[i] = Some(whole);
            let key = whole.map(|x| x as i64);
            let e = best.entry(key).or_insert(i);
            if spots[*e].photons < s.photons {
                *e = i;
            }
        }
    }
    let (mut kept, mut hkls) = (Vec::new(), Vec::new());
    for (i, w) in whole_of.iter().enumerate() {
        if let Some(w) = w {
            if best[&w.map(|x| x as i64)] == i {
                kept.push(spots[i]);
                hkls.push(*w);
            }
        }
    }
    Ok((kept, hkls))
}

/// The spots the model at `values` indexes and the photon-weighted rms
/// distance (pixels) of their centroids from its predicted positions.
pub fn centroid_rms(model: &Parameters, values: &[f64], spots: &[Spot]) -> Result<(usize, f64)> {
    let (kept, hkls) = index(model, values, spots)?;
    let photons: f64 = kept.iter().map(|s| s.photons.max(0.0)).sum();
    let rms = match residuals(model, values, &kept, &hkls)? {
        Some(r) if photons > 0.0 => {
            let pixels = r.chunks(3).map(|c| c[0] * c[0] + c[1] * c[1]);
            (pixels.sum::<f64>() / photons).sqrt()
        }
        _ => f64::NAN,
    };
    Ok((kept.len(), rms))
}

/// Score of crystal axes `real` for spots at scattering vectors `qs`:
/// Σ exp(−|Δhkl|²/(2·0.1²)), the number of spots near whole Miller
/// indices, smoothly.
fn index_score(real: &[[f64; 3]; 3], qs: &[[f64; 3]]) -> f64 {
    qs.iter()
        .map(|q| {
            let d2: f64 = real.iter().map(|a| dot(*a, *q)).map(|x| (x - x.round()).powi(2)).sum();
            (-d2 / (2.0 * 0.01)).exp()
        })
        .sum()
}

/// The fewest of the lowest-resolution spots the search indexes (else a
/// quarter of them).
const SEARCH_SPOTS: usize = 60;

/// Fit the parameters that move spots to the centroids of `spots` by
/// damped Gauss–Newton, indexing from the low-resolution spots outwards.
///
/// The fit runs from `start` and from the best distinct points of a search
/// over crystal orientation, detector distance and beam centre; `judge` (the pixel loss at a
/// set of values, lower is better) picks among the results, since spot
/// centroids alone cannot always tell a turned crystal from a moved beam.
pub fn fit_centroids(
    model: &Parameters,
    start: &[f64],
    spots: &[Spot],
    judge: impl Fn(&[f64]) -> Result<f64>,
) -> Result<CentroidFit> {
    let params = model.params().to_vec();
    let free: Vec<usize> = (0..params.len()).filter(|&i| moves_spots(params[i].param)).collect();
    // low resolution first: the hkl of a spot errs in proportion to its
    // distance from the beam for orientation and cell errors
    let stills0 = Still::all(model, start)?;
    let mut by_res: Vec<(f64, Spot)> = spots
        .iter()
        .map(|s| {
            let still0 = &stills0[s.panel];
            let q = still0.lattice_point(still0.hkl_at(s.fast, s.slow));
            (norm(q), *s)
        })
        .collect();
    by_res.sort_by(|a, b| a.0.total_cmp(&b.0));
    let ordered: Vec<Spot> = by_res.iter().map(|x| x.1).collect();
    let low = &ordered[..ordered.len().min(SEARCH_SPOTS.max(ordered.len() / 4))];
    // the search in the beam centre alone, then with the orientation, then
    // with the distance too: more freedom finds more, and fits the few
    // low-resolution spots by chance more often
    let mut starts = vec![start.to_vec()];
    for (dims, count) in [(Dims::CENTRE, 1), (Dims::TURN, 2), (Dims::ALL, 3)] {
        starts.extend(search_starts(model, start, low, dims, count)?);
    }
    // the same point found by two searches is fitted once
    let mut unique: Vec<Vec<f64>> = Vec::new();
    for v in starts {
        if !unique.iter().any(|u| u.iter().zip(&v).all(|(a, b)| (a - b).abs() < 1e-9)) {
            unique.push(v);
        }
    }
    let mut best: Option<(f64, Vec<f64>)> = None;
    let tried = unique.len();
    for (k, from) in unique.into_iter().enumerate() {
        // a search point that makes an invalid model is skipped; the start's
        // own fit is not
        let fitted = refine_from(model, from, &free, &ordered)
            .and_then(|values| Ok((judge(&values)?, values)));
        let (loss, values) = match fitted {
            Ok(x) => x,
            Err(e) if k == 0 => return Err(e),
            Err(_) => continue,
        };
        if loss.is_finite() && best.as_ref().is_none_or(|(b, _)| loss < *b) {
            best = Some((loss, values));
        }
    }
    let values = best.map(|b| b.1).unwrap_or_else(|| start.to_vec());
    let (indexed, rms_px) = centroid_rms(model, &values, &ordered)?;
    Ok(CentroidFit { values, indexed, spots: spots.len(), rms_px, starts: tried, kept: false })
}

/// The centroid fit from `values`: on the lowest-resolution quarter of
/// `ordered` (sorted by resolution), then half, then all, re-indexing three
/// times at each.
fn refine_from(
    model: &Parameters,
    mut values: Vec<f64>,
    free: &[usize],
    ordered: &[Spot],
) -> Result<Vec<f64>> {
    let n = ordered.len();
    for frac in [0.25, 0.5, 1.0] {
        let m = ((n as f64 * frac).ceil() as usize).clamp(n.min(12), n);
        for _ in 0..3 {
            let (kept, hkls) = index(model, &values, &ordered[..m])?;
            if kept.len() < free.len().max(3) {
                break;
            }
            values = gauss_newton(model, &values, free, &kept, &hkls)?;
        }
    }
    Ok(values)
}

/// Starting points for the centroid fit: the crystal rotations (about the
/// lab axes), detector distances and beam centres (the model's shift of the
/// detector in its plane) that index the most of `spots`, up to `count`
/// distinct ones, best first; none that does not index clearly more than
/// `values`.
///
/// They are searched together: a small turn of the crystal across the beam
/// moves the low-resolution spots' Miller indices much like a shift of the
/// beam centre does, and a distance error much like a cell error, so the
/// best point of the search is not always the right one. A coarse grid
/// (rotations of ±0.6° in 0.2° steps, distances ±2.5 mm in steps of
/// 0.25 mm or 0.5 % of the distance, shifts of ±6 pixels in 1-pixel steps),
/// then a fine one around each point kept. Each dimension is searched when
/// `dims` names it and its parameters are refined (all three misset angles;
/// `distance`; both of `Xbeam`, `Ybeam`).
fn search_starts(
    model: &Parameters,
    values: &[f64],
    spots: &[Spot],
    dims: Dims,
    count: usize,
) -> Result<Vec<Vec<f64>>> {
    let params = model.params();
    let find = |p: Param| params.iter().position(|t| t.param == p && t.panel.is_none());
    // a multi-panel detector moves as a whole through every panel's own
    // parameter (all of them refined, or the dimension is not searched)
    let panels = model.panel_boxes().len();
    let every = |p: Param| -> Option<Vec<usize>> {
        if panels == 1 {
            return find(p).map(|i| vec![i]);
        }
        (0..panels)
            .map(|k| params.iter().position(|t| t.param == p && t.panel == Some(k)))
            .collect()
    };
    let centre = every(Param::Xbeam).zip(every(Param::Ybeam)).filter(|_| dims.centre);
    let distance = if panels == 1 { every(Param::Distance) } else { every(Param::CloseDistance) };
    let distance = distance.filter(|_| dims.distance);
    let misset = match (find(Param::MissetX), find(Param::MissetY), find(Param::MissetZ)) {
        (Some(x), Some(y), Some(z)) if dims.turn => Some([x, y, z]),
        _ => None,
    };
    if centre.is_none() && misset.is_none() && distance.is_none() {
        return Ok(Vec::new());
    }
    let bases = Still::all(model, values)?;
    let base = bases[0];
    let grid = |half: f64, step: f64, on: bool| -> Vec<f64> {
        if !on {
            return vec![0.0];
        }
        let n = (half / step).round() as i64;
        (-n..=n).map(|i| i as f64 * step).collect()
    };
    let deg = std::f64::consts::PI / 180.0;
    let dist_step = (0.25e-3f64).min(0.005 * dot(base.pix0, base.odet).abs());
    // every grid point around `at`, scored, best first; the spots' scattering
    // vectors once per detector placement, then each rotation's three dots
    let scan = |at: &Candidate, rot: (f64, f64), dist: (f64, f64), shift: (f64, f64)| {
        let rots = grid(rot.0 * deg, rot.1 * deg, misset.is_some());
        let mut turns = Vec::new();
        for &x in &rots {
            for &y in &rots {
                for &z in &rots {
                    let r = [at.rot[0] + x, at.rot[1] + y, at.rot[2] + z];
                    turns.push((r, base.real.map(|a| turned(a, r))));
                }
            }
        }
        let mut places = Vec::new();
        for &d in &grid(dist.0, dist.1, distance.is_some()) {
            for &f in &grid(shift.0, shift.1, centre.is_some()) {
                for &g in &grid(shift.0, shift.1, centre.is_some()) {
                    places.push((at.distance_m + d, [at.shift[0] + f, at.shift[1] + g]));
                }
            }
        }
        let mut scored: Vec<(f64, Candidate)> = places
            .par_iter()
            .map(|&(d, sh)| {
                // every panel moved alike, in the first panel's frame
                let shift = add(
                    scale(base.fdet, sh[0] * base.pixel_m),
                    scale(base.sdet, sh[1] * base.pixel_m),
                );
                let moved = |b: &Still| add(add(b.pix0, scale(base.odet, d)), shift);
                let stills: Vec<Still> =
                    bases.iter().map(|b| Still { pix0: moved(b), ..*b }).collect();
                let qs: Vec<[f64; 3]> =
                    spots.iter().map(|s| stills[s.panel].q_at(s.fast, s.slow)).collect();
                let (score, rot) = turns
                    .iter()
                    .map(|(r, real)| (index_score(real, &qs), *r))
                    .max_by(|a, b| a.0.total_cmp(&b.0))
                    .expect("at least one rotation");
                (score, Candidate { rot, distance_m: d, shift: sh })
            })
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        scored
    };
    let origin = Candidate { rot: [0.0; 3], distance_m: 0.0, shift: [0.0; 2] };
    let at_start = scan(&origin, (0.0, 1.0), (0.0, 1.0), (0.0, 1.0))[0].0;
    let mut kept: Vec<Candidate> = Vec::new();
    for (_, c) in scan(&origin, (0.6, 0.2), (2.5e-3, dist_step), (6.0, 1.0)) {
        if kept.len() == count {
            break;
        }
        if kept.iter().all(|k| k.distinct(&c, 0.15 * deg, 0.75 * dist_step, 1.5)) {
            kept.push(c);
        }
    }
    let mut out = Vec::new();
    for c in kept {
        let (score, c) =
            scan(&c, (0.15, 0.05), (dist_step / 2.0, dist_step / 4.0), (0.75, 0.25))[0];
        if score <= at_start * 1.05 + 1e-9 {
            continue;
        }
        let mut v = values.to_vec();
        if let Some(idx) = misset {
            put_rotation(model, &mut v, idx, c.rot)?;
        }
        // the detector move the search scored, through the parameters that
        // can make it (the pivot and any tilt decide how each moves it)
        let movers: Vec<usize> = (distance.iter().flatten())
            .chain(centre.iter().flat_map(|(x, y)| x.iter().chain(y)))
            .copied()
            .collect();
        let want = add(
            scale(base.odet, c.distance_m),
            add(
                scale(base.fdet, c.shift[0] * base.pixel_m),
                scale(base.sdet, c.shift[1] * base.pixel_m),
            ),
        );
        put_detector_move(model, &mut v, &movers, want)?;
        out.push(v);
    }
    Ok(out)
}

/// Which dimensions a search spans.
#[derive(Debug, Clone, Copy)]
struct Dims {
    centre: bool,
    turn: bool,
    distance: bool,
}

impl Dims {
    const CENTRE: Dims = Dims { centre: true, turn: false, distance: false };
    const TURN: Dims = Dims { centre: true, turn: true, distance: false };
    const ALL: Dims = Dims { centre: true, turn: true, distance: true };
}

/// A point of the orientation, distance and beam-centre search, relative
/// to the model it started from.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    /// Rotation of the crystal (lab axes, radians).
    rot: [f64; 3],
    /// Change of the distance along the detector normal (m).
    distance_m: f64,
    /// Shift of the detector along fast and slow (pixels).
    shift: [f64; 2],
}

impl Candidate {
    /// Whether two points lie apart by more than the given rotation,
    /// distance or shift in some coordinate.
    fn distinct(&self, other: &Candidate, rot: f64, distance_m: f64, shift: f64) -> bool {
        (0..3).any(|i| (self.rot[i] - other.rot[i]).abs() > rot)
            || (self.distance_m - other.distance_m).abs() > distance_m
            || (0..2).any(|i| (self.shift[i] - other.shift[i]).abs() > shift)
    }
}

/// `a` turned by the small rotation vector `rot` (radians, lab axes).
fn turned(a: [f64; 3], rot: [f64; 3]) -> [f64; 3] {
    let angle = norm(rot);
    if angle == 0.0 {
        return a;
    }
    let u = scale(rot, 1.0 / angle);
    let (s, c) = angle.sin_cos();
    // Rodrigues
    add(add(scale(a, c), scale(cross(u, a), s)), scale(u, dot(u, a) * (1.0 - c)))
}

/// The rotation (lab axes, radians) that takes the crystal axes of `from`
/// to those of `to`, for a small one: `Σ aᵢ × aᵢ' = (Σ|aᵢ|² − Σ aᵢaᵢᵀ) ω`.
fn rotation_between(from: &[[f64; 3]; 3], to: &[[f64; 3]; 3]) -> Option<[f64; 3]> {
    let mut lhs = [0.0; 3];
    let mut m = [0.0; 9];
    for (a, b) in from.iter().zip(to) {
        lhs = add(lhs, cross(*a, *b));
        let a2 = dot(*a, *a);
        for i in 0..3 {
            for j in 0..3 {
                m[i * 3 + j] += if i == j { a2 } else { 0.0 } - a[i] * a[j];
            }
        }
    }
    let x = solve(&m, &lhs, 3)?;
    Some([x[0], x[1], x[2]])
}

/// Move the misset angles at `idx` so that the crystal turns by `rot`
/// (lab axes, radians): Newton steps on the angles, each through the
/// rotation their unit changes make.
fn put_rotation(model: &Parameters, v: &mut [f64], idx: [usize; 3], rot: [f64; 3]) -> Result<()> {
    let axes = |v: &[f64]| -> Result<[[f64; 3]; 3]> {
        let c = model.plan_at(v)?.cell;
        Ok([c.a_m, c.b_m, c.c_m])
    };
    let start = axes(v)?;
    let target = start.map(|a| turned(a, rot));
    for _ in 0..3 {
        let now = axes(v)?;
        let Some(want) = rotation_between(&now, &target) else { return Ok(()) };
        let mut cols = [[0.0; 3]; 3];
        for (c, &i) in idx.iter().enumerate() {
            let mut w = v.to_vec();
            w[i] += 0.01;
            let Some(r) = rotation_between(&now, &axes(&w)?) else { return Ok(()) };
            cols[c] = scale(r, 1.0 / 0.01);
        }
        let m: Vec<f64> = (0..3).flat_map(|i| (0..3).map(move |j| cols[j][i])).collect();
        let Some(d) = solve(&m, &want, 3) else { return Ok(()) };
        for (c, &i) in idx.iter().enumerate() {
            v[i] += d[c];
        }
    }
    Ok(())
}

/// Move the detector parameters at `idx` (`distance`, `Xbeam`, `Ybeam`) so
/// that the detector's corner moves by `want` (m, lab frame), in the least
/// squares sense: each parameter's move of the corner is measured through
/// the plan, so the pivot and any tilt are accounted for.
fn put_detector_move(
    model: &Parameters,
    v: &mut [f64],
    idx: &[usize],
    want: [f64; 3],
) -> Result<()> {
    if idx.is_empty() || norm(want) == 0.0 {
        return Ok(());
    }
    // every panel's corner (one with a single panel)
    let corners = |v: &[f64]| -> Result<Vec<[f64; 3]>> {
        Ok(model.plans_at(v)?.iter().map(|p| p.detector.pix0).collect())
    };
    let base = corners(v)?;
    let mut cols = Vec::with_capacity(idx.len());
    for &i in idx {
        let mut w = v.to_vec();
        w[i] += 1.0;
        let moved: Vec<[f64; 3]> =
            corners(&w)?.iter().zip(&base).map(|(a, b)| sub(*a, *b)).collect();
        cols.push(moved);
    }
    let n = idx.len();
    let dots = |a: &[[f64; 3]], b: &[[f64; 3]]| a.iter().zip(b).map(|(x, y)| dot(*x, *y)).sum();
    let m: Vec<f64> = (0..n * n).map(|k| dots(&cols[k / n], &cols[k % n])).collect();
    let wanted = vec![want; base.len()];
    let rhs: Vec<f64> = cols.iter().map(|c| dots(c, &wanted)).collect();
    if let Some(d) = solve(&m, &rhs, n) {
        for (&i, di) in idx.iter().zip(d) {
            v[i] += di;
        }
    }
    Ok(())
}

/// Levenberg–Marquardt steps on the centroid residuals of `free`.
fn gauss_newton(
    model: &Parameters,
    start: &[f64],
    free: &[usize],
    spots: &[Spot],
    hkls: &[[f64; 3]],
) -> Result<Vec<f64>> {
    let params = model.params();
    let cost = |v: &[f64]| -> Result<f64> {
        Ok(match residuals(model, v, spots, hkls)? {
            Some(r) => r.iter().map(|x| x * x).sum(),
            None => f64::INFINITY,
        })
    };
    let mut values = start.to_vec();
    let mut c0 = cost(&values)?;
    let mut lambda = 1e-3;
    let nf = free.len();
    for _ in 0..30 {
        let Some(r0) = residuals(model, &values, spots, hkls)? else { break };
        let mut jac = vec![vec![0.0; r0.len()]; nf];
        for (c, &i) in free.iter().enumerate() {
            let h = step_of(params[i].param, values[i]);
            let mut vp = values.clone();
            vp[i] += h;
            let mut vm = values.clone();
            vm[i] -= h;
            let (Some(rp), Some(rm)) =
                (residuals(model, &vp, spots, hkls)?, residuals(model, &vm, spots, hkls)?)
            else {
                return Ok(values);
            };
            for k in 0..r0.len() {
                jac[c][k] = (rp[k] - rm[k]) / (2.0 * h);
            }
        }
        let mut jtj = vec![0.0; nf * nf];
        let mut jtr = vec![0.0; nf];
        for a in 0..nf {
            for b in 0..nf {
                jtj[a * nf + b] = jac[a].iter().zip(&jac[b]).map(|(x, y)| x * y).sum();
            }
            jtr[a] = jac[a].iter().zip(&r0).map(|(x, y)| x * y).sum();
        }
        let mut improved = false;
        for _ in 0..10 {
            let mut m = jtj.clone();
            for a in 0..nf {
                m[a * nf + a] += lambda * jtj[a * nf + a].max(1e-12);
            }
            let Some(step) = solve(&m, &jtr.iter().map(|x| -x).collect::<Vec<_>>(), nf) else {
                lambda *= 10.0;
                continue;
            };
            // a step of at most 1 mm, 1 % of a length, 1°: the indexing
            // holds only that far
            let cap = free
                .iter()
                .enumerate()
                .map(|(c, &i)| {
                    let most = match params[i].unit() {
                        "Å" => 0.01 * values[i].abs(),
                        "mm" | "deg" => 1.0,
                        _ => f64::INFINITY,
                    };
                    most / step[c].abs().max(1e-300)
                })
                .fold(1.0f64, f64::min);
            let mut trial = values.clone();
            for (c, &i) in free.iter().enumerate() {
                trial[i] += cap * step[c];
            }
            let c1 = cost(&trial)?;
            if c1 < c0 {
                let gain = (c0 - c1) / c0.max(1e-300);
                values = trial;
                c0 = c1;
                lambda = (lambda / 3.0).max(1e-9);
                improved = true;
                if gain < 1e-9 {
                    return Ok(values);
                }
                break;
            }
            lambda *= 10.0;
        }
        if !improved {
            break;
        }
    }
    Ok(values)
}

/// Solve `m x = b` (`n × n`, row-major) by Gaussian elimination with
/// partial pivoting; `None` when singular.
fn solve(m: &[f64], b: &[f64], n: usize) -> Option<Vec<f64>> {
    let mut a = m.to_vec();
    let mut x = b.to_vec();
    for col in 0..n {
        let piv =
            (col..n).max_by(|&i, &j| a[i * n + col].abs().total_cmp(&a[j * n + col].abs()))?;
        if a[piv * n + col].abs() < 1e-300 {
            return None;
        }
        if piv != col {
            for k in 0..n {
                a.swap(col * n + k, piv * n + k);
            }
            x.swap(col, piv);
        }
        for row in col + 1..n {
            let f = a[row * n + col] / a[col * n + col];
            for k in col..n {
                a[row * n + k] -= f * a[col * n + k];
            }
            x[row] -= f * x[col];
        }
    }
    for col in (0..n).rev() {
        let s: f64 = (col + 1..n).map(|k| a[col * n + k] * x[k]).sum();
        x[col] = (x[col] - s) / a[col * n + col];
    }
    x.iter().all(|v| v.is_finite()).then_some(x)
}

/// How well a final model explains the observed spots: the share of the
/// observed spots around which (the spot's centroid ± its size) the model
/// puts at least half of the observed photons. By photons, not centroids:
/// a strong spot's side lobes, found as spots of their own, are explained
/// by a right model as well.
pub fn explained_fraction(
    model: &Parameters,
    spots: &[Spot],
    observed: &[f32],
    model_image: &[f64],
) -> f64 {
    // none of no spots is explained (a fit check needs spots to judge)
    if spots.is_empty() {
        return 0.0;
    }
    let boxes = model.panel_boxes();
    let width = model.image_size()[0];
    let explained = spots
        .iter()
        .filter(|s| {
            let ([x0, y0], [fpixels, spixels]) = boxes[s.panel];
            let r = ((s.pixels as f64).sqrt() + 1.0).ceil() as i64;
            let (cf, cs) = (s.fast.floor() as i64, s.slow.floor() as i64);
            let (mut model, mut obs) = (0.0, 0.0);
            for t in (cs - r).max(0)..=(cs + r).min(spixels as i64 - 1) {
                for g in (cf - r).max(0)..=(cf + r).min(fpixels as i64 - 1) {
                    let i = (y0 + t as usize) * width + x0 + g as usize;
                    model += model_image[i];
                    obs += observed[i] as f64;
                }
            }
            model >= 0.5 * obs
        })
        .count();
    explained as f64 / spots.len() as f64
}

fn add(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [a[0] + b[0], a[1] + b[1], a[2] + b[2]]
}
fn sub(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [a[0] - b[0], a[1] - b[1], a[2] - b[2]]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_args;
    use nanobragg_core::render::{Precision, RenderOptions};
    use nanobragg_core::setup::SetupSeeds;

    const PARAMS: [Param; 8] = [
        Param::Distance,
        Param::Xbeam,
        Param::Ybeam,
        Param::CellA,
        Param::CellC,
        Param::MissetX,
        Param::MissetY,
        Param::MissetZ,
    ];

    /// A tetragonal still on 256² pixels of 0.1 mm, its image in photons.
    fn still(args: &str) -> (Parameters, Vec<f32>) {
        let base = "-cell 48 48 61 90 90 90 -N 10 -default_F 100 -lambda 1 -pixel 0.1 \
                    -detpixels 256 -distance 60 -oversample 1 -fluence 1e28";
        let a: Vec<String> =
            format!("{base} {args}").split_whitespace().map(str::to_string).collect();
        let inv = parse_args(&a).unwrap();
        let model =
            Parameters::new(inv.config, SetupSeeds { misset_idum: -1 }, PARAMS.to_vec()).unwrap();
        let image =
            model.image(model.start(), RenderOptions::default().threads(2), Precision::Fast64);
        (model, image.unwrap().iter().map(|&x| x as f32).collect())
    }

    #[test]
    fn predicted_centroids_fall_on_the_rendered_spots() {
        let (model, image) = still("-misset 10 20 30");
        let skip = vec![false; image.len()];
        let spots = find_spots(&image, &skip, 256, 256, MIN_PHOTONS);
        assert!(spots.len() >= 20, "{} spots", spots.len());
        let (indexed, rms) = centroid_rms(&model, model.start(), &spots).unwrap();
        // most spots of a noiseless image sit near whole hkl (a still cuts
        // some far from the lattice point, and side lobes make spots too);
        // the nearest point of the Ewald sphere predicts them within a pixel
        eprintln!("{} spots, {indexed} indexed, rms {rms:.3} px", spots.len());
        assert!(indexed as f64 >= 0.6 * spots.len() as f64, "{indexed} of {}", spots.len());
        assert!(rms < 1.0, "rms {rms} px");
        // a model 1° off predicts them far worse
        let mut off = model.start().to_vec();
        off[5] += 1.0;
        let (_, rms_off) = centroid_rms(&model, &off, &spots).unwrap();
        assert!(rms_off > 3.0 * rms, "{rms_off} vs {rms}");
    }

    #[test]
    fn the_centroid_fit_recovers_the_geometry_from_indexing_errors() {
        let (truth, image) = still("-misset 10 20 30 -Xbeam 12.6 -Ybeam 13.1");
        let skip = vec![false; image.len()];
        let spots = find_spots(&image, &skip, 256, 256, MIN_PHOTONS);
        // 0.4° per axis, 0.8 % cell, 1.5 mm distance, 2.5 pixels of beam centre
        let t = truth.start().to_vec();
        let start = [t[0] + 1.5, t[1] + 0.25, t[2] - 0.25, t[3] * 1.008, t[4] * 0.992]
            .into_iter()
            .chain([t[5] + 0.4, t[6] - 0.4, t[7] + 0.4])
            .collect::<Vec<_>>();
        let opts = RenderOptions::default().threads(2);
        let sse = |v: &[f64]| -> Result<f64> {
            let model = truth.image(v, opts, Precision::Fast64)?;
            Ok(model.iter().zip(&image).map(|(m, &o)| (m - o as f64).powi(2)).sum())
        };
        let fit = fit_centroids(&truth, &start, &spots, sse).unwrap();
        eprintln!("{fit:?}");
        // into the pixel loss's basin: each error down to a fifth or less
        for (i, p) in PARAMS.iter().enumerate() {
            let err = (fit.values[i] - t[i]).abs();
            let was = (start[i] - t[i]).abs();
            eprintln!("{p}: {} for {} (start {})", fit.values[i], t[i], start[i]);
            assert!(err < 0.2 * was, "{p}: {} for {} (start {})", fit.values[i], t[i], start[i]);
        }
        assert!(fit.rms_px < 1.0 && fit.indexed as f64 >= 0.6 * spots.len() as f64, "{fit:?}");
        // the truth and the fitted values explain the spots (but side-lobe
        // fragments next to a strong spot); the start does not
        let explained = |v: &[f64]| {
            explained_fraction(
                &truth,
                &spots,
                &image,
                &truth.image(v, opts, Precision::Fast64).unwrap(),
            )
        };
        let (at_truth, at_fit, at_start) =
            (explained(&t), explained(&fit.values), explained(&start));
        eprintln!("explained: truth {at_truth}, fit {at_fit}, start {at_start}");
        assert!(at_truth == 1.0 && at_fit >= 0.9 && at_start < 0.5);
    }

    #[test]
    fn put_rotation_turns_the_crystal_by_the_rotation_asked_for() {
        let (model, _) = still("-misset 10 20 30");
        let v0 = model.start().to_vec();
        let axes = |v: &[f64]| {
            let c = model.plan_at(v).unwrap().cell;
            [c.a_m, c.b_m, c.c_m]
        };
        let rot = [0.004, -0.007, 0.009];
        let mut v = v0.clone();
        put_rotation(&model, &mut v, [5, 6, 7], rot).unwrap();
        let (want, got) = (axes(&v0).map(|a| turned(a, rot)), axes(&v));
        for (w, g) in want.iter().zip(&got) {
            let err = norm(sub(*w, *g)) / norm(*w);
            assert!(err < 1e-9, "{err}");
        }
    }

    #[test]
    fn the_excitation_error_sees_a_turn_across_the_beam() {
        // a turn about y, across the MOSFLM beam along x, hardly moves the
        // spots but takes their lattice points off the Ewald sphere
        let (model, image) = still("-misset 10 20 30");
        let skip = vec![false; image.len()];
        let spots = find_spots(&image, &skip, 256, 256, MIN_PHOTONS);
        let (kept, hkls) = index(&model, model.start(), &spots).unwrap();
        // photon-weighted rms of the centroid (pixels) and excitation parts
        let rms = |v: &[f64]| {
            let r = residuals(&model, v, &kept, &hkls).unwrap().unwrap();
            let photons: f64 = kept.iter().map(|s| s.photons).sum();
            let px: f64 = r.chunks(3).map(|c| c[0] * c[0] + c[1] * c[1]).sum();
            let exc: f64 = r.chunks(3).map(|c| c[2] * c[2]).sum();
            ((px / photons).sqrt(), (exc / photons).sqrt())
        };
        let mut turned_values = model.start().to_vec();
        put_rotation(&model, &mut turned_values, [5, 6, 7], [0.0, 0.5f64.to_radians(), 0.0])
            .unwrap();
        let ((px0, exc0), (px1, exc1)) = (rms(model.start()), rms(&turned_values));
        eprintln!("truth: {px0:.3} px, {exc0:.3} widths; turned: {px1:.3} px, {exc1:.3} widths");
        // (0.47 -> 0.71 widths against 0.36 -> 0.38 px at this low resolution)
        assert!(exc1 > 1.3 * exc0 && exc1 - exc0 > 5.0 * (px1 - px0), "{exc1} {px1}");
    }
}
