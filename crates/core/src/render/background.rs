//! The amorphous background (`-stol`) added to a rendered row: the C-bit sum
//! of [`Background::pixel`] in the exact render, the lanes of
//! [`FastBackground`] (compiled for this CPU's SIMD level) in the fast ones.

use super::cpu::SimdLevel;
use super::rows::{roi_row, Pixel};
use crate::amorphous::fast::FastBackground;
use crate::amorphous::Background;
use crate::real::{Mask, Num};
use crate::setup::Plan;

/// The background as a render adds it: nonBragg's sum, or its fast form.
/// Made before the rows are rendered, so that the fast form's tables are
/// built once, outside the parallel rows.
#[derive(Clone, Copy)]
pub(crate) struct RowBackground<'a> {
    bg: &'a Background,
    lanes: Option<&'a FastBackground>,
}

impl<'a> RowBackground<'a> {
    /// `bg` as a render adds it: with `fast`, its fast form where it has one.
    pub(crate) fn new(bg: &'a Background, fast: bool) -> Self {
        RowBackground { bg, lanes: fast.then(|| bg.fast()).flatten() }
    }

    /// Adds the background to the pixels of row `s` inside the ROI and not
    /// masked.
    pub(crate) fn add_row<T: Pixel>(self, plan: &Plan, s: usize, row: &mut [T]) {
        let Some((lo, hi)) = roi_row(plan, s) else { return };
        let fp = plan.detector.fpixels;
        let mask = plan.mask.as_deref().map(|m| &m[s * fp..(s + 1) * fp]);
        let target = Row { bg: self.bg, s, lo, hi, mask };
        match self.lanes {
            Some(lanes) => target.add_fast(lanes, row),
            None => target.add_exact(row),
        }
    }

    /// The background in pixel `[f, s]` as [`Self::add_row`] adds it.
    pub(crate) fn pixel(self, f: usize, s: usize) -> f64 {
        if let Some(lanes) = self.lanes {
            let (v, beyond) = lanes.lanes::<f64>(f, s);
            if !beyond {
                return v;
            }
        }
        self.bg.pixel(f, s, &mut 0.0)
    }
}

/// The pixels `lo..=hi` of row `s` that take the background.
struct Row<'a> {
    bg: &'a Background,
    s: usize,
    lo: usize,
    hi: usize,
    mask: Option<&'a [u16]>,
}

impl Row<'_> {
    fn add_exact<T: Pixel>(&self, row: &mut [T]) {
        // the background's own solid-angle sum is not the render's
        let mut omega = 0.0;
        for f in self.lo..=self.hi {
            if self.mask.is_none_or(|m| m[f] != 0) {
                row[f] = row[f].plus(self.bg.pixel(f, self.s, &mut omega));
            }
        }
    }

    fn add_fast<T: Pixel>(&self, lanes: &FastBackground, row: &mut [T]) {
        #[cfg(target_arch = "x86_64")]
        {
            use super::simd::{avx2, avx512};
            match level() {
                // SAFETY: `level` is at most this CPU's (`cpu::simd_level`).
                SimdLevel::Avx512 => return unsafe { self.avx512::<avx512::F64x8, T>(lanes, row) },
                // SAFETY: as above.
                SimdLevel::Avx2 => return unsafe { self.avx2::<avx2::F64x4, T>(lanes, row) },
                SimdLevel::Scalar => {}
            }
        }
        self.lanes::<f64, T>(lanes, row)
    }

    /// [`Self::lanes`] compiled with AVX-512F.
    ///
    /// # Safety
    /// The CPU must have AVX-512F, AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn avx512<V: Num<Scalar = f64>, T: Pixel>(&self, lanes: &FastBackground, row: &mut [T]) {
        self.lanes::<V, T>(lanes, row)
    }

    /// [`Self::lanes`] compiled with AVX2 and FMA.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn avx2<V: Num<Scalar = f64>, T: Pixel>(&self, lanes: &FastBackground, row: &mut [T]) {
        self.lanes::<V, T>(lanes, row)
    }

    #[inline(always)]
    fn lanes<V: Num<Scalar = f64>, T: Pixel>(&self, lanes: &FastBackground, row: &mut [T]) {
        let mut f0 = self.lo;
        while f0 <= self.hi {
            let (v, beyond) = lanes.lanes::<V>(f0, self.s);
            let beyond = beyond.bits();
            for i in 0..V::LANES.min(self.hi + 1 - f0) {
                let f = f0 + i;
                if self.mask.is_some_and(|m| m[f] == 0) {
                    continue;
                }
                let value = if beyond >> i & 1 != 0 {
                    self.bg.pixel(f, self.s, &mut 0.0)
                } else {
                    v.lane(i)
                };
                row[f] = row[f].plus(value);
            }
            f0 += V::LANES;
        }
    }
}

/// This CPU's SIMD level (or the one `NANOBRAGG_SIMD` names), read once.
#[cfg(target_arch = "x86_64")]
fn level() -> SimdLevel {
    static LEVEL: std::sync::OnceLock<SimdLevel> = std::sync::OnceLock::new();
    *LEVEL.get_or_init(super::cpu::simd_level)
}
