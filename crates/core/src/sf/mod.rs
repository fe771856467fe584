//! Structure factors: the hkl grid, its text and binary (Fdump) forms, and
//! tricubic interpolation.

pub mod fdump;
pub mod form_factor;
pub mod hkl;
pub mod interp;

pub use hkl::{read_hkl, HklEntry};

pub use interp::{lagrange4, polin2, polin3, polin3_weights, polint};
use std::sync::Arc;

/// Dense grid of structure factors indexed by Miller indices, as nanoBragg.c
/// allocates it: `(h_range+1) x (k_range+1) x (l_range+1)` values with l fastest,
/// where `range = max - min + 1`; the extra last index on each axis is padding (0).
///
/// The values are shared: a clone (of the grid, of a plan or a configuration
/// holding it) does not copy them, so a grid of gigabytes is held once.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HklGrid {
    /// Smallest h present.
    pub h_min: i32,
    /// Largest h present.
    pub h_max: i32,
    /// Smallest k present.
    pub k_min: i32,
    /// Largest k present.
    pub k_max: i32,
    /// Smallest l present.
    pub l_min: i32,
    /// Largest l present.
    pub l_max: i32,
    /// Values, l fastest then k then h, padded axes included (shared by
    /// clones; [`Arc::make_mut`] gives a grid its own copy to change).
    pub data: Arc<Vec<f64>>,
}

impl HklGrid {
    /// `max - min + 1` along h.
    pub fn h_range(&self) -> i32 {
        self.h_max - self.h_min + 1
    }
    /// `max - min + 1` along k.
    pub fn k_range(&self) -> i32 {
        self.k_max - self.k_min + 1
    }
    /// `max - min + 1` along l.
    pub fn l_range(&self) -> i32 {
        self.l_max - self.l_min + 1
    }
    /// Value at grid offsets (already minus the minimum), padded axes included.
    #[inline(always)]
    pub fn at(&self, dh: i32, dk: i32, dl: i32) -> f64 {
        self.data[self.index(dh, dk, dl)]
    }
    /// Index into `data` of grid offsets (already minus the minimum).
    #[inline(always)]
    pub fn index(&self, dh: i32, dk: i32, dl: i32) -> usize {
        let nk = (self.k_range() + 1) as usize;
        let nl = (self.l_range() + 1) as usize;
        (dh as usize * nk + dk as usize) * nl + dl as usize
    }
    /// Index into `data` of whole Miller indices, or `None` outside the grid.
    #[inline(always)]
    pub fn index_of(&self, h: i64, k: i64, l: i64) -> Option<usize> {
        let inside = |x: i64, lo: i32, hi: i32| x >= lo as i64 && x <= hi as i64;
        (inside(h, self.h_min, self.h_max)
            && inside(k, self.k_min, self.k_max)
            && inside(l, self.l_min, self.l_max))
        .then(|| {
            self.index(
                (h - self.h_min as i64) as i32,
                (k - self.k_min as i64) as i32,
                (l - self.l_min as i64) as i32,
            )
        })
    }
    /// The values of `data` (or of a gradient in its layout) without the
    /// padding: h, then k, then l fastest.
    pub fn unpadded(&self, data: &[f64]) -> Vec<f64> {
        let mut out =
            Vec::with_capacity((self.h_range() * self.k_range() * self.l_range()).max(0) as usize);
        for h in 0..self.h_range() {
            for k in 0..self.k_range() {
                for l in 0..self.l_range() {
                    out.push(data[self.index(h, k, l)]);
                }
            }
        }
        out
    }
    /// A grid of the same bounds holding `values` (laid out as
    /// [`HklGrid::unpadded`] gives them); `None` for another count.
    pub fn with_values(&self, values: &[f64]) -> Option<HklGrid> {
        let (hr, kr, lr) = (self.h_range(), self.k_range(), self.l_range());
        if values.len() != (hr * kr * lr).max(0) as usize {
            return None;
        }
        let mut data = vec![0.0; self.data.len()];
        let mut it = values.iter();
        for h in 0..hr {
            for k in 0..kr {
                for l in 0..lr {
                    data[self.index(h, k, l)] = *it.next()?;
                }
            }
        }
        Some(HklGrid { data: Arc::new(data), ..*self })
    }
}

/// A test grid: h, k in `-hk..=hk`, l in `-l..=l`, with structure factors
/// that vary from point to point (`10 + |7h + 3k + l|`).
#[cfg(test)]
pub(crate) fn test_entries(hk: i32, l: i32) -> Vec<HklEntry> {
    let mut entries = Vec::new();
    for h in -hk..=hk {
        for k in -hk..=hk {
            for l in -l..=l {
                let f = 10.0 + ((h * 7 + k * 3 + l) as f64).abs();
                entries.push(HklEntry { h: h as f64, k: k as f64, l: l as f64, f });
            }
        }
    }
    entries
}
