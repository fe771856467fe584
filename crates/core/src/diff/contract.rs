//! Derivative images by contraction: the parameters are not carried through
//! the kernel one dual part each; the kernel's inner numbers are.
//!
//! A pixel's photons are `scale/steps · (i_bg + Σ F²·F_latt²) · polar ·
//! omega` (one sensor layer, no `-oversample_*` flags). Every parameter
//! reaches that sum through a few inner numbers:
//! - the sub-pixel position `pos` (detector parameters, through `pix0`,
//!   `fdet`, `sdet`: `pos = pix0 + f·fdet + s·sdet`), `close_distance`
//!   (solid angle), the Kahn factor, and the sources (wavelength,
//!   dispersion, divergence): the geometry's inner numbers ([`GeoPart`]).
//!   The position moves everything after it and is carried through the
//!   sample loop in a dual of its three components (or of its one
//!   derivative, where one parameter alone moves it and the other parts fit
//!   the narrow duals); the others each move
//!   one thing (the solid angle, the polarization, the scattering vector),
//!   which is taken again from the plain direction and distance in a second,
//!   auxiliary dual ([`Aux`]) where and when the loop takes it. Carried in
//!   one dual, every part would pay for the whole geometry;
//! - the fractional (h, k, l) of each phi step × mosaic domain: the lattice
//!   and structure factors are rendered in a second dual number whose parts
//!   are h, k, l, the moving `N`, `default_F` and `fudge` (`NL` parts); the
//!   square lattice factor is taken axis by axis in two-part duals (index
//!   and N) and joined by the product rule ([`square_lattice`]). The
//!   derivatives by h, k, l go back to the scattering vector (`∂h/∂q = a`)
//!   and to the rotated cells: summed over the cells as (∂I/∂h) ⊗ h for the
//!   parameters that move every cell by one matrix in the crystal frame
//!   (cell constants, missetting, phi: [`frame_derivative`]), per cell as
//!   (∂I/∂h) ⊗ q for the others (mosaic spread, osc);
//! - `scale` and `i_bg` enter linearly.
//!
//! At the end of each pixel the inner derivatives are contracted with the
//! run's derivatives of those numbers by each parameter (from [`Leaves`] in
//! dual numbers, once per run). The physics is the render kernel's, called
//! piece by piece ([`Kernel::position`], [`Kernel::polarize`],
//! [`Kernel::lattice`], ...), so the cost no longer grows with the number
//! of parameters except for the final contraction. The sample positions are
//! taken in plain lanes (no parameter the geometry dual carries moves them);
//! the geometry in the kernel's fast mode (the algebraic polarization
//! factor, one reciprocal distance, no division by λ: fewer dual
//! operations, and no `atan2`, which is libm per lane); the lattice in its
//! exact mode, whose square factors carry the derivative by N. The image
//! this renderer returns therefore differs from either kernel's by rounding
//! only.
//!
//! Plans outside that shape (curved detector, sensor layers, `-oversample_*`
//! flags, `-corrected`, gauss/tophat spots, moving beam or polarization axes) use the
//! parameter-carrying renderer ([`super::lanes`]).

// Index loops over small fixed arrays: no iterator closures, which would not
// inline into the `#[target_feature]` row functions.
#![allow(clippy::needless_range_loop)]

use super::dual::{seeded, Dense64, Dual};
use super::jacobian::Weights;
#[cfg(target_arch = "x86_64")]
use super::leaves::Leaves;
use super::param::Param;
use crate::config::{CrystalShape, SimConfig};
use crate::error::Result;
use crate::physics::lattice::{exact_grating, Grating, GratingForm};
use crate::real::{Mask, Num};
use crate::render::kernel::{Exact, Fallback, Fast, Kernel};
use crate::render::rows::{render_images, RowBlocks, RowKernel, RowOut};
use crate::render::samples::Samples;
use crate::setup::{Plan, SetupSeeds};
use crate::vec3::{cross, dot, V3};
use std::sync::Mutex;

/// Most geometry parts (the position's three, then [`NA`] more).
const NG: usize = 3 + NA;
/// Most parts of the auxiliary dual (the geometry parts after the position's).
const NA: usize = 8;
/// Most parts of the lattice dual: h, k, l, then [`LatPart`]s.
const NL: usize = 8;

/// The geometry dual of `G` parts over lanes `B`: the sample position's.
type Geo<B, const G: usize> = Dual<B, G>;
/// The auxiliary dual of `A` parts over lanes `B`: the geometry parts after
/// the position's, which move the solid angle, the polarization or the
/// scattering vector alone and are taken from those of the plain geometry.
type Aux<B, const A: usize> = Dual<B, A>;
/// The lattice dual of `L` parts over lanes `B`.
type Lat<B, const L: usize> = Dual<B, L>;
/// One lattice factor: by its index and its N.
type Two<B> = Dual<B, 2>;

/// What a part of the geometry dual stands for.
#[derive(Debug, Clone, Copy, PartialEq)]
enum GeoPart {
    /// A component of the sub-pixel position (parts 0, 1, 2).
    Pos,
    /// `close_distance`.
    Close,
    /// The Kahn factor.
    Kahn,
    /// A parameter that moves the sources (index into the parameters).
    Param(usize),
}

/// What a part of the lattice dual after h, k, l stands for.
#[derive(Debug, Clone, Copy, PartialEq)]
enum LatPart {
    N(usize),
    DefaultF,
    Fudge,
}

/// One parameter's derivatives of the inner numbers (run constants).
#[derive(Debug, Clone)]
struct ParamJac {
    pix0: V3<f64>,
    fdet: V3<f64>,
    sdet: V3<f64>,
    close: f64,
    kahn: f64,
    n_cells: [f64; 3],
    default_f: f64,
    fudge: f64,
    /// Per cell: d a, d b, d c.
    cells: Vec<[V3<f64>; 3]>,
    /// Per source: d incident, d lambda.
    sources: Vec<(V3<f64>, f64)>,
    scale: f64,
    i_bg: f64,
}

/// Whether any of `xs` is nonzero.
fn nonzero<'a>(xs: impl IntoIterator<Item = &'a f64>) -> bool {
    xs.into_iter().any(|&x| x != 0.0)
}

impl ParamJac {
    /// Moves `pix0`, `fdet` or `sdet`.
    fn moves_pos(&self) -> bool {
        nonzero([self.pix0, self.fdet, self.sdet].iter().flatten())
    }
    /// Moves a source's direction or wavelength.
    fn moves_sources(&self) -> bool {
        self.sources.iter().any(|(i, l)| *l != 0.0 || nonzero(i))
    }
    /// Moves a rotated cell.
    fn moves_cells(&self) -> bool {
        nonzero(self.cells.iter().flatten().flatten())
    }
    /// The derivative of geometry part `part` by this parameter (number `p`).
    fn geo(&self, part: GeoPart, p: usize) -> f64 {
        match part {
            GeoPart::Pos => 0.0,
            GeoPart::Close => self.close,
            GeoPart::Kahn => self.kahn,
            GeoPart::Param(q) => (q == p) as u8 as f64,
        }
    }
    /// The derivative of lattice part `part` by this parameter.
    fn lat(&self, part: LatPart) -> f64 {
        match part {
            LatPart::N(n) => self.n_cells[n],
            LatPart::DefaultF => self.default_f,
            LatPart::Fudge => self.fudge,
        }
    }
}

/// Everything the contracted renderer needs besides the kernels.
struct Contraction {
    geo_parts: Vec<GeoPart>,
    /// The position's parts (the first of `geo_parts`): 0; 3, its
    /// components; or 1, the derivative of the position along the one
    /// parameter that moves it (`along`).
    npos: usize,
    /// The derivatives of `pix0`, `fdet` and `sdet` by the one parameter
    /// that moves the detector, where the position carries that
    /// derivative alone (`npos` 1): the geometry dual then has one part
    /// instead of three (`-distance` alone moves the position in the
    /// usual refinements, and the geometry is most of a pixel's work).
    along: Option<[V3<f64>; 3]>,
    /// Some auxiliary part moves the solid angle, the polarization, the
    /// scattering vector.
    aux_omega: bool,
    aux_polar: bool,
    aux_q: bool,
    lat_parts: Vec<LatPart>,
    /// Some parameter moves the cells in a way [`frame_derivative`] does not
    /// cover (the per-cell outer products are kept).
    cells_kept: bool,
    /// Some parameter's cell derivatives are one frame matrix (the outer
    /// product g ⊗ hkl summed over the cells is kept).
    frame_kept: bool,
    jac: Vec<ParamJac>,
    /// The lattice part of N along a, b, c, where N moves.
    n_parts: [Option<usize>; 3],
    /// Per parameter: (index into the inner derivatives `z`, coefficient)
    /// for every inner number it moves (see [`z_len`]).
    terms: Vec<Vec<(usize, f64)>>,
    /// The indices into `z` some parameter's terms read, ascending.
    used: Vec<usize>,
    /// Some parameter reads d value / d `default_F` without a grid (`Z_F`).
    f_used: bool,
}

/// Layout of the inner derivatives `z` of a pixel: d value / d pos (by
/// weight 1, f, s: 9; with the position's one part along a parameter,
/// `Contraction::along`, entry 0 alone, that parameter's whole derivative
/// through the position), d value / d geometry part (`NG`), d value / d lattice
/// part (`NL`), d value / d scale, d value / d i_bg, d value / d `default_F`
/// (without an HKL grid, where F is `default_F` everywhere and
/// d F² / d F = 2 F is taken directly), d value / d frame matrix (9; see
/// [`frame_derivative`]), then d value / d cell vector component (9 per cell,
/// when kept).
const Z_GEO: usize = 9;
const Z_LAT: usize = Z_GEO + NG;
const Z_SCALE: usize = Z_LAT + NL;
const Z_IBG: usize = Z_SCALE + 1;
const Z_F: usize = Z_IBG + 1;
const Z_FRAME: usize = Z_F + 1;
const Z_CELLS: usize = Z_FRAME + 9;

/// Length of `z` with `cells` cells kept.
fn z_len(cells: usize) -> usize {
    Z_CELLS + 9 * cells
}

/// A parameter's derivatives of the rotated cells `d` as one matrix `E`
/// with dC_c = E · C_c for every cell c (C_c the rows a, b, c of cell c),
/// where there is one. Then d h_c = dC_c q = E h_c, and the parameter's
/// part of d value is Σ_ik E_ik H_ik with H = Σ_c (∂value/∂h_c) ⊗ h_c summed
/// over the cells: 9 terms however many cells. The cell parameters and the
/// missetting angles have such an E (they act before the phi and mosaic
/// rotations, which do not depend on them), and so does phi (its rotation
/// about the spindle commutes with the phi steps and comes before the
/// mosaic rotations); osc and the mosaic spread do not (their derivative
/// differs from cell to cell). Checked on every cell, to 1e-11 of the
/// largest derivative, so the choice is numerical.
fn frame_derivative(cells: &[[V3<f64>; 3]], d: &[[V3<f64>; 3]]) -> Option<[[f64; 3]; 3]> {
    let [a, b, c] = *cells.first()?;
    let det = dot(a, cross(b, c));
    if det == 0.0 {
        return None;
    }
    // the columns of C_0⁻¹
    let inv = [cross(b, c), cross(c, a), cross(a, b)];
    let e: [[f64; 3]; 3] =
        std::array::from_fn(|i| std::array::from_fn(|k| dot(d[0][i], inv[k]) / det));
    let size = d.iter().flatten().flatten().fold(0f64, |m, x| m.max(x.abs()));
    let fits = cells.iter().zip(d).all(|(cell, dc)| {
        (0..3).all(|i| {
            (0..3).all(|j| {
                let ec = e[i][0] * cell[0][j] + e[i][1] * cell[1][j] + e[i][2] * cell[2][j];
                (dc[i][j] - ec).abs() <= 1e-11 * size
            })
        })
    });
    fits.then_some(e)
}

/// The nonzero terms of parameter `p`'s contraction (`frame`: its
/// [`frame_derivative`], where the frame sum is used).
fn terms_of(
    j: &ParamJac,
    p: usize,
    geo_parts: &[GeoPart],
    lat_parts: &[LatPart],
    grid: bool,
    frame: Option<[[f64; 3]; 3]>,
    along: bool,
) -> Vec<(usize, f64)> {
    let mut t = Vec::new();
    if along {
        // the position's one part is this parameter's derivative
        t.push((0, j.moves_pos() as u8 as f64));
    } else {
        for (w, v) in [j.pix0, j.fdet, j.sdet].iter().enumerate() {
            for i in 0..3 {
                t.push((3 * w + i, v[i]));
            }
        }
    }
    for (k, &part) in geo_parts.iter().enumerate() {
        t.push((Z_GEO + k, j.geo(part, p)));
    }
    for (k, &part) in lat_parts.iter().enumerate() {
        t.push((Z_LAT + 3 + k, j.lat(part)));
    }
    t.push((Z_SCALE, j.scale));
    t.push((Z_IBG, j.i_bg));
    if !grid {
        t.push((Z_F, j.default_f));
    }
    if let Some(e) = frame {
        for i in 0..3 {
            for k in 0..3 {
                t.push((Z_FRAME + 3 * i + k, e[i][k]));
            }
        }
    } else {
        for (c, dc) in j.cells.iter().enumerate() {
            for i in 0..3 {
                for k in 0..3 {
                    t.push((Z_CELLS + 9 * c + 3 * i + k, dc[i][k]));
                }
            }
        }
    }
    t.retain(|&(_, x)| x != 0.0);
    t
}

/// The leaves of every parameter's chunk, and their values.
fn param_jacobians(
    cfg: &SimConfig,
    plan: &Plan,
    seeds: SetupSeeds,
    params: &[Param],
) -> Result<Option<(Leaves<f64>, Vec<ParamJac>)>> {
    let recip_used = matches!(plan.shape, CrystalShape::Gauss | CrystalShape::Tophat);
    let mut values = None;
    let mut jac = Vec::with_capacity(params.len());
    for chunk in params.chunks(8) {
        let l = Leaves::new(cfg, plan, seeds, &seeded::<Dense64<8>>(chunk))?;
        for i in 0..chunk.len() {
            let d = |x: Dense64<8>| x.eps[i];
            let v = |x: V3<Dense64<8>>| x.map(d);
            // numbers this renderer holds fixed must not move
            let moves = |x: V3<Dense64<8>>| nonzero(&v(x));
            if moves(l.beam)
                || moves(l.polar_axis)
                || d(l.pixel) != 0.0
                || (recip_used && l.recip.iter().any(|&r| moves(r)))
            {
                return Ok(None);
            }
            jac.push(ParamJac {
                pix0: v(l.pix0),
                fdet: v(l.fdet),
                sdet: v(l.sdet),
                close: d(l.close_distance),
                kahn: d(l.kahn),
                n_cells: l.n_cells.map(d),
                default_f: d(l.default_f),
                fudge: d(l.fudge),
                cells: l.cells.iter().map(|c| c.map(v)).collect(),
                sources: l.sources.iter().map(|s| (v(s.incident), d(s.lambda))).collect(),
                scale: d(l.scale),
                i_bg: d(l.i_bg),
            });
        }
        values.get_or_insert(l.map(|x| x.re));
    }
    Ok(values.map(|v| (v, jac)))
}

/// Whether the contracted renderer applies to `plan` (it does not read the
/// numbers it would hold fixed).
fn plan_applies(plan: &Plan) -> bool {
    let d = &plan.detector;
    !d.curved
        && !plan.corrected
        && !plan.oversample_omega
        && !plan.oversample_polar
        && !plan.oversample_thick
        && d.thicksteps == 1
        && d.thick_m == 0.0
        && matches!(plan.shape, CrystalShape::Square | CrystalShape::Round)
}

/// The image and its derivative images by `params` through the contracted
/// renderer, or `None` where it does not apply (see the module docs).
pub(crate) fn contracted_images(
    cfg: &SimConfig,
    plan: &Plan,
    seeds: SetupSeeds,
    params: &[Param],
) -> Result<Option<Vec<Vec<f32>>>> {
    contracted_images_on(cfg, plan, seeds, params, crate::render::simd_level())
}

/// [`contracted_images`] on a given SIMD level (at most this CPU's).
pub(crate) fn contracted_images_on(
    cfg: &SimConfig,
    plan: &Plan,
    seeds: SetupSeeds,
    params: &[Param],
    level: crate::render::SimdLevel,
) -> Result<Option<Vec<Vec<f32>>>> {
    let Some((values, c)) = contraction(cfg, plan, seeds, params)? else {
        return Ok(None);
    };
    Ok(Some(render_sized(plan, &values, &c, level, None)))
}

/// `Jᵀv`, the derivatives of `Σ v·image` by `params`, through the
/// contracted renderer, or `None` where it does not apply. No image is
/// formed, the photons' or a derivative's: each block's inner derivatives
/// are weighted by `v` and summed (per row, then over the rows in order, so
/// the result does not depend on the threads), and the sum is contracted
/// once.
pub(crate) fn contracted_vjp(
    cfg: &SimConfig,
    plan: &Plan,
    seeds: SetupSeeds,
    params: &[Param],
    v: Weights<'_>,
) -> Result<Option<Vec<f64>>> {
    let Some((values, c)) = contraction(cfg, plan, seeds, params)? else {
        return Ok(None);
    };
    let cells = if c.cells_kept { values.cells.len() } else { 0 };
    let sums = WeightedSums {
        v,
        rows: (0..plan.detector.spixels).map(|_| Mutex::new(Vec::new())).collect(),
    };
    let level = crate::render::simd_level();
    render_sized(plan, &values, &c, level, Some(&sums));
    let mut z = vec![0.0f64; z_len(cells)];
    for row in sums.rows {
        let row = row.into_inner().unwrap_or_else(|e| e.into_inner());
        for (&k, x) in c.used.iter().zip(row) {
            z[k] += x;
        }
    }
    let grad = c.terms.iter().map(|t| t.iter().map(|&(i, x)| x * z[i]).sum()).collect();
    Ok(Some(grad))
}

/// `Σ v·z` over each row's pixels (the inner derivatives `z` of
/// [`contract_sums`] that some parameter reads, [`Contraction::used`],
/// weighted by the pixel's `v`), one entry per row: each row is rendered by
/// one thread, and a re-render after a tricubic fallback replaces its rows'
/// sums.
struct WeightedSums<'v> {
    v: Weights<'v>,
    rows: Vec<Mutex<Vec<f64>>>,
}

/// The values of the leaves and the contraction for `params`, or `None`
/// where the contracted renderer does not apply.
fn contraction(
    cfg: &SimConfig,
    plan: &Plan,
    seeds: SetupSeeds,
    params: &[Param],
) -> Result<Option<(Leaves<f64>, Contraction)>> {
    if params.is_empty() || !plan_applies(plan) {
        return Ok(None);
    }
    let Some((values, jac)) = param_jacobians(cfg, plan, seeds, params)? else {
        return Ok(None);
    };
    // geometry parts: pos (3) when a parameter moves the detector, then
    // close_distance, the Kahn factor, and the source parameters
    let any = |f: &dyn Fn(&ParamJac) -> bool| jac.iter().any(f);
    let mut geo_parts = Vec::new();
    if any(&|j| j.close != 0.0) {
        geo_parts.push(GeoPart::Close);
    }
    if any(&|j| j.kahn != 0.0) {
        geo_parts.push(GeoPart::Kahn);
    }
    for (p, j) in jac.iter().enumerate() {
        if j.moves_sources() {
            geo_parts.push(GeoPart::Param(p));
        }
    }
    if geo_parts.len() > NA {
        return Ok(None);
    }
    let aux_omega = geo_parts.contains(&GeoPart::Close);
    let source_parts = || {
        geo_parts.iter().filter_map(|&g| match g {
            GeoPart::Param(p) => Some(&jac[p]),
            _ => None,
        })
    };
    // the polarization depends on the sources' directions, not wavelengths
    let aux_polar = geo_parts.contains(&GeoPart::Kahn)
        || source_parts().any(|j| j.sources.iter().any(|(i, _)| nonzero(i)));
    let aux_q = source_parts().next().is_some();
    let grid = plan.grid.is_some();
    let mut lat_parts = Vec::new();
    for n in 0..3 {
        if any(&|j| j.n_cells[n] != 0.0) {
            lat_parts.push(LatPart::N(n));
        }
    }
    if grid && any(&|j| j.default_f != 0.0) {
        lat_parts.push(LatPart::DefaultF);
    }
    if any(&|j| j.fudge != 0.0) {
        lat_parts.push(LatPart::Fudge);
    }
    // the position's parts: one along the one parameter that moves it where
    // the narrow duals of `render_sized` hold the rest, else its components
    let movers: Vec<&ParamJac> = jac.iter().filter(|j| j.moves_pos()).collect();
    let along = match movers[..] {
        [j] if geo_parts.len() <= 3 && lat_parts.len() <= 1 => Some([j.pix0, j.fdet, j.sdet]),
        _ => None,
    };
    let npos = match (movers.is_empty(), along.is_some()) {
        (true, _) => 0,
        (false, true) => 1,
        (false, false) => 3,
    };
    geo_parts.splice(0..0, std::iter::repeat_n(GeoPart::Pos, npos));
    let frames: Vec<_> = (jac.iter())
        .map(|j| j.moves_cells().then(|| frame_derivative(&values.cells, &j.cells)))
        .collect();
    let cells_kept = frames.iter().any(|f| matches!(f, Some(None)));
    let frame_kept = frames.iter().any(|f| matches!(f, Some(Some(_))));
    let terms: Vec<Vec<(usize, f64)>> = (jac.iter().enumerate())
        .map(|(p, j)| {
            terms_of(j, p, &geo_parts, &lat_parts, grid, frames[p].flatten(), along.is_some())
        })
        .collect();
    let n_parts =
        std::array::from_fn(|a| lat_parts.iter().position(|&p| p == LatPart::N(a)).map(|k| 3 + k));
    let mut used: Vec<usize> = terms.iter().flatten().map(|&(i, _)| i).collect();
    used.sort_unstable();
    used.dedup();
    let c = Contraction {
        f_used: used.contains(&Z_F),
        used,
        geo_parts,
        npos,
        along,
        aux_omega,
        aux_polar,
        aux_q,
        lat_parts,
        n_parts,
        cells_kept,
        frame_kept,
        jac,
        terms,
    };

    Ok(Some((values, c)))
}

/// Render through duals as narrow as the inner numbers allow (few
/// parameters need few parts): the image and the derivative images, or with
/// `sums` no image, the weighted inner derivatives going to `sums`.
fn render_sized(
    plan: &Plan,
    values: &Leaves<f64>,
    c: &Contraction,
    level: crate::render::SimdLevel,
    sums: Option<&WeightedSums>,
) -> Vec<Vec<f32>> {
    let (na, nl) = (c.geo_parts.len() - c.npos, 3 + c.lat_parts.len());
    if c.npos <= 1 && na <= 1 && nl <= 4 {
        render_contracted::<1, 1, 4>(plan, values, c, level, sums)
    } else if c.npos <= 1 && na <= 2 && nl <= 3 {
        // (the detector, wavelength and cell of the usual refinements)
        render_contracted::<1, 2, 3>(plan, values, c, level, sums)
    } else if c.npos <= 1 && na <= 3 && nl <= 4 {
        render_contracted::<1, 3, 4>(plan, values, c, level, sums)
    } else if na <= 1 && nl <= 4 {
        render_contracted::<3, 1, 4>(plan, values, c, level, sums)
    } else if na <= 3 && nl <= 4 {
        render_contracted::<3, 3, 4>(plan, values, c, level, sums)
    } else if na <= 3 && nl <= 6 {
        render_contracted::<3, 3, 6>(plan, values, c, level, sums)
    } else if na <= 5 && nl <= 6 {
        // (every parameter of a model without a grid: close distance, Kahn
        // factor, three of the wavelength; the three N)
        render_contracted::<3, 5, 6>(plan, values, c, level, sums)
    } else {
        render_contracted::<3, NA, NL>(plan, values, c, level, sums)
    }
}

/// The geometry leaves (values; the position's parts are seeded per
/// sample), the auxiliary leaves (values, with the other geometry parts
/// seeded) and the lattice leaves (values, with `N`, `default_F`, `fudge`
/// seeded).
fn seeded_leaves<const G: usize, const A: usize, const L: usize>(
    values: &Leaves<f64>,
    c: &Contraction,
) -> (Leaves<Dense64<G>>, Leaves<Dense64<A>>, Leaves<Dense64<L>>) {
    let geo = values.map(<Dense64<G> as Num>::c);
    let mut aux = values.map(<Dense64<A> as Num>::c);
    let mut lat = values.map(<Dense64<L> as Num>::c);
    for (k, part) in c.geo_parts.iter().enumerate().skip(c.npos) {
        let k = k - c.npos;
        match *part {
            GeoPart::Pos => {}
            GeoPart::Close => aux.close_distance.eps[k] = 1.0,
            GeoPart::Kahn => aux.kahn.eps[k] = 1.0,
            GeoPart::Param(p) => {
                // the sources' derivatives by this parameter
                for (g, &(incident, lambda)) in aux.sources.iter_mut().zip(&c.jac[p].sources) {
                    g.lambda.eps[k] = lambda;
                    for i in 0..3 {
                        g.incident[i].eps[k] = incident[i];
                    }
                }
            }
        }
    }
    for (k, part) in c.lat_parts.iter().enumerate() {
        let e = 3 + k;
        match *part {
            LatPart::N(n) => lat.n_cells[n].eps[e] = 1.0,
            LatPart::DefaultF => lat.default_f.eps[e] = 1.0,
            LatPart::Fudge => lat.fudge.eps[e] = 1.0,
        }
    }
    (geo, aux, lat)
}

/// Render on a SIMD level (at most this CPU's) with duals of `G`, `A` and
/// `L` parts.
fn render_contracted<const G: usize, const A: usize, const L: usize>(
    plan: &Plan,
    values: &Leaves<f64>,
    c: &Contraction,
    level: crate::render::SimdLevel,
    sums: Option<&WeightedSums>,
) -> Vec<Vec<f32>> {
    let (geo, aux, lat) = seeded_leaves::<G, A, L>(values, c);
    let outputs = if sums.is_some() { 0 } else { 1 + c.jac.len() };
    let _ = level;
    #[cfg(target_arch = "x86_64")]
    {
        use crate::real::X2;
        use crate::render::rows::{Avx2, Avx512};
        use crate::render::simd::{avx2::F64x4, avx512::F64x8};
        use crate::render::SimdLevel;
        match level.min(crate::render::simd_level()) {
            SimdLevel::Avx512 => {
                let rows = Rows::<F64x8, G, A, L>::new(plan, values, &geo, &aux, &lat, c, sums);
                // SAFETY: the level is at most this CPU's.
                return render_images(plan, &unsafe { Avx512::new(rows) }, outputs);
            }
            SimdLevel::Avx2 => {
                // two vectors per call: independent chains (all 26 parameters
                // of the cubic bench 1.09x faster than one vector, four 1.3x
                // slower than two: the duals' spills)
                let rows = Rows::<X2<F64x4>, G, A, L>::new(plan, values, &geo, &aux, &lat, c, sums);
                // SAFETY: the level is at most this CPU's.
                return render_images(plan, &unsafe { Avx2::new(rows) }, outputs);
            }
            SimdLevel::Scalar => {}
        }
    }
    render_images(
        plan,
        &Rows::<f64, G, A, L>::new(plan, values, &geo, &aux, &lat, c, sums),
        outputs,
    )
}

/// The kernels and the contraction.
struct Rows<'p, 'c, B: Num<Scalar = f64>, const G: usize, const A: usize, const L: usize> {
    /// The values alone (sample positions).
    val: Kernel<'p, B, Fast>,
    geo: Kernel<'p, Geo<B, G>, Fast>,
    aux: Kernel<'p, Aux<B, A>, Fast>,
    /// The square lattice's axes, for square spots.
    square: Option<[SquareAxis; 3]>,
    /// The three axes' gratings where each is [`SquareAxis::Poly`] of one parity.
    square_poly: Option<SquarePoly>,
    lat: Kernel<'p, Lat<B, L>, Exact>,
    c: &'c Contraction,
    sums: Option<&'c WeightedSums<'c>>,
    /// 1/steps where multiplying by it gives the numbers of dividing by
    /// steps (a power of two: 1 with one sample per pixel).
    inv_steps: Option<f64>,
}

impl<'p, 'c, B: Num<Scalar = f64>, const G: usize, const A: usize, const L: usize>
    Rows<'p, 'c, B, G, A, L>
{
    fn new(
        plan: &'p Plan,
        values: &Leaves<f64>,
        geo: &Leaves<Dense64<G>>,
        aux: &Leaves<Dense64<A>>,
        lat: &Leaves<Dense64<L>>,
        c: &'c Contraction,
        sums: Option<&'c WeightedSums<'c>>,
    ) -> Self {
        let lat = Kernel::from_leaves(plan, lat);
        let square = (plan.shape == CrystalShape::Square).then(|| {
            let axes = lat.square_axes();
            std::array::from_fn(|a| match axes[a] {
                None => SquareAxis::One,
                Some((n, reduce)) => {
                    let g = Grating::<f64>::new(n);
                    match !reduce && g.form() == GratingForm::Polynomial && c.n_parts[a].is_none() {
                        true => SquareAxis::Poly(g),
                        false => SquareAxis::Exact(n, reduce),
                    }
                }
            })
        });
        let val = Kernel::<B, Fast>::from_leaves(plan, values);
        let steps = val.steps;
        let power_of_two = steps.is_normal() && steps > 0.0 && steps.to_bits() << 12 == 0;
        Rows {
            inv_steps: (power_of_two && (1.0 / steps).is_normal()).then(|| 1.0 / steps),
            val,
            geo: Kernel::from_leaves(plan, geo),
            aux: Kernel::from_leaves(plan, aux),
            square_poly: square.as_ref().and_then(SquarePoly::new),
            square,
            lat,
            c,
            sums,
        }
    }
}

impl<B: Num<Scalar = f64>, const G: usize, const A: usize, const L: usize> RowKernel
    for Rows<'_, '_, B, G, A, L>
{
    #[inline(always)]
    fn row(&self, s: usize, row: &mut [&mut [f32]], limit: Option<usize>) -> RowOut {
        contracted_row(self, s, row, limit)
    }
    fn interpolates(&self) -> bool {
        self.lat.interpolates()
    }
}

/// One axis of square spots.
#[derive(Debug, Clone, Copy)]
enum SquareAxis {
    /// N ≤ 1: the factor is 1.
    One,
    /// The exact kernel's factor ([`exact_grating`] of this N, reduced or
    /// not; see [`Kernel::square_axes`]).
    Exact(f64, bool),
    /// A whole N that no parameter moves, small enough for the polynomial
    /// form: the factor and its slope by the index without the sines of Nπh
    /// and πh and their division (the same factor to rounding).
    Poly(Grating<f64>),
}

/// Three [`SquareAxis::Poly`] axes of one parity: their factors and slopes
/// are taken together, without a branch between the axes.
#[derive(Debug, Clone, Copy)]
struct SquarePoly {
    gratings: [Grating<f64>; 3],
    even: bool,
    /// Coefficients evaluated: 3 (N ≤ 6) or 5 (N ≤ 9), at least each
    /// grating's own (the zero padding leaves the numbers as they are).
    len: usize,
}

impl SquarePoly {
    fn new(axes: &[SquareAxis; 3]) -> Option<Self> {
        let g = |a: &SquareAxis| match a {
            SquareAxis::Poly(g) => Some(*g),
            _ => None,
        };
        let gratings = [g(&axes[0])?, g(&axes[1])?, g(&axes[2])?];
        let even = gratings[0].is_even();
        let terms = gratings.iter().map(|g| g.poly_terms()).max().unwrap_or(1);
        (gratings.iter().all(|g| g.is_even() == even)).then_some(SquarePoly {
            gratings,
            even,
            len: if terms <= 3 { 3 } else { 5 },
        })
    }

    /// Each axis's factor and its slope by the index.
    #[inline(always)]
    fn factors<B: Num<Scalar = f64>>(&self, h: [B; 3]) -> [(B, B); 3] {
        let g = &self.gratings;
        match (self.even, self.len) {
            (false, 3) => Grating::poly_and_slope3::<B, false, 3>(g, h),
            (false, _) => Grating::poly_and_slope3::<B, false, 5>(g, h),
            (true, 3) => Grating::poly_and_slope3::<B, true, 3>(g, h),
            (true, _) => Grating::poly_and_slope3::<B, true, 5>(g, h),
        }
    }
}

/// F_latt of square spots as a lattice dual: each axis's factor in a dual
/// of two parts (its index and its N, where N is lattice part `n_parts[a]`)
/// and the three joined by the product rule. The kernel's square lattice
/// ([`Kernel::lattice`]) is the same factors multiplied in the same order,
/// so the value is the same to rounding; computed in the full lattice dual,
/// each factor would carry every part.
#[inline(always)]
fn square_lattice<B: Num<Scalar = f64>, const L: usize>(
    axes: &[SquareAxis; 3],
    poly: Option<&SquarePoly>,
    n_parts: &[Option<usize>; 3],
    hkl: &[Lat<B, L>; 3],
) -> Lat<B, L> {
    let (zero, one) = (B::zero(), B::one());
    let mut f = [Two::<B>::one(); 3];
    match poly {
        Some(p) => {
            let [a, b, c] = p.factors([hkl[0].re, hkl[1].re, hkl[2].re]);
            f = [
                Two { re: a.0, eps: [a.1, zero] },
                Two { re: b.0, eps: [b.1, zero] },
                Two { re: c.0, eps: [c.1, zero] },
            ];
        }
        None => {
            for a in 0..3 {
                // (read in place: a copy of the axes per block is stored and
                // read back piece by piece, which the loads wait on)
                match &axes[a] {
                    SquareAxis::One => {}
                    &SquareAxis::Exact(n, reduce) => {
                        let x = Two { re: hkl[a].re, eps: [one, zero] };
                        let n = Two { re: B::splat(n), eps: [zero, one] };
                        f[a] = exact_grating(x, n, reduce);
                    }
                    SquareAxis::Poly(g) => {
                        let (value, slope) = g.poly_and_slope(hkl[a].re);
                        f[a] = Two { re: value, eps: [slope, zero] };
                    }
                }
            }
        }
    }
    let (fa, fb, fc) = (f[0].re, f[1].re, f[2].re);
    // the products of the other two factors
    let others = [fb * fc, fa * fc, fa * fb];
    let mut out = Lat::<B, L>::constant(fa * fb * fc);
    for a in 0..3 {
        out.eps[a] = f[a].eps[0] * others[a];
        if let Some(e) = n_parts[a] {
            out.eps[e] = f[a].eps[1] * others[a];
        }
    }
    out
}

/// Row `s`: `1 + params` planes of `fpixels` numbers (none with sums).
#[inline(always)]
fn contracted_row<B: Num<Scalar = f64>, const G: usize, const A: usize, const L: usize>(
    rows: &Rows<'_, '_, B, G, A, L>,
    s: usize,
    row: &mut [&mut [f32]],
    limit: Option<usize>,
) -> RowOut {
    let plan = rows.geo.plan();
    let fp = plan.detector.fpixels;
    let Some(blocks) = RowBlocks::new(plan, s, B::LANES, rows.lat.interpolates(), limit) else {
        return RowOut::default();
    };
    let outputs = row.len();
    let cells = if rows.c.cells_kept { rows.geo.cells.len() } else { 0 };
    let mut m = vec![[[B::zero(); 3]; 3]; cells];
    let mut z = vec![B::zero(); z_len(cells)];
    // (the value is taken even where no plane holds it)
    let mut out = vec![B::zero(); outputs.max(1)];
    // Σ v·z over the row's blocks, lane by lane
    let used = &rows.c.used;
    let mut weighted = vec![B::zero(); if rows.sums.is_some() { used.len() } else { 0 }];
    let mut fallback = None;
    for mut b in blocks {
        let first = contracted_lanes(rows, b.f0, s, &mut b.interp, &mut m, &mut z, &mut out);
        for (v, plane) in out.iter().zip(row.iter_mut()) {
            b.store(v, 0, plane);
        }
        if let Some(sums) = rows.sums {
            let at = s * fp + b.f0;
            let live = b.live;
            let v = match sums.v {
                Weights::Uniform(w) => B::splat(w),
                Weights::PerPixel(v) if b.full => {
                    let v = &v[at..at + B::LANES];
                    B::from_fn(|i| v[i])
                }
                Weights::PerPixel(v) => {
                    B::from_fn(|i| if live >> i & 1 != 0 { v[at + i] } else { 0.0 })
                }
            };
            // lanes not rendered (masked, past the ROI) may hold anything, NaN included
            let on = (!b.full).then(|| <B::Mask as Mask>::from_bits(live));
            for (w, &k) in weighted.iter_mut().zip(used) {
                let sum = z[k].mul_add(v, *w);
                *w = on.map_or(sum, |on| B::select(on, sum, *w));
            }
        }
        if fallback.is_none() {
            if let Some(i) = first {
                fallback = Some((s * fp + b.f0 + i, None));
            }
        }
    }
    if let Some(sums) = rows.sums {
        let total = weighted.iter().map(|w| (0..B::LANES).map(|i| w.lane(i)).sum()).collect();
        *sums.rows[s].lock().unwrap_or_else(|e| e.into_inner()) = total;
    }
    // the solid angles are the image's, which reports them
    RowOut { omega: 0.0, fallback }
}

/// Pixels `f0 ..` of row `spixel`: `out[0]` the photons, `out[1 + p]` the
/// derivative by parameter `p`. `m` is scratch (one outer product per cell).
/// Returns the lowest lane whose tricubic interpolation left the grid.
#[inline(always)]
fn contracted_lanes<B: Num<Scalar = f64>, const G: usize, const A: usize, const L: usize>(
    rows: &Rows<'_, '_, B, G, A, L>,
    f0: usize,
    spixel: usize,
    interp: &mut u32,
    m: &mut [[[B; 3]; 3]],
    z: &mut [B],
    out: &mut [B],
) -> Option<usize> {
    let mut hook = Contracted::new(rows, m);
    // (the hook keeps the lowest lane instead)
    let mut first_evaluated = None;
    let end = rows.geo.samples(f0, spixel, interp, &mut first_evaluated, &mut hook);
    let [_, polar, omega] = end.factors;
    // (in place: a copy of the sums is a large memcpy per block)
    hook.sums.polar = polar;
    hook.sums.omega = omega;
    contract_sums(rows, &hook.sums, hook.m, z, out);
    hook.out_of_range
}

/// The contraction's sample hook: the photons and their derivatives by the
/// inner numbers, summed over the samples of one block of pixels.
struct Contracted<'a, 'p, 'c, B: Num<Scalar = f64>, const G: usize, const A: usize, const L: usize>
{
    rows: &'a Rows<'p, 'c, B, G, A, L>,
    /// Per cell: Σ (∂value/∂h) ⊗ q (see [`frame_derivative`]).
    m: &'a mut [[[B; 3]; 3]],
    sums: Sums<B, G, A, L>,
    /// The current sample's fast and slow offsets.
    at: [B; 2],
    lane_offset: B,
    out_of_range: Option<usize>,
}

impl<'a, 'p, 'c, B: Num<Scalar = f64>, const G: usize, const A: usize, const L: usize>
    Contracted<'a, 'p, 'c, B, G, A, L>
{
    #[inline(always)]
    fn new(rows: &'a Rows<'p, 'c, B, G, A, L>, m: &'a mut [[[B; 3]; 3]]) -> Self {
        let zero = B::zero();
        m.fill([[zero; 3]; 3]);
        let os = rows.geo.oversample;
        Contracted {
            rows,
            m,
            sums: Sums {
                i_acc: B::splat(rows.lat.i_bg.re),
                polar: Geo::<B, G>::zero(),
                omega: Geo::<B, G>::zero(),
                polar_aux: Aux::<B, A>::zero(),
                omega_aux: Aux::<B, A>::zero(),
                at_polar: [zero; 2],
                at_omega: [zero; 2],
                d_pos: [[zero; G]; 3],
                d_aux: [zero; A],
                d_lat: [zero; L],
                d_f: zero,
                frame: [[zero; 3]; 3],
            },
            at: [zero; 2],
            lane_offset: B::from_fn(|i| (i * os) as f64),
            out_of_range: None,
        }
    }
}

impl<B: Num<Scalar = f64>, const G: usize, const A: usize, const L: usize> Samples<Geo<B, G>, Fast>
    for Contracted<'_, '_, '_, B, G, A, L>
{
    // (in one AVX-512 vector. The AVX2 pairs and the scalar fallback keep
    // one copy of their rows: a copy of the eight shapes' rows costs
    // minutes of every release build of this crate, and the AVX2 pairs'
    // gained 7 % (the 1024² Jᵀv by 5 parameters, 2 threads, AVX2 rows on
    // an AVX-512 VM: 10.2-10.5 ms with, 10.9-11.3 ms without))
    const UNROLL_ONE_SAMPLE: bool = B::LANES > 1 && B::VECTORS == 1;

    /// The position in plain lanes (no parameter the geometry dual carries
    /// moves it), whose dual parts are its own components, its derivative
    /// along the one parameter that moves it (`pix0` + f `fdet` + s `sdet`
    /// moved), or none.
    #[inline(always)]
    fn position(
        &mut self,
        _geo: &Kernel<Geo<B, G>, Fast>,
        f0: usize,
        spixel: usize,
        [sub_f, sub_s]: [usize; 2],
        os: usize,
        _lane_offset: Geo<B, G>,
        _odet_pos: Geo<B, G>,
    ) -> V3<Geo<B, G>> {
        let val = &self.rows.val;
        let (fpos, spos) = val.subpixel_offsets(f0, spixel, sub_f, sub_s, os, self.lane_offset);
        let p = val.position(fpos, spos, B::c(0.0) * B::splat(val.thickstep));
        self.at = [fpos, spos];
        let c = self.rows.c;
        let mut pos = [Geo::<B, G>::zero(); 3];
        for i in 0..3 {
            pos[i].re = p[i];
            match (c.npos, c.along) {
                (3, _) => pos[i].eps[i] = B::one(),
                (1, Some([d_pix0, d_fdet, d_sdet])) => {
                    pos[i].eps[0] = B::splat(d_pix0[i])
                        + fpos * B::splat(d_fdet[i])
                        + spos * B::splat(d_sdet[i]);
                }
                _ => {}
            }
        }
        pos
    }

    #[inline(always)]
    fn omega_taken(&mut self, m: B::Mask, airpath: Geo<B, G>, inv_airpath: Geo<B, G>) {
        for i in 0..2 {
            self.sums.at_omega[i] = B::select(m, self.at[i], self.sums.at_omega[i]);
        }
        if self.rows.c.aux_omega {
            let aux = &self.rows.aux;
            let omega = aux.solid_angle(Aux::constant(airpath.re), Aux::constant(inv_airpath.re));
            self.sums.omega_aux = Aux::select(m, omega, self.sums.omega_aux);
        }
    }

    #[inline(always)]
    fn polar_taken(&mut self, m: B::Mask, src: usize, diffracted: &V3<Geo<B, G>>) {
        for i in 0..2 {
            self.sums.at_polar[i] = B::select(m, self.at[i], self.sums.at_polar[i]);
        }
        if self.rows.c.aux_polar {
            let aux = &self.rows.aux;
            let mut toward = values_of(diffracted);
            self.sums.polar_aux =
                aux.polarize(&aux.sources[src], &mut toward, m, self.sums.polar_aux);
        }
    }

    #[inline(always)]
    fn source(
        &mut self,
        _geo: &Kernel<Geo<B, G>, Fast>,
        (src, diffracted): (usize, &V3<Geo<B, G>>),
        q: V3<Geo<B, G>>,
        active: B::Mask,
        _factors: [Geo<B, G>; 3],
        interp: &mut u32,
        _out_of_range: &mut Option<(usize, Fallback)>,
    ) {
        let weight = Lat::<B, L>::splat(self.rows.lat.sources[src].weight);
        let d_q = self.cells(q, active, weight, interp);
        let c = self.rows.c;
        let [fpos, spos] = self.at;
        let s = &mut self.sums;
        if c.npos == 1 {
            // the position's one part is along the parameter: weight 1 alone
            s.d_pos[0][0] = fma_dot(d_q, [q[0].eps[0], q[1].eps[0], q[2].eps[0]], s.d_pos[0][0]);
        } else {
            for k in 0..c.npos {
                let t = fma_dot(d_q, [q[0].eps[k], q[1].eps[k], q[2].eps[k]], B::zero());
                s.d_pos[0][k] += t;
                s.d_pos[1][k] = fpos.mul_add(t, s.d_pos[1][k]);
                s.d_pos[2][k] = spos.mul_add(t, s.d_pos[2][k]);
            }
        }
        if c.aux_q {
            let aux = &self.rows.aux;
            let q = aux.scattering(values_of(diffracted), &aux.sources[src]);
            for k in c.npos..c.geo_parts.len() {
                let a = k - c.npos;
                s.d_aux[a] = fma_dot(d_q, [q[0].eps[a], q[1].eps[a], q[2].eps[a]], s.d_aux[a]);
            }
        }
    }
}

impl<B: Num<Scalar = f64>, const G: usize, const A: usize, const L: usize>
    Contracted<'_, '_, '_, B, G, A, L>
{
    /// Every cell's photons for scattering `q` in the lanes of `active`
    /// (times the source's `weight` where the kernel weights the sources),
    /// their derivatives by the lattice dual's parts; returns d I / d q.
    #[inline(always)]
    fn cells(
        &mut self,
        q: V3<Geo<B, G>>,
        active: B::Mask,
        weight: Lat<B, L>,
        interp: &mut u32,
    ) -> [B; 3] {
        let (lat, c) = (&self.rows.lat, self.rows.c);
        let plan = lat.plan();
        let zero = B::zero();
        let nl = 3 + c.lat_parts.len();
        let square = &self.rows.square;
        let s = &mut self.sums;
        let qv = [q[0].re, q[1].re, q[2].re];
        let mut d_q = [zero; 3];
        // F is default_F everywhere without a grid, moved by no lattice part
        let f2 = (lat.grid.is_none()).then(|| {
            let f = lat.default_f.re;
            B::splat(f * f)
        });
        for (ci, cell) in self.rows.val.cells.iter().enumerate() {
            // (written out: `array::map` is not inlined into the row functions)
            let sp = |v: V3<f64>| [B::splat(v[0]), B::splat(v[1]), B::splat(v[2])];
            let abc = [sp(cell.a), sp(cell.b), sp(cell.c)];
            let mut hkl = [Lat::<B, L>::zero(); 3];
            for i in 0..3 {
                hkl[i].re = dot(abc[i], qv);
                hkl[i].eps[i] = B::one();
            }
            let f_latt = match square {
                Some(axes) => {
                    square_lattice(axes, self.rows.square_poly.as_ref(), &c.n_parts, &hkl)
                }
                None => lat.lattice(hkl[0], hkl[1], hkl[2]),
            };
            let mut hit = active;
            if plan.water_size_m == 0.0 {
                hit = hit & f_latt.cmp_ne(Lat::<B, L>::zero());
                if !hit.any() {
                    continue;
                }
            }
            let f_cell = if lat.grid.is_none() {
                Lat::<B, L>::splat(lat.default_f)
            } else {
                let mut oor = None;
                let f = lat.structure_factor(hkl, hit, interp, &mut oor);
                if let Some((i, _)) = oor {
                    self.out_of_range = Some(self.out_of_range.map_or(i, |j: usize| j.min(i)));
                }
                f
            };
            let mut t = match f2 {
                // (F² F_latt) F_latt: the numbers of F F F_latt F_latt, in order
                Some(f2) => {
                    let mut g = f_latt;
                    g.re *= f2;
                    for e in g.eps.iter_mut() {
                        *e *= f2;
                    }
                    g * f_latt
                }
                None => f_cell * f_cell * f_latt * f_latt,
            };
            if lat.weighted {
                t *= weight;
            }
            s.i_acc = B::select(hit, s.i_acc + t.re, s.i_acc);
            let mut g = [zero; 3];
            for i in 0..3 {
                g[i] = B::select(hit, t.eps[i], zero);
            }
            for j in 0..3 {
                d_q[j] = fma_dot(g, [abc[0][j], abc[1][j], abc[2][j]], d_q[j]);
            }
            if c.frame_kept {
                add_outer(&mut s.frame, g, [hkl[0].re, hkl[1].re, hkl[2].re]);
            }
            if let Some(mc) = self.m.get_mut(ci) {
                add_outer(mc, g, qv);
            }
            for e in 3..nl {
                s.d_lat[e] += B::select(hit, t.eps[e], zero);
            }
            if lat.grid.is_none() && c.f_used {
                let fl = f_latt.re;
                let d_f = B::c(2.0) * f_cell.re * fl * fl;
                let d_f = if lat.weighted { d_f * weight.re } else { d_f };
                s.d_f += B::select(hit, d_f, zero);
            }
        }
        d_q
    }
}

/// The values of a geometry dual's vector, as auxiliary duals (no parts).
#[inline(always)]
fn values_of<B: Num<Scalar = f64>, const G: usize, const A: usize>(
    v: &V3<Geo<B, G>>,
) -> V3<Aux<B, A>> {
    [Aux::constant(v[0].re), Aux::constant(v[1].re), Aux::constant(v[2].re)]
}

/// `acc + a · b` in fused multiply-adds: the inner derivatives' sums (the
/// image's numbers do not go through them).
#[inline(always)]
fn fma_dot<B: Num>(a: [B; 3], b: [B; 3], acc: B) -> B {
    a[2].mul_add(b[2], a[1].mul_add(b[1], a[0].mul_add(b[0], acc)))
}

/// `acc += a ⊗ b` (fused, as [`fma_dot`]).
#[inline(always)]
fn add_outer<B: Num>(acc: &mut [[B; 3]; 3], a: [B; 3], b: [B; 3]) {
    for (row, ai) in acc.iter_mut().zip(a) {
        for (x, bk) in row.iter_mut().zip(b) {
            *x = ai.mul_add(bk, *x);
        }
    }
}

/// What the sample loop of [`contracted_lanes`] sums over one block of
/// pixels: the photons, the polarization and solid angle (with the sub-pixel
/// (fast, slow) where each was taken) and the photons' derivatives by the
/// inner numbers.
struct Sums<B: Num<Scalar = f64>, const G: usize, const A: usize, const L: usize> {
    i_acc: B,
    polar: Geo<B, G>,
    omega: Geo<B, G>,
    /// The polarization and solid angle by the auxiliary parts.
    polar_aux: Aux<B, A>,
    omega_aux: Aux<B, A>,
    at_polar: [B; 2],
    at_omega: [B; 2],
    /// d I / d pos, weighted by 1, f, s (pos = pix0 + f fdet + s sdet), by
    /// the position's parts (`G` of them: 3 components, or 1 along a
    /// parameter, and then `[0][0]` is read alone; unused without parts).
    d_pos: [[B; G]; 3],
    /// d I / d the auxiliary parts, through the scattering vector.
    d_aux: [B; A],
    d_lat: [B; L],
    /// d I / d default_F without a grid.
    d_f: B,
    /// Σ over cells of (∂value/∂h) ⊗ h (see [`frame_derivative`]).
    frame: [[B; 3]; 3],
}

/// The block's value into `out[0]` and, through the inner numbers `z`, its
/// derivative by each parameter into `out[1 + p]`.
#[inline(always)]
fn contract_sums<B: Num<Scalar = f64>, const G: usize, const A: usize, const L: usize>(
    rows: &Rows<'_, '_, B, G, A, L>,
    s: &Sums<B, G, A, L>,
    m: &[[[B; 3]; 3]],
    z: &mut [B],
    out: &mut [B],
) {
    let (lat, c) = (&rows.lat, rows.c);
    let zero = B::zero();
    let ng = c.geo_parts.len();
    let nl = 3 + c.lat_parts.len();
    // the photons, in the exact kernel's order (capture fraction 1)
    let (scale, steps) = (B::splat(lat.scale.re), B::splat(lat.steps.re));
    // (a division per block and term unless 1/steps is exact)
    let over_steps = |x: B| match rows.inv_steps {
        Some(inv) => x * B::splat(inv),
        None => x / steps,
    };
    let (p, o) = (s.polar.re, s.omega.re);
    let value = over_steps(scale * s.i_acc) * B::one() * p * o;
    out[0] = value;
    // d value / d (inner numbers)
    let kpo = over_steps(scale) * p * o;
    let ks = over_steps(scale * s.i_acc);
    let (ks_o, ks_p) = (ks * o, ks * p);
    if c.npos == 1 {
        // (the polarization's and solid angle's parts are along the
        // parameter already, at the sample where each was taken)
        z[0] = kpo * s.d_pos[0][0] + ks_o * s.polar.eps[0] + ks_p * s.omega.eps[0];
    } else if c.npos == 3 {
        let wp = [B::one(), s.at_polar[0], s.at_polar[1]];
        let wo = [B::one(), s.at_omega[0], s.at_omega[1]];
        for w in 0..3 {
            for i in 0..3 {
                z[3 * w + i] = kpo * s.d_pos[w][i]
                    + ks_o * s.polar.eps[i] * wp[w]
                    + ks_p * s.omega.eps[i] * wo[w];
            }
        }
    }
    for k in c.npos..ng {
        let a = k - c.npos;
        z[Z_GEO + k] = kpo * s.d_aux[a] + ks_o * s.polar_aux.eps[a] + ks_p * s.omega_aux.eps[a];
    }
    for e in 3..nl {
        z[Z_LAT + e] = kpo * s.d_lat[e];
    }
    z[Z_SCALE] = over_steps(s.i_acc) * p * o;
    z[Z_IBG] = kpo;
    z[Z_F] = kpo * s.d_f;
    for i in 0..3 {
        for k in 0..3 {
            z[Z_FRAME + 3 * i + k] = kpo * s.frame[i][k];
        }
    }
    for (zc, mc) in z[Z_CELLS..].chunks_exact_mut(9).zip(m.iter()) {
        for i in 0..3 {
            for k in 0..3 {
                zc[3 * i + k] = kpo * mc[i][k];
            }
        }
    }
    for (terms, d) in c.terms.iter().zip(out[1..].iter_mut()) {
        let mut acc = zero;
        for &(i, x) in terms {
            acc = z[i].mul_add(B::splat(x), acc);
        }
        *d = acc;
    }
}
