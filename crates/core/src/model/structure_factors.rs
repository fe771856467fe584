//! Structure factors of an atomic model by direct summation over its atoms
//! and the space group's operators:
//!
//! F(h) = Σ_ops exp(2πi h·t) Σ_atoms (f0(s) + f′ + i f″) · occ · T(hR) · exp(2πi (hR)·x)
//!
//! with x the fractional position, `hR` the row vector h times the
//! operator's rotation, `s = sin θ / λ` and T the Debye–Waller factor,
//! exp(−B s²) or, for an anisotropic atom, exp(−2π² s_c·U s_c) with s_c
//! the Cartesian reciprocal vector of `hR`. The same factor in `hR` makes an
//! operator's image of an anisotropic atom carry the rotated U.
//!
//! Only one reflection of each set of equivalents is summed; the others
//! follow from F(hR) = F(h) · exp(−2πi h·t), exact for every operator.

use crate::crystal::space_group::SpaceGroup;
use crate::error::{Error, Result};
use crate::model::{Element, Model};
use crate::real::plain::{sincos_turns, sincos_turns_lanes};
use crate::sf::form_factor::It92;
use rayon::prelude::*;
use std::f64::consts::PI;

/// The anomalous parts f′ and f″ (electrons) of one element's atoms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Anomalous {
    /// The element they apply to.
    pub element: Element,
    /// f′, the real part.
    pub fp: f64,
    /// f″, the imaginary part.
    pub fdp: f64,
}

/// Atoms per chunk of the summation: the loops over a chunk's lanes are
/// written for the compiler to vectorise (AVX-512 holds a chunk, AVX2 half).
const CHUNK: usize = 8;

/// The atoms of one kind (isotropic or anisotropic), structure of arrays in
/// chunks of [`CHUNK`]; the padding's atoms have occupancy 0.
#[derive(Debug, Clone, Default)]
struct Sites {
    /// Fractional coordinates.
    x: Vec<[f64; CHUNK]>,
    y: Vec<[f64; CHUNK]>,
    z: Vec<[f64; CHUNK]>,
    /// Index into the model's distinct elements.
    species: Vec<[usize; CHUNK]>,
    occupancy: Vec<[f64; CHUNK]>,
    /// `B` (Å²) of an isotropic atom.
    b_iso_a2: Vec<[f64; CHUNK]>,
    /// `β = 2π² M⁻¹ U M⁻ᵀ` of an anisotropic atom as β11, β22, β33, 2β12,
    /// 2β13, 2β23: the Debye–Waller factor at Miller index k is
    /// exp(−kᵀβk).
    beta: Vec<[[f64; CHUNK]; 6]>,
    len: usize,
}

impl Sites {
    fn push(&mut self, frac: [f64; 3], species: usize, occupancy: f64, b: f64, beta: [f64; 6]) {
        let lane = self.len % CHUNK;
        if lane == 0 {
            self.x.push([0.0; CHUNK]);
            self.y.push([0.0; CHUNK]);
            self.z.push([0.0; CHUNK]);
            self.species.push([0; CHUNK]);
            self.occupancy.push([0.0; CHUNK]);
            self.b_iso_a2.push([0.0; CHUNK]);
            self.beta.push([[0.0; CHUNK]; 6]);
        }
        let c = self.x.len() - 1;
        self.x[c][lane] = frac[0];
        self.y[c][lane] = frac[1];
        self.z[c][lane] = frac[2];
        self.species[c][lane] = species;
        self.occupancy[c][lane] = occupancy;
        self.b_iso_a2[c][lane] = b;
        for (row, v) in self.beta[c].iter_mut().zip(beta) {
            row[lane] = v;
        }
        self.len += 1;
    }
}

/// Each atom's scattering at one reflection before its phase: (f0 + f′)
/// and f″ times the occupancy (and the isotropic Debye–Waller factor).
#[derive(Debug, Clone, Default)]
struct Weights {
    iso: Vec<[[f64; CHUNK]; 2]>,
    aniso: Vec<[[f64; CHUNK]; 2]>,
}

/// Σ_atoms w·T·cos φ and w·T·sin φ at one Miller index, for the real and
/// the imaginary part of w: from these F at k and at −k both follow.
#[derive(Debug, Clone, Copy, Default)]
struct PhaseSums {
    re_cos: f64,
    re_sin: f64,
    im_cos: f64,
    im_sin: f64,
}

/// One reflection's Miller index and F as (re, im).
pub type Reflection = ([i32; 3], (f64, f64));

/// A rotation with the translations (cycles) of every operator that has it.
type RotationClass = ([[i32; 3]; 3], Vec<[f64; 3]>);

/// A model's atoms with its cell and space group, ready to give F(h).
#[derive(Debug, Clone)]
pub struct ModelStructureFactors {
    iso: Sites,
    aniso: Sites,
    /// (form factor, f′, f″) of each distinct element.
    species: Vec<(It92, f64, f64)>,
    /// Rows of the reciprocal basis in Cartesian coordinates (1/Å): s_c =
    /// Σ h_i · recip[i].
    recip: [[f64; 3]; 3],
    /// The operators' rotations (as integer matrices) and translations
    /// (cycles).
    ops: Vec<([[i32; 3]; 3], [f64; 3])>,
    /// The rotations of the Laue group: the operators' and their negatives
    /// (a reflection and its Friedel mate are summed together).
    laue: Vec<[[i32; 3]; 3]>,
    /// Distinct rotations, each with the translations (cycles) of every
    /// operator that has it: a centred group's operators share a rotation.
    rotations: Vec<RotationClass>,
    group: SpaceGroup,
    cell: [f64; 6],
}

/// The orthogonalisation of the PDB's convention (a along x, b in the x–y
/// plane): Cartesian = M · fractional.
pub fn orthogonalization(cell: [f64; 6]) -> Result<[[f64; 3]; 3]> {
    let [a, b, c, al, be, ga] = cell;
    let (ca, cb, cg) = (al.to_radians().cos(), be.to_radians().cos(), ga.to_radians().cos());
    let sg = ga.to_radians().sin();
    let v2 = 1.0 - ca * ca - cb * cb - cg * cg + 2.0 * ca * cb * cg;
    let positive = a > 0.0 && b > 0.0 && c > 0.0 && v2 > 0.0 && sg > 0.0;
    if !(positive && cell.iter().all(|x| x.is_finite())) {
        return Err(Error::Invalid {
            what: "model cell",
            msg: format!("{a} {b} {c} {al} {be} {ga} is not a unit cell"),
        });
    }
    let v = a * b * c * v2.sqrt();
    Ok([[a, b * cg, c * cb], [0.0, b * sg, c * (ca - cb * cg) / sg], [0.0, 0.0, v / (a * b * sg)]])
}

fn inverse(m: [[f64; 3]; 3]) -> [[f64; 3]; 3] {
    let det = m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
        - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
        + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]);
    let mut inv = [[0.0; 3]; 3];
    for (i, row) in inv.iter_mut().enumerate() {
        for (j, x) in row.iter_mut().enumerate() {
            // cofactor of (j, i)
            let (r0, r1) = ((j + 1) % 3, (j + 2) % 3);
            let (c0, c1) = ((i + 1) % 3, (i + 2) % 3);
            *x = (m[r0][c0] * m[r1][c1] - m[r0][c1] * m[r1][c0]) / det;
        }
    }
    inv
}

fn mat_mul(a: [[f64; 3]; 3], b: [[f64; 3]; 3]) -> [[f64; 3]; 3] {
    let mut c = [[0.0; 3]; 3];
    for i in 0..3 {
        for j in 0..3 {
            c[i][j] = (0..3).map(|k| a[i][k] * b[k][j]).sum();
        }
    }
    c
}

fn transpose(a: [[f64; 3]; 3]) -> [[f64; 3]; 3] {
    let mut t = [[0.0; 3]; 3];
    for i in 0..3 {
        for j in 0..3 {
            t[i][j] = a[j][i];
        }
    }
    t
}

/// `h R`: the Miller index an operator of rotation `r` maps `h` to.
#[inline]
fn row_times(h: [i32; 3], r: &[[i32; 3]; 3]) -> [i32; 3] {
    [0, 1, 2].map(|j| h[0] * r[0][j] + h[1] * r[1][j] + h[2] * r[2][j])
}

impl ModelStructureFactors {
    /// Resolves `model` in `space_group`, with the f′ and f″ of `anomalous`
    /// for the elements it names (0 for the others).
    ///
    /// Errors: a cell that is not one, or an element beyond the form-factor
    /// table.
    pub fn new(
        model: &Model,
        space_group: &SpaceGroup,
        anomalous: &[Anomalous],
    ) -> Result<ModelStructureFactors> {
        let m = orthogonalization(model.cell)?;
        let m_inv = inverse(m);
        // (M⁻¹ rows are the reciprocal basis vectors in Cartesian coordinates)
        let recip = m_inv;
        let mut elements: Vec<Element> = Vec::new();
        let mut species = Vec::new();
        let (mut iso, mut aniso) = (Sites::default(), Sites::default());
        for atom in &model.atoms {
            let index = match elements.iter().position(|e| *e == atom.element) {
                Some(i) => i,
                None => {
                    let z = atom.element.atomic_number();
                    let f0 = It92::of(z).ok_or_else(|| Error::Invalid {
                        what: "model",
                        msg: format!("no form factor for element {}", atom.element.symbol()),
                    })?;
                    let (fp, fdp) = anomalous
                        .iter()
                        .rev()
                        .find(|a| a.element == atom.element)
                        .map_or((0.0, 0.0), |a| (a.fp, a.fdp));
                    elements.push(atom.element);
                    species.push((f0, fp, fdp));
                    elements.len() - 1
                }
            };
            let x = atom.xyz_a;
            let frac =
                [0, 1, 2].map(|i| m_inv[i][0] * x[0] + m_inv[i][1] * x[1] + m_inv[i][2] * x[2]);
            match atom.u_aniso_a2 {
                Some([u11, u22, u33, u12, u13, u23]) => {
                    let u = [[u11, u12, u13], [u12, u22, u23], [u13, u23, u33]];
                    let b = mat_mul(mat_mul(m_inv, u), transpose(m_inv));
                    let b = b.map(|row| row.map(|x| 2.0 * PI * PI * x));
                    let beta =
                        [b[0][0], b[1][1], b[2][2], 2.0 * b[0][1], 2.0 * b[0][2], 2.0 * b[1][2]];
                    aniso.push(frac, index, atom.occupancy, 0.0, beta);
                }
                None => iso.push(frac, index, atom.occupancy, atom.b_iso_a2, [0.0; 6]),
            }
        }
        let ops: Vec<_> = space_group.ops().iter().map(|op| (op.rot, op.translation())).collect();
        let mut rotations: Vec<RotationClass> = Vec::new();
        for (rot, t) in &ops {
            match rotations.iter_mut().find(|(r, _)| r == rot) {
                Some((_, ts)) => ts.push(*t),
                None => rotations.push((*rot, vec![*t])),
            }
        }
        let mut laue: Vec<[[i32; 3]; 3]> = Vec::new();
        for (rot, _) in &ops {
            let minus = rot.map(|row| row.map(|x| -x));
            for r in [*rot, minus] {
                if !laue.contains(&r) {
                    laue.push(r);
                }
            }
        }
        Ok(ModelStructureFactors {
            iso,
            aniso,
            species,
            recip,
            ops,
            laue,
            rotations,
            group: space_group.clone(),
            cell: model.cell,
        })
    }

    /// The space group's H-M symbol.
    pub fn space_group(&self) -> &str {
        self.group.hm()
    }

    /// Whether the space group makes F(h) vanish.
    pub fn absent(&self, h: [i32; 3]) -> bool {
        self.group.is_systematically_absent(h)
    }

    /// `1/d²` of reflection `h` (1/Å²).
    pub fn inv_d2(&self, h: [i32; 3]) -> f64 {
        let s = self.cartesian(h);
        s[0] * s[0] + s[1] * s[1] + s[2] * s[2]
    }

    fn cartesian(&self, h: [i32; 3]) -> [f64; 3] {
        let r = &self.recip;
        let h = h.map(f64::from);
        // s_c = Σ_i h_i · (column i of M⁻¹ as a row of the reciprocal basis)
        [0, 1, 2].map(|j| h[0] * r[0][j] + h[1] * r[1][j] + h[2] * r[2][j])
    }

    /// F(h) by the full sum over every operator, as (re, im).
    pub fn f(&self, h: [i32; 3]) -> (f64, f64) {
        self.f_pair(h, &mut Weights::default()).0
    }

    /// F(h) and F(−h), as (re, im) each, by the full sum over every
    /// operator: the two share every sine and cosine. `weights` is scratch
    /// kept between calls (a thread allocates it once).
    fn f_pair(&self, h: [i32; 3], weights: &mut Weights) -> ((f64, f64), (f64, f64)) {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                // SAFETY: the CPU has AVX-512F.
                return unsafe { self.f_pair_avx512(h, weights) };
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has AVX2.
                return unsafe { self.f_pair_avx2(h, weights) };
            }
        }
        self.f_pair_any(h, weights)
    }

    /// [`Self::f_pair`] compiled for AVX-512 (the same arithmetic: no
    /// contraction into FMAs, so every version gives the same bits).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn f_pair_avx512(&self, h: [i32; 3], weights: &mut Weights) -> ((f64, f64), (f64, f64)) {
        self.f_pair_any(h, weights)
    }

    /// [`Self::f_pair`] compiled for AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn f_pair_avx2(&self, h: [i32; 3], weights: &mut Weights) -> ((f64, f64), (f64, f64)) {
        self.f_pair_any(h, weights)
    }

    #[inline(always)]
    fn f_pair_any(&self, h: [i32; 3], weights: &mut Weights) -> ((f64, f64), (f64, f64)) {
        let stol2 = 0.25 * self.inv_d2(h);
        // f0 + f′ and f″ of each element, then each atom's with its
        // occupancy and (isotropic) Debye–Waller factor, which the
        // operators do not change
        let mut f = [(0.0, 0.0); 98];
        for (w, (f0, fp, fdp)) in f.iter_mut().zip(&self.species) {
            *w = (f0.f0(stol2) + fp, *fdp);
        }
        fill_weights(&self.iso, &f, stol2, true, &mut weights.iso);
        fill_weights(&self.aniso, &f, stol2, false, &mut weights.aniso);
        let hf = h.map(f64::from);
        let (mut plus, mut minus) = ((0.0, 0.0), (0.0, 0.0));
        for (rot, ts) in &self.rotations {
            // P = Σ over the operators of one rotation of exp(2πi h·t); at
            // −h it is P's conjugate
            let (mut pr, mut pi) = (0.0, 0.0);
            for t in ts {
                let (s, c) = sincos_turns(hf[0] * t[0] + hf[1] * t[1] + hf[2] * t[2]);
                pr += c;
                pi += s;
            }
            if pr.abs() + pi.abs() < 1e-9 {
                continue;
            }
            let k = row_times(h, rot).map(f64::from);
            let a = phase_sums::<false>(&self.iso, &weights.iso, k);
            let b = phase_sums::<true>(&self.aniso, &weights.aniso, k);
            let (cr, ci) = (a.re_cos + b.re_cos, a.im_cos + b.im_cos);
            let (sr, si) = (a.re_sin + b.re_sin, a.im_sin + b.im_sin);
            // G(±k) = Σ (wr + i wi)·T·(cos φ ± i sin φ)
            let (g_re, g_im) = (cr - si, sr + ci);
            let (m_re, m_im) = (cr + si, ci - sr);
            plus.0 += pr * g_re - pi * g_im;
            plus.1 += pr * g_im + pi * g_re;
            minus.0 += pr * m_re + pi * m_im;
            minus.1 += pr * m_im - pi * m_re;
        }
        (plus, minus)
    }

    /// Every reflection with `d ≥ dmin_a` (h = 0 excluded), with its F as
    /// (re, im), in no particular order. One reflection of each set of
    /// equivalents under the Laue group is summed (in parallel), together
    /// with its Friedel mate; the rest follow from them. Systematic
    /// absences are given as exactly 0.
    pub fn to_resolution(&self, dmin_a: f64) -> Result<Vec<Reflection>> {
        if !(dmin_a > 0.0 && dmin_a.is_finite()) {
            return Err(Error::Invalid {
                what: "-dmin",
                msg: format!("{dmin_a} Å is not a resolution"),
            });
        }
        let limit = 1.0 / (dmin_a * dmin_a) * (1.0 + 1e-12);
        // (h_i = a_i · s_c, so |h_i| ≤ |a_i| / d)
        let hmax = [0, 1, 2].map(|i| (self.cell[i] / dmin_a).floor() as i32 + 1);
        let dims = hmax.map(|x| (2 * x + 1) as usize);
        let cells = dims[0] * dims[1] * dims[2];
        if cells > 1 << 34 {
            return Err(Error::TooLarge {
                what: format!("the reflections to {dmin_a} Å"),
                bytes: cells as u128 * 40,
            });
        }
        let slot = |h: [i32; 3]| -> usize {
            (((h[0] + hmax[0]) as usize * dims[1]) + (h[1] + hmax[1]) as usize) * dims[2]
                + (h[2] + hmax[2]) as usize
        };
        let mut seen = vec![false; cells];
        let mut representatives = Vec::new();
        for h in -hmax[0]..=hmax[0] {
            for k in -hmax[1]..=hmax[1] {
                for l in -hmax[2]..=hmax[2] {
                    let hkl = [h, k, l];
                    if hkl == [0, 0, 0] || seen[slot(hkl)] || self.inv_d2(hkl) > limit {
                        continue;
                    }
                    for rot in &self.laue {
                        seen[slot(row_times(hkl, rot))] = true;
                    }
                    representatives.push(hkl);
                }
            }
        }
        let minus = |h: [i32; 3]| h.map(|x| -x);
        let values: Vec<_> = representatives
            .par_iter()
            .map_init(Weights::default, |weights, h| {
                let (mut plus, mut minus_f) = self.f_pair(*h, weights);
                // (a systematic absence sums to rounding)
                if self.absent(*h) {
                    plus = (0.0, 0.0);
                }
                if self.absent(minus(*h)) {
                    minus_f = (0.0, 0.0);
                }
                (plus, minus_f)
            })
            .collect();
        let mut out = Vec::with_capacity(representatives.len() * self.laue.len());
        let mut done = vec![false; cells];
        for (h, ((re, im), (mre, mim))) in representatives.iter().zip(values) {
            for (rot, t) in &self.ops {
                // F(hR) = F(h) exp(−2πi h·t), F(−hR) = F(−h) exp(2πi h·t)
                let (s, c) =
                    sincos_turns(-(h[0] as f64 * t[0] + h[1] as f64 * t[1] + h[2] as f64 * t[2]));
                let e = row_times(*h, rot);
                if !std::mem::replace(&mut done[slot(e)], true) {
                    out.push((e, (re * c - im * s, re * s + im * c)));
                }
                let e = minus(e);
                if !std::mem::replace(&mut done[slot(e)], true) {
                    out.push((e, (mre * c + mim * s, mim * c - mre * s)));
                }
            }
        }
        Ok(out)
    }
}

/// Each atom's weight at `stol2` into `out` (one entry per chunk of
/// `sites`): the element's (f0 + f′, f″) times the occupancy, and with
/// `isotropic` times exp(−B s²).
#[inline(always)]
fn fill_weights(
    sites: &Sites,
    f: &[(f64, f64); 98],
    stol2: f64,
    isotropic: bool,
    out: &mut Vec<[[f64; CHUNK]; 2]>,
) {
    out.clear();
    for c in 0..sites.x.len() {
        let mut w = [[0.0; CHUNK]; 2];
        let mut dw = [1.0; CHUNK];
        if isotropic {
            for (d, b) in dw.iter_mut().zip(&sites.b_iso_a2[c]) {
                *d = exp_neg(b * stol2);
            }
        }
        for lane in 0..CHUNK {
            let (fr, fi) = f[sites.species[c][lane]];
            let a = sites.occupancy[c][lane] * dw[lane];
            w[0][lane] = a * fr;
            w[1][lane] = a * fi;
        }
        out.push(w);
    }
}

/// [`PhaseSums`] of `sites` with `weights` at Miller index `k`; with
/// `ANISO`, each atom's anisotropic Debye–Waller factor at `k`.
#[inline(always)]
fn phase_sums<const ANISO: bool>(
    sites: &Sites,
    weights: &[[[f64; CHUNK]; 2]],
    k: [f64; 3],
) -> PhaseSums {
    let mut acc = [[0.0; CHUNK]; 4];
    for (c, w) in weights.iter().enumerate() {
        let (x, y, z) = (&sites.x[c], &sites.y[c], &sites.z[c]);
        let mut t = [1.0; CHUNK];
        if ANISO {
            let b = &sites.beta[c];
            let kk = [k[0] * k[0], k[1] * k[1], k[2] * k[2], k[0] * k[1], k[0] * k[2], k[1] * k[2]];
            for (lane, t) in t.iter_mut().enumerate() {
                let q = kk[0] * b[0][lane]
                    + kk[1] * b[1][lane]
                    + kk[2] * b[2][lane]
                    + kk[3] * b[3][lane]
                    + kk[4] * b[4][lane]
                    + kk[5] * b[5][lane];
                *t = exp_neg(q);
            }
        }
        let mut phase = [0.0; CHUNK];
        for lane in 0..CHUNK {
            phase[lane] = k[0] * x[lane] + k[1] * y[lane] + k[2] * z[lane];
        }
        let (sin, cos) = sincos_turns_lanes(&phase);
        for lane in 0..CHUNK {
            let (wr, wi) = (w[0][lane] * t[lane], w[1][lane] * t[lane]);
            acc[0][lane] += wr * cos[lane];
            acc[1][lane] += wr * sin[lane];
            acc[2][lane] += wi * cos[lane];
            acc[3][lane] += wi * sin[lane];
        }
    }
    let sum = |a: &[f64; CHUNK]| a.iter().sum::<f64>();
    PhaseSums {
        re_cos: sum(&acc[0]),
        re_sin: sum(&acc[1]),
        im_cos: sum(&acc[2]),
        im_sin: sum(&acc[3]),
    }
}

/// e^−q for q ≥ 0 (a Debye–Waller exponent) to within a few units of the
/// last place, 0 where it would be subnormal: the noise stream's
/// vectorisable exponential, guarded for the exponents it does not take.
#[inline(always)]
pub fn exp_neg(q: f64) -> f64 {
    if q > 708.0 {
        0.0
    } else {
        crate::real::plain::exp_neg(q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Atom;

    #[test]
    fn exp_neg_is_the_library_exp() {
        let mut worst: f64 = 0.0;
        for i in 0..=200_000 {
            // (to 700: beyond 708 the result is flushed to 0)
            let q = i as f64 * 0.0035;
            let want = (-q).exp();
            worst = worst.max((exp_neg(q) - want).abs() / want);
        }
        assert!(worst < 1e-15, "worst {worst:e}");
        assert_eq!(exp_neg(0.0), 1.0);
        assert_eq!(exp_neg(800.0), 0.0);
    }

    fn atom(element: &str, xyz_a: [f64; 3], occupancy: f64, b: f64, u: Option<[f64; 6]>) -> Atom {
        Atom {
            name: element.to_uppercase(),
            element: Element::from_symbol(element).unwrap(),
            charge: 0,
            xyz_a,
            occupancy,
            b_iso_a2: b,
            u_aniso_a2: u,
            line: 0,
        }
    }

    /// Every reflection the orbit expansion writes equals the full sum over
    /// all operators at that reflection, in groups with screw axes, centring
    /// and a non-standard setting, with anisotropic atoms.
    #[test]
    fn expanded_equivalents_equal_the_full_sum() {
        let atoms = vec![
            atom("Fe", [3.1, 7.7, 2.9], 0.8, 12.0, None),
            atom("S", [9.4, 1.3, 11.2], 1.0, 0.0, Some([0.12, 0.18, 0.15, 0.02, -0.01, 0.03])),
            atom("O", [0.7, 4.2, 8.8], 0.5, 20.0, None),
        ];
        for (symbol, cell) in [
            ("P 21 21 21", [25.0, 31.0, 37.0, 90.0, 90.0, 90.0]),
            ("P 61 2 2", [30.0, 30.0, 45.0, 90.0, 90.0, 120.0]),
            ("I 1 2 1", [40.0, 25.0, 30.0, 90.0, 110.0, 90.0]),
            ("F d -3 m :2", [40.0, 40.0, 40.0, 90.0, 90.0, 90.0]),
        ] {
            let model =
                Model { cell, space_group: symbol.into(), hall: None, atoms: atoms.clone() };
            let group = SpaceGroup::from_symbol(symbol).unwrap();
            let sf = ModelStructureFactors::new(
                &model,
                &group,
                &[Anomalous { element: Element::from_symbol("Fe").unwrap(), fp: -7.5, fdp: 3.9 }],
            )
            .unwrap();
            let all = sf.to_resolution(4.0).unwrap();
            assert!(all.len() > 100, "{symbol}: {} reflections", all.len());
            let mut worst: f64 = 0.0;
            for (h, (re, im)) in &all {
                let (r, i) = sf.f(*h);
                worst = worst.max((re - r).hypot(im - i) / r.hypot(i).max(1.0));
            }
            assert!(worst < 1e-12, "{symbol}: expansion off the full sum by {worst:e}");
        }
    }
}
